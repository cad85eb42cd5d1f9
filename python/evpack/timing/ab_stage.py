"""The A/B part of the bench stage: prepare the base in the run, write and re-derive bench/ab.json.

Files (only in a run with `--baseline REF` / `--self-check`):
  ab_build/build.log, ab_build/result.json   REF's build (copied from the worktree's build output)
  ab_binary.json                              the base shared object this process loaded + SHA-256
  ab_samples.csv.xz                           the base's raw samples (same columns as samples.csv.xz)
  ab.json                                     ab.build_ab(): meta, rule, base records, verdicts; written as
                                              ab.json.xz when over AB_XZ_FROM_BYTES (385 KB per shard of a full suite)
  ab_confirm_samples.csv.xz                   rule version 2 on: the confirmation round's samples (head and
                                              base) of the rows re-timed before a SLOWER verdict; their
                                              records are ab.json's confirm_records
Older packs hold the samples as .csv.gz and ab.json plain: every reader takes either form (packfs.member, one
form per file).

Status of the A/B part (ab.json "status"): pass = both sides were timed and compared (the
verdicts say faster/slower); error = the base did not build, load or run (reason and log kept),
the head's benchmark and every other gate are unaffected. The bench stage's outcome carries it in
data["ab"], appends ab.summary_line() to its reason, and puts the SLOWER rows of ours in
data["regressions"] (what sets the `perf-regression` label) instead of the previous-pack diff.
"""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from ..jsonio import COMPACT_FROM_BYTES, json_text, read_member_json
from ..packfs import stored_forms, write_stored
from ..records.ab import BaseBuild, BaselineOption
from ..records.bench import AbRecord, BenchRow
from . import ab
from .ab_rows import ConfirmSamples
from .ab_rule import Rule
from .baseline_build import wait_ready
from .shards import shard_dirs
from .summary import key_problems, read_samples, samples_file

log = logging.getLogger(__name__)

BUILD_DIR = "ab_build"
BINARY_FILE = "ab_binary.json"
CONFIRM_SAMPLES = "ab_confirm_samples.csv"
CONFIRM_SAMPLES_FILE = f"{CONFIRM_SAMPLES}.xz"  # the name a writer gives it (older packs: .csv.gz)
AB_XZ_FROM_BYTES = COMPACT_FROM_BYTES  # an ab.json larger than this is stored as ab.json.xz
META_KEYS = ("status", "reason", "base_ref", "base_commit", "head_commit", "head_dirty", "self_check",
             "base_so_sha256", "head_so_sha256", "base_build")


def required_files(bench_dir: Path) -> tuple[str, ...]:
    """The A/B files a bench folder with an ab.json keeps: the base build's record and log when the base was
    built, the base binary and samples when both sides were timed (ab.json's own record says which)."""
    try:
        meta = read_member_json(bench_dir, ab.AB_FILE)
    except FileNotFoundError:
        return ()
    except (OSError, ValueError, RecursionError):
        return ("ab.json*",)  # unreadable: the derivation names it
    if not isinstance(meta, dict):
        return ()
    out: tuple[str, ...] = ()
    record = AbRecord.from_json(meta)
    if record.base_build is not None:
        out += (f"{BUILD_DIR}/result.json", f"{BUILD_DIR}/build.log")
    if record.status == "pass":
        out += (BINARY_FILE, f"{ab.BASE_SAMPLES}.*")
    return out


def _write_json(path: Path, obj) -> None:
    from ..jsonio import write_json

    write_json(path, obj)


def prepare(options: dict, stage_dir: Path, head_sha256: str | None, head_dirty: bool | None):
    """(BaseSide or None, meta or None). meta is None when the run has no baseline.

    Copies REF's build log into the pack and loads REF's extension; any failure makes the
    A/B part `error` (meta says why) and returns no BaseSide: the head is timed as usual.
    """
    option = options.get("baseline")
    if not option:
        return None, None
    spec = BaselineOption.from_json(option)
    meta = {"status": "pass", "reason": "", "base_ref": spec.ref,
            "base_commit": spec.commit, "head_commit": spec.head_commit, "head_dirty": head_dirty,
            "self_check": bool(spec.self_check), "base_so_sha256": None, "head_so_sha256": head_sha256,
            "base_build": None}
    late = wait_ready(spec.ready_file, say=lambda line: log.info("%s", line))
    if late:
        return None, dict(meta, status="error", reason=late)
    out = stage_dir / BUILD_DIR
    out.mkdir(parents=True, exist_ok=True)
    src = Path(spec.build_output or "/nonexistent")
    for name in ("build.log", "result.json"):
        if (src / name).is_file():
            shutil.copyfile(src / name, out / name)
    try:
        result = BaseBuild.from_json(json.loads((out / "result.json").read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError) as exc:
        return None, dict(meta, status="error", reason=f"no result of the base build ({type(exc).__name__})")
    meta = dict(meta, base_build=result.record())
    if result.error or not result.so_path:
        why = result.error or "no shared object"
        return None, dict(meta, status="error", reason=f"{why}; log kept in bench/{BUILD_DIR}/build.log")
    try:
        from .ab_runner import BASE_MODULE, load_base

        side = load_base(Path(result.so_path), options.get("variants"))
    except Exception as exc:  # noqa: BLE001 - a base that cannot be loaded is the A/B's error, not the stage's
        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        return None, dict(meta, status="error", reason=f"base extension did not load: {why}")
    _write_json(stage_dir / BINARY_FILE, {"module": BASE_MODULE, "path": side.path, "sha256": side.sha256})
    meta = dict(meta, base_so_sha256=side.sha256)
    if side.sha256 != result.so_sha256:
        return None, dict(meta, status="error", reason=f"the loaded base {side.sha256[:12]} is not the built "
                                                       f"{str(result.so_sha256)[:12]}")
    if not side.pairs:
        return None, dict(meta, status="error", reason="the base extension lists no kernels (after --variants)")
    return side, meta


def split(records: list[dict], samples: dict[str, list[float]]):
    """(head records, base records, head samples, base samples): the base's rows never enter summary.json."""
    views = [(r, BenchRow.from_json(r)) for r in records]
    base = [r for r, v in views if v.impl == ab.BASE]
    head = [r for r, v in views if v.impl != ab.BASE]
    keys = {v.key for _, v in views if v.impl == ab.BASE}
    return (head, base, {k: v for k, v in samples.items() if k not in keys},
            {k: v for k, v in samples.items() if k in keys})


def split_confirm(samples: dict[str, list[float]]) -> ConfirmSamples:
    """Confirmation-round samples by side: {head key: times} and {base key: times}."""
    return ConfirmSamples(head={k: v for k, v in samples.items() if k.startswith(ab.OURS + "|")},
                          base={k: v for k, v in samples.items() if k.startswith(ab.BASE + "|")})


def write(stage_dir: Path, meta: dict, head_rows: list[dict], head_samples: dict, base_records: list[dict],
          base_samples: dict, confirm_records: list[dict] | None = None, confirm_samples: dict | None = None) -> dict:
    """Write ab_samples.csv.xz (and, with a confirmation round, ab_confirm_samples.csv.xz) and ab.json(.xz); returns
    the ab.json content."""
    from .summary import write_samples

    if AbRecord.from_json(meta).status == "pass" and not base_samples:
        first = next((f"; first {r.key}: {str(r.reason)[:160]}" for r in map(BenchRow.from_json, base_records)
                      if r.reason), "")
        meta = dict(meta, status="error", reason=f"no row of the base was timed{first}")
    try:
        write_samples(stage_dir / ab.BASE_SAMPLES_FILE, base_records, base_samples)
        confirm = None
        if confirm_samples:
            write_samples(stage_dir / CONFIRM_SAMPLES_FILE, confirm_records or [], confirm_samples)
            confirm = split_confirm(confirm_samples)
        data = ab.build_ab(meta, head_rows, head_samples, base_records, base_samples, confirm=confirm)
        data = dict(data, confirm_records=list(confirm_records or []))
    except Exception as exc:  # noqa: BLE001 - the A/B must never cost the head's benchmark
        log.warning("A/B: could not write the base's results: %s", exc)
        for p in stored_forms(stage_dir, ab.BASE_SAMPLES) + stored_forms(stage_dir, CONFIRM_SAMPLES):
            p.unlink(missing_ok=True)
        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        data = ab.build_ab(dict(meta, status="error", reason=f"writing the A/B failed: {why}"), [], {}, [], {})
        data = dict(data, confirm_records=[])
    write_ab(stage_dir, data)
    return data


def write_ab(stage_dir: Path, data: dict) -> Path:
    """ab.json, or ab.json.xz when its text is over AB_XZ_FROM_BYTES (the full self-check reference pack's: 385 KB
    per shard, 25 KB in xz); the other form is removed, so the folder holds one. Returns the file written."""
    text = json_text(data).encode("ascii")
    path = stage_dir / (f"{ab.AB_FILE}.xz" if len(text) > AB_XZ_FROM_BYTES else ab.AB_FILE)
    for old in stored_forms(stage_dir, ab.AB_FILE):
        if old != path:
            old.unlink()
    write_stored(path, text)
    return path


def known_rule(written: dict) -> tuple[Rule | None, str]:
    """(the rule an ab.json was made with, problem): its rule_version (none: version 1) picks the rule in the
    code, and the rule the file carries must be that one, word for word."""
    record = AbRecord.from_json(written)
    version = record.rule_version if "rule_version" in record.raw else 1
    rule = ab.RULES.get(version) if isinstance(version, int) and not isinstance(version, bool) else None
    if rule is None:
        return None, f"{ab.AB_FILE}: unknown rule version {version!r}"
    if record.rule.raw != rule.to_json():
        return None, f"{ab.AB_FILE}: its rule ({record.rule.name!r}) is not rule version {version} ({rule.name!r})"
    return rule, ""


def derive(stage_dir: Path, head_rows: list[dict], head_samples: dict, expected_commit: str | None):
    """(ab.json re-derived or None, problem or ''). Standard library only (verify)."""
    if not stored_forms(stage_dir, ab.AB_FILE):
        return None, (f"run.json names baseline {expected_commit[:12]} but there is no {ab.AB_FILE}"
                      if expected_commit else "")
    try:
        written = read_member_json(stage_dir, ab.AB_FILE)
        meta = {k: written[k] for k in META_KEYS}
        rule, problem = known_rule(written)
        if problem:
            return None, problem
        base_records = written["base_records"]
        sample_file = samples_file(stage_dir, ab.BASE_SAMPLES)
        base_samples = read_samples(sample_file) if sample_file.is_file() else {}
        confirm_file = samples_file(stage_dir, CONFIRM_SAMPLES)
        confirm_samples = read_samples(confirm_file) if rule.rule_version >= 2 and confirm_file.is_file() else {}
        recomputed = ab.build_ab(meta, head_rows, head_samples, base_records, base_samples, rule,
                                 split_confirm(confirm_samples))
        if "confirm_records" in written:
            recomputed = dict(recomputed, confirm_records=AbRecord.from_json(written).confirm_records)
    except (ValueError, KeyError, TypeError, AttributeError, json.JSONDecodeError, OSError) as exc:
        return None, f"corrupt {ab.AB_FILE}: {type(exc).__name__}: {exc}"
    m, derived = AbRecord.from_json(meta), AbRecord.from_json(recomputed)
    if expected_commit and m.base_commit != expected_commit:
        return None, f"{ab.AB_FILE} base {str(m.base_commit)[:12]} != run.json's {expected_commit[:12]}"
    orphans = sorted(set(base_samples) - {BenchRow.from_json(r).key for r in base_records})
    confirmed = set(derived.confirm_keys or [])
    stray = sorted(k for k in confirm_samples if (ab.head_key(k) if k.startswith(ab.BASE + "|") else k) not in confirmed)
    diffs = key_problems([*base_records, *(derived.confirm_records if "confirm_records" in derived.raw else [])])
    diffs += ab.differences(written, recomputed)
    diffs += [f"{k}: base samples without a row" for k in orphans]
    if m.status != "pass" and base_samples:  # the writer times no base row when the A/B errs
        diffs.append(f"status {m.status} but {ab.BASE_SAMPLES} holds {len(base_samples)} timed rows of the base")
    diffs += [f"{k}: confirmation samples of a row that was no candidate" for k in stray]
    if diffs:
        return None, f"{ab.AB_FILE} disagrees with the samples in {len(diffs)} places (first: {diffs[0]})"
    return recomputed, ""


def outcome_data(ab_data: dict) -> dict:
    """What the bench outcome carries about the A/B (pack.json, labels, report)."""
    a = AbRecord.from_json(ab_data)
    return {"status": a.status, "reason": a.reason if "reason" in a.raw else "", "base_ref": a.base_ref,
            "base_commit": a.base_commit, "self_check": a.self_check,
            "counts": a.counts, "same_rate": ab.same_rate(ab_data), "new": len(a.new),
            "removed": len(a.removed), "regressions": list(a.regressions),
            "base_so_sha256": a.base_so_sha256}


def load(stage_dir: Path) -> dict | None:
    """The run's A/B (merged over the shards of a sharded benchmark); None without one. Raises on unreadable files."""
    folders = [d for d in shard_dirs(stage_dir) if stored_forms(d, ab.AB_FILE)]
    if not folders:
        return None
    return ab.merge([read_member_json(d, ab.AB_FILE) for d in folders])
