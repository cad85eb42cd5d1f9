"""`verify PACK`: re-hash every file, re-derive every stage once, compare decisions and data.

What is compared (the pack format is a public API, so prose never is):
- every file against index.json (no symlinks, no special files, no empty folders, nothing unlisted
  but the provenance files written after the index);
- before anything is opened: a pack holding a symlink, a special file, an unreadable entry or a file
  over packfs.MAX_FILE_BYTES is reported and nothing else of it is read; a record naming a path out of
  its folder (packfs.plain_name) is reported and nothing is derived;
- each stage's status and the numbers/decision fields of its data (prose keys dropped) against
  both `<stage>/outcome.json` and `pack.json`;
- each gate's status, the label and the finer labels against what the re-derived gates give;
- the gates a pack of its schema version must hold, and the files each stage that ran must hold;
- pack.json's facts that another record of the pack holds too (crosscheck.py): every folder a listed stage,
  the run options as the benchmark recorded them, the commit, dirty flag and GPU as env.json, the pack id
  and bench/run.json give them; every shipped variant the run selected or the benchmark timed has its
  cells in every GPU stage (coverage.py);
- for a pack that carried cells from earlier packs (pack.json `incremental`), the chain: each source pack
  found and verified, every carried file and key equal to the source's (incremental/chain.py).
Reasons, report.md, report.html and comment.md are views: covered by the hashes, re-rendered on
demand by `report --out`, never compared as text.

Standard library only: a reviewer verifies on a bare Python.
"""
from __future__ import annotations

import json
import math
import stat
from dataclasses import dataclass
from pathlib import Path

from .binary import sha256_file
from .coverage import coverage_problems
from .crosscheck import fact_problems
from .derivation import LOG_FILE, RUNNER_FILE, content_digest, decision_view, derive_all, view_differences
from .incremental.chain import check_incremental
from .jsonio import read_json
from .model import FAIL, KNOWN_SCHEMAS, PASS, UNINDEXED_FILES, ModelError, StageOutcome
from .pack import PackError, stage_names_of
from .packfs import MAX_FILE_BYTES, plain_name
from .provenance.check import UNCHECKED, ProvenanceCheck, check_provenance, signer_options
from .records.migrations import read_pack
from .records.pack import ABSENT, GateEntry, PackJson, PackRecord, StageTiming, Timings, ZeroDelta, present
from .records.runner import RunnerRecord
from .records.schema import SchemaSpec, spec
from .records.view import view
from .stages.order import stage_module
from .stages.procs import PROCS_FILE

MAX_LISTED = 20  # per kind of file problem; the rest are counted


def shown(name: str) -> str:
    """A name from a pack as one printable line: control characters, and bytes that are not UTF-8,
    escaped (a file name holding a newline cannot print a line of its own)."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in name)


@dataclass(frozen=True)
class Listing:
    """What a pack folder holds, read without opening any file."""

    files: frozenset[str]  # regular files (relative, posix), none larger than MAX_FILE_BYTES
    unsafe: tuple[str, ...]  # entries no reader may open: symlinks, special files, unreadable or oversized
    empty: tuple[str, ...]  # folders that hold nothing: a pack's folders are those of its files


def scan(pack_dir: Path) -> Listing:
    """Walk the pack with lstat only: nothing is opened, no link is followed."""
    files, unsafe, empty = set(), [], []
    stack = [pack_dir]
    while stack:
        d = stack.pop()
        where = shown(d.relative_to(pack_dir).as_posix())
        try:
            entries = sorted(d.iterdir())
        except OSError as exc:
            unsafe.append(f"unreadable folder in pack: {where} ({exc.strerror or exc})")
            continue
        if not entries and d != pack_dir:
            empty.append(f"empty folder in pack: {where} (a pack's folders are those of the files index.json "
                         "lists)")
        for p in entries:
            rel = p.relative_to(pack_dir).as_posix()
            try:
                st = p.lstat()
            except OSError as exc:
                unsafe.append(f"unreadable entry in pack: {shown(rel)} ({exc.strerror or exc})")
                continue
            if stat.S_ISLNK(st.st_mode):
                unsafe.append(f"symlink in pack: {shown(rel)} (a pack holds regular files only)")
            elif stat.S_ISDIR(st.st_mode):
                stack.append(p)
            elif not stat.S_ISREG(st.st_mode):
                unsafe.append(f"special file in pack: {shown(rel)}")
            elif st.st_size > MAX_FILE_BYTES:
                unsafe.append(f"file too large: {shown(rel)} ({st.st_size} bytes; no file of a pack is over "
                              f"{MAX_FILE_BYTES >> 20} MiB): not read")
            else:
                files.add(rel)
    return Listing(frozenset(files), tuple(unsafe), tuple(empty))


def list_files(pack_dir: Path) -> tuple[set[str], list[str]]:
    """(regular files relative to the pack, problems: symlinks, special files, oversized or unreadable
    entries, empty folders)."""
    listing = scan(pack_dir)
    return set(listing.files), [*listing.unsafe, *listing.empty]


def _listed(kind: str, names: list[str]) -> list[str]:
    out = [f"{kind}: {shown(n)}" for n in names[:MAX_LISTED]]
    if len(names) > MAX_LISTED:
        out.append(f"{kind}: ... and {len(names) - MAX_LISTED} more")
    return out


def read_index(folder: Path) -> tuple[dict | None, list[str]]:
    """(index.json's files table of name -> sha256, problems): None with the problem when it is corrupt or
    malformed. FileNotFoundError without one."""
    try:
        index = read_json(folder / "index.json")
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
        return None, [f"index.json is corrupt: {exc}"]
    listed = index.get("files") if isinstance(index, dict) else None
    if not isinstance(listed, dict) or not all(isinstance(v, str) for v in listed.values()):
        return None, ["index.json is malformed: no files table of name -> sha256"]
    return listed, []


def compare_index(folder: Path, listed: dict, present: set[str]) -> list[str]:
    """The files present against the index's table: missing, unlisted, hashed otherwise."""
    problems = _listed("missing file", sorted(set(listed) - present))
    problems += _listed("file not in index.json", sorted(present - set(listed)))
    bad, unreadable = [], []
    for rel in sorted(set(listed) & present):
        try:
            if sha256_file(folder / rel) != listed[rel]:
                bad.append(rel)
        except OSError:  # no read permission, an I/O error: named, never a traceback
            unreadable.append(rel)
    return problems + _listed("hash mismatch", bad) + _listed("unreadable file", unreadable)


def check_index(pack_dir: Path, listing: Listing | None = None) -> list[str]:
    """Every file hashed as index.json says; nothing else in the pack but the unindexed files. A pack
    holding an entry no reader may open (Listing.unsafe) gets those problems alone: nothing is read."""
    listing = listing or scan(pack_dir)
    if listing.unsafe:
        return list(listing.unsafe)
    try:
        listed, problems = read_index(pack_dir)
    except FileNotFoundError:
        raise PackError(f"{pack_dir}: no index.json: not a finished pack") from None
    if listed is None:
        return problems
    return list(listing.empty) + compare_index(pack_dir, listed, set(listing.files) - set(UNINDEXED_FILES))


def _load_pack_json(pack_dir: Path) -> tuple[dict | None, list[str]]:
    try:
        pj = read_json(pack_dir / "pack.json")
    except FileNotFoundError:
        return None, ["no pack.json"]
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
        return None, [f"pack.json is corrupt: {exc}"]
    shape = view(PackJson, pj)  # a view of something that is no object holds no tables
    if not isinstance(shape.stages, dict) or not isinstance(shape.gates, dict):
        return None, ["pack.json is malformed: no stages/gates tables"]
    return pj, []


def check_required_files(pack_dir: Path, schema: SchemaSpec, outcomes: dict[str, StageOutcome],
                         stages: str | None) -> list[str]:
    """The root files of the schema; for each stage that decided (pass or fail): its runner record,
    its outcome, its declared raw files, the log of every cell it ran and, for a stage that ran in
    its own process, that process's log."""
    problems = [f"missing file: {f} (every pack of schema {schema.version} holds it)"
                for f in schema.root_files if not (pack_dir / f).is_file()]
    for name, out in outcomes.items():
        sdir = pack_dir / name
        for f in (RUNNER_FILE, "outcome.json"):
            if not (sdir / f).is_file():
                problems.append(f"stage {name}: missing {name}/{f}")
        if out.status not in (PASS, FAIL):
            continue
        mod = stage_module(name, stages)
        # a passing stage that loads the kernels keeps the record of the binary it loaded (the one_binary gate
        # reads it; without this rule a deleted record would only narrow what that gate checks)
        record = getattr(mod, "BINARY_RECORD", None)
        if out.status == PASS and record and not (sdir / record).is_file():
            problems.append(f"stage {name}: missing {name}/{record} (a stage that passed records the binary "
                            "it loaded)")
        required = mod.required_files(sdir) if hasattr(mod, "required_files") else getattr(mod, "REQUIRED_FILES", ())
        for pattern in required:
            if not any(p.is_file() for p in sdir.glob(pattern)):
                problems.append(f"stage {name}: missing raw file {name}/{pattern} (a stage that decided keeps it)")
        try:
            if RunnerRecord.from_json(read_json(sdir / RUNNER_FILE)).ran_in_process and not (sdir / LOG_FILE).is_file():
                problems.append(f"stage {name}: missing {name}/{LOG_FILE} (the log of its process)")
            cells = read_json(sdir / "procs.json") if (sdir / "procs.json").is_file() else {}
        except (OSError, ValueError, AttributeError):
            continue  # unreadable records are named by the stage's derivation
        if isinstance(cells, dict):
            problems += [f"stage {name}: missing cell log {name}/{cell}.log" for cell in cells
                         if not (sdir / f"{cell}.log").is_file()]
    return problems


def read_outcome(pack_dir: Path, name: str) -> StageOutcome | str | None:
    """A stage's stored outcome.json: the record, why it cannot be read, or None when there is none (named by
    check_required_files). Read once per verify: compare_stage and the content digest take it from here."""
    try:
        return StageOutcome.from_json(read_json(pack_dir / name / "outcome.json"))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError, ModelError) as exc:
        return f"stage {name}: outcome.json unreadable: {exc}"


def compare_stage(name: str, out: StageOutcome, pj: PackRecord, stored: StageOutcome | str | None,
                  schema: SchemaSpec) -> list[str]:
    """The derived outcome against pack.json and the stored outcome (read_outcome)."""
    problems = []
    if pj.stage_status(name) != out.status:
        problems.append(f"stage {name}: pack.json says {pj.stage_status(name)} but its files give {out.status}")
    if not isinstance(stored, StageOutcome):
        return problems + ([stored] if stored else [])
    if stored.status != out.status:
        problems.append(f"stage {name}: outcome.json says {stored.status} but its files give {out.status}")
    diffs = view_differences(decision_view(stored.data, schema.prose_keys),
                             decision_view(json.loads(json.dumps(out.data)), schema.prose_keys))
    problems += [f"stage {name}: outcome.json data differs from its files at {d}" for d in diffs[:5]]
    if len(diffs) > 5:
        problems.append(f"stage {name}: ... and {len(diffs) - 5} more data differences")
    return problems


def record_name_problems(pack_dir: Path, files: frozenset[str], stage_names) -> list[str]:
    """Names that records give readers to join to a stage folder (the cells of procs.json) and that are
    not file names inside it: checked before any stage reads them."""
    problems = []
    for name in stage_names:
        if f"{name}/{PROCS_FILE}" not in files:
            continue
        try:
            cells = read_json(pack_dir / name / PROCS_FILE)
        except (OSError, ValueError, RecursionError):
            continue  # an unreadable record is named by the stage's derivation
        if isinstance(cells, dict):
            problems += [f"stage {name}: {PROCS_FILE} names cell {shown(repr(c))}: not a file name inside "
                         f"{name}/ (nothing of this pack is derived)" for c in cells if not plain_name(c)]
    return problems


def pack_folder(pack_dir: Path) -> Path:
    """The pack folder, resolved. PackError when it is not a pack folder at all."""
    if pack_dir.is_symlink() and pack_dir.name != "latest":
        raise PackError(f"{pack_dir}: a pack folder is never a symlink")
    if not pack_dir.is_dir():
        raise PackError(f"{pack_dir}: no such pack folder")
    if pack_dir.resolve().name.startswith(".incomplete-"):
        raise PackError(f"{pack_dir}: an interrupted run's folder, not a finished pack")
    return pack_dir.resolve()


def verify_pack(pack_dir: Path, *, stages: str | None = None, carried_from: Path | None = None,
                _depth: int = 0, _seen: dict | None = None, derived_out: dict | None = None) -> list[str]:
    """Mismatches (empty when the pack verifies). Raises PackError when it is not a pack at all.
    A pack holding an entry no reader may open, or a record naming a path out of its folder, is
    reported without reading or deriving anything more. `carried_from`: the folder that holds the packs
    this pack's carried cells come from (default: the pack's own packs folder)."""
    pack_dir = pack_folder(pack_dir)
    seen = {} if _seen is None else _seen  # source packs verified in this call: each once
    listing = scan(pack_dir)
    problems = check_index(pack_dir, listing)
    if listing.unsafe:
        return problems
    raw, pj_problems = _load_pack_json(pack_dir)
    if raw is None:
        return problems + pj_problems
    version = view(PackJson, raw).schema_version
    sp = spec(version)
    if sp is None:
        return problems + [f"pack.json schema_version {version!r} is unknown to this verify (it "
                           f"knows {', '.join(map(str, KNOWN_SCHEMAS))}): use a newer evpack"]
    try:
        pj = read_pack(raw)  # the reader of its schema version
    except ModelError as exc:
        return problems + [f"pack.json is malformed: {exc}"]
    if not sp.empty_folders_refused:  # older writers could leave a stage's folder empty: no byte, no claim
        problems = [p for p in problems if p not in listing.empty]
    if pj.complete is not True:
        problems.append("pack.json is not marked complete")
    if pack_dir.name != present(pj.pack_id):
        problems.append(f"folder name {pack_dir.name} != pack_id {present(pj.pack_id)}")
    missing_gates = [g for g in sp.required_gates if g not in pj.gates]
    if missing_gates:
        problems.append(f"pack.json lacks gates every schema-{sp.version} pack holds: {', '.join(missing_gates)}")
    problems += fact_problems(pack_dir, listing.files, pj, raw, sp.version)
    unsafe_names = record_name_problems(pack_dir, listing.files, stage_names_of(pj))
    if unsafe_names:
        return problems + unsafe_names
    derived = derive_all(pack_dir, stage_names_of(pj), stages=stages, gate_names=sp.required_gates,
                         parallel=True)
    if derived_out is not None:  # the outcomes as the files give them, for a view of a verified pack
        derived_out.update(derived.stages)
    problems += check_required_files(pack_dir, sp, derived.stages, stages)
    stored = {name: read_outcome(pack_dir, name) for name in dict.fromkeys([*stage_names_of(pj), *derived.stages])}
    for name, out in derived.stages.items():
        problems += compare_stage(name, out, pj, stored[name], sp)
    for g, out in derived.gates.items():
        rec = pj.gates.get(g)
        said = None if rec is None or rec.status is ABSENT else rec.status
        if rec is not None and said != out.status:
            problems.append(f"gate {g}: pack.json says {said} but the files give {out.status}")
    unknown = sorted(set(pj.gates) - set(derived.gates))
    if unknown:
        problems.append(f"unknown gates in pack.json: {unknown}")
    if present(pj.label) != derived.label or present(pj.labels) != derived.labels:
        problems.append(f"label: pack.json says {present(pj.label)} {present(pj.labels)} but the gates give "
                        f"{derived.label} {derived.labels}")
    if pj.so_sha256 is not ABSENT and pj.so_sha256 != derived.facts.so_sha256:
        problems.append(f"so_sha256: pack.json says {pj.so_sha256} but the build's files give {derived.facts.so_sha256}")
    if pj.summary.canonical_speedup is not ABSENT:
        problems += [f"summary.{d}" for d in view_differences(pj.summary.canonical_speedup,
                                                               derived.facts.canonical_speedup, "canonical_speedup")]
    problems += record_type_problems(pj)
    problems += coverage_problems(pack_dir, pj.options, derived.stages)
    digest = stored_digest(pj, stored, sp) if sp.digest_of_outcomes else None
    if digest is not None and pj.content_digest != digest:
        problems.append(f"content_digest: pack.json says {shown(repr(pj.content_digest))} but its outcomes, gates "
                        f"and label give {digest}")
    zd = pj.zero_delta
    if isinstance(zd, ZeroDelta) and present(zd.same) != (
            present(zd.previous_digest) == present(pj.content_digest)):
        problems.append("zero_delta.same contradicts the digests")

    def verify_source(src: Path, depth: int) -> list[str]:
        key = src.resolve()
        if key not in seen:
            try:
                seen[key] = verify_pack(src, stages=stages, carried_from=carried_from, _depth=depth, _seen=seen)
            except PackError as exc:
                seen[key] = [str(exc)]
        return seen[key]

    problems += check_incremental(pack_dir, pj.to_json(), verify_source, carried_from=carried_from, depth=_depth)
    problems += timings_problems(pj.to_json())
    return problems


def stored_digest(pj: PackRecord, stored: dict, schema: SchemaSpec) -> str | None:
    """The content digest of the pack's outcome.json files (read_outcome; each compared with its raw files by
    compare_stage), pack.json's gates and label, by the schema's rules; None when an outcome is missing or
    unreadable (named by check_required_files and compare_stage)."""
    outcomes = {name: stored.get(name) for name in stage_names_of(pj)}
    if not all(isinstance(o, StageOutcome) for o in outcomes.values()):
        return None
    gates = {g: GateEntry(present(e.status)) for g, e in pj.gates.items()}  # an entry that is no object: no status
    return content_digest(outcomes, gates, present(pj.label), schema.digest_prose_keys)


def record_type_problems(pj: PackRecord) -> list[str]:
    """pack.json fields the reports read, held to the types every writer gave them (a field a pack's schema
    does not hold is ABSENT and passes)."""
    problems = []
    if pj.warnings is not ABSENT and not (isinstance(pj.warnings, list) and all(isinstance(w, str) for w in pj.warnings)):
        problems.append("pack.json warnings: not a list of strings")
    if pj.zero_delta is not ABSENT and pj.zero_delta is not None and not isinstance(pj.zero_delta, ZeroDelta):
        problems.append("pack.json zero_delta: neither null nor an object")
    if pj.signing is not ABSENT and pj.signing is not None and not isinstance(pj.signing, dict):
        problems.append("pack.json signing: neither null nor an object")
    return problems


def _seconds(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


def timings_problems(pj: dict) -> list[str]:
    """The shape of pack.json -> timings where it says how the run went (wall_s, mode, per-stage start and
    end): packs made before it have none of these keys and are not asked for them. A record, not a decision."""
    pack = view(PackJson, pj)
    if pack.timings is None:
        return []
    if not isinstance(pack.timings, dict):
        return ["timings: not an object"]
    t = view(Timings, pack.timings)
    problems = []
    if t.holds("wall_s") and not _seconds(t.wall_s):
        problems.append(f"timings.wall_s: {t.wall_s!r} is not a number of seconds")
    if t.holds("mode") and t.mode not in ("overlapped", "sequential"):
        problems.append(f"timings.mode: {t.mode!r} is neither overlapped nor sequential")
    if not t.holds("stages"):
        return problems
    if not isinstance(t.stages, dict):
        return problems + ["timings.stages: not an object"]
    known = pack.stages if isinstance(pack.stages, dict) else {}
    for name, value in t.stages.items():
        rec = view(StageTiming, value)
        if name not in known:
            problems.append(f"timings.stages.{name}: not a stage of this pack")
        elif not isinstance(value, dict) or not all(_seconds(x) for x in (rec.start_s, rec.end_s, rec.duration_s)):
            problems.append(f"timings.stages.{name}: start_s, end_s and duration_s must be seconds")
        elif rec.end_s < rec.start_s or abs(rec.end_s - rec.start_s - rec.duration_s) > 0.01 or (
                _seconds(t.wall_s) and rec.end_s > t.wall_s + 0.01):
            problems.append(f"timings.stages.{name}: start {rec.start_s}, end {rec.end_s} and duration "
                            f"{rec.duration_s} do not agree (or end after wall_s)")
    return problems


def verify_provenance(pack_dir: Path, *, allowed_signers: Path | None = None,
                      require_signature: bool = False) -> ProvenanceCheck:
    """The provenance statement and its signature (separate from the consistency checks above).

    The statement's subjects must match index.json and the built objects, its facts the pack's
    files; with allowed_signers the signature must be good and by a listed signer.
    """
    return check_provenance(pack_dir, allowed_signers=allowed_signers, require_signature=require_signature)


def verify_all(pack_dir: Path, *, allowed_signers: Path | None = None, require_signature: bool = False,
               stages: str | None = None, carried_from: Path | None = None,
               derived_out: dict | None = None) -> tuple[list[str], ProvenanceCheck]:
    """Everything `verify` checks: the pack's consistency and its provenance statement (and signature).
    Bad signing options (an unreadable allowed-signers file, ...) raise before the pack is read; a pack
    holding an entry no reader may open (a symlink, a named pipe, ...) is reported before any of its
    files is opened, its signature unchecked. derived_out, when given, receives each stage's outcome as
    the pack's files give it (what `report` renders: never a stored field that no derivation gives)."""
    signer_options(allowed_signers, require_signature)
    unsafe = scan(pack_folder(pack_dir)).unsafe
    if unsafe:
        return list(unsafe), ProvenanceCheck(UNCHECKED, (), None, None,
                                             "not checked: the pack holds entries that are not opened")
    prov = verify_provenance(pack_dir, allowed_signers=allowed_signers, require_signature=require_signature)
    return (verify_pack(pack_dir, stages=stages, carried_from=carried_from, derived_out=derived_out)
            + list(prov.problems), prov)
