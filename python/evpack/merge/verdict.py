"""`merge PACK... --out DIR`: packs of one commit, each made on its own GPU, into one merged verdict.

Every member is verified first (its signature too, against --allowed-signers when given); a member
that does not verify, members of different commits, a path that is not a pack, a member given twice
or an --out that would touch a member are refused before anything is written. Then each member is
copied byte for byte into DIR/members/<pack-id>/, so the verdict verifies on its own: one CI artifact
holds everything a reviewer needs, and no later change to the original packs can alter what was
judged. The members named on the command line are only read. DIR is assembled in a hidden
`.incomplete-` folder beside it and renamed into place; the record is record.py's.
"""
from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..binary import sha256_file
from ..jsonio import write_json, write_text
from ..pack import (
    INCOMPLETE_PREFIX,
    PACK_ID_RE,
    PackError,
    ensure_writable,
    inside_pack,
    load_pack_record,
    under_packs_folder,
)
from ..provenance.check import ProvenanceCheck
from ..provenance.signing import SigningError, read_allowed_signers, ssh_keygen
from ..verify import check_index, verify_all
from ..version import __version__
from .record import (
    INDEX_FILE,
    KIND,
    MEMBERS_DIR,
    MERGED_FILE,
    RULE,
    SCHEMA,
    VERDICT_FILES,
    decide,
    digests,
    is_merged_verdict,
    load_record,
    member_record,
    source_problems,
    verdict_id,
)
from .verify import check_own_files

log = logging.getLogger("evpack")


@dataclass(frozen=True)
class MergeResult:
    out: Path
    record: dict


def check_members(packs: list[Path]) -> list[Path]:
    """The member folders, resolved; PackError for a path that is not a pack, or one given twice."""
    by_id: dict[str, Path] = {}
    out = []
    for given in packs:
        p = Path(given)
        if is_merged_verdict(p):
            raise PackError(f"{p}: a merged verdict, not a pack (merge the packs under its {MEMBERS_DIR}/)")
        if not p.is_dir() or not (p / "pack.json").is_file() or not (p / INDEX_FILE).is_file():
            raise PackError(f"{p}: not a pack (a pack folder holds pack.json and index.json)")
        p = p.resolve()
        pack_id = load_pack_record(p).pack_id
        if not isinstance(pack_id, str) or not PACK_ID_RE.match(pack_id):
            raise PackError(f"{p}: pack.json pack_id {pack_id!r} is not a pack id")
        if pack_id in by_id:
            same = "the same folder" if by_id[pack_id] == p else f"{by_id[pack_id]} and {p}"
            raise PackError(f"pack {pack_id} is given twice ({same}): each member once")
        by_id[pack_id] = p
        out.append(p)
    return out


def check_out(out: Path, members: list[Path], force: bool) -> Path:
    """Where the verdict may go: never in or over a member or any pack, never under a packs folder; an
    existing folder only with --force, and only when it is a merged verdict or empty."""
    out = Path(out).resolve()
    for m in members:
        if out == m or m in out.parents:
            raise PackError(f"--out {out} is inside the member pack {m}: a pack is never modified")
        if out in m.parents:
            raise PackError(f"--out {out} holds the member pack {m}: writing there would replace it")
    host = inside_pack(out.parent)
    if host is not None:
        raise PackError(f"--out {out} is inside the pack {host}: a pack is never modified")
    packs = under_packs_folder(out)
    if packs is not None:
        raise PackError(f"--out {out} is under the packs folder {packs}: only an evidence run writes there")
    if out.exists() or out.is_symlink():
        if not force:
            raise PackError(f"--out {out} already exists; pass --force to replace a merged verdict")
        why = _not_replaceable(out)
        if why is not None:
            raise PackError(f"--out {out} is neither a merged verdict nor an empty folder ({why}): "
                            "--force replaces only those")
    return out


def _not_replaceable(out: Path) -> str | None:
    """Why --force may not replace `out`, or None: an empty folder, or a merged verdict by its own
    merged.json and index.json that holds nothing else (every member folder intact by its index.json)."""
    if out.is_symlink() or not out.is_dir():
        return "not a folder"
    if not any(out.iterdir()):
        return None
    if not is_merged_verdict(out):
        return f"no {MERGED_FILE}"
    try:
        record = load_record(out)
    except (OSError, ValueError) as exc:
        return str(exc)
    extra = sorted(p.name for p in out.iterdir() if p.name not in {*VERDICT_FILES, INDEX_FILE, MEMBERS_DIR})
    if extra:
        return f"it also holds {extra[0]}"
    names = {m.get("pack_id") for m in record["members"]}
    if not all(isinstance(n, str) and PACK_ID_RE.match(n) for n in names):
        return f"{MERGED_FILE} names a member that is no pack id"
    try:
        problems = check_own_files(out, names)
        for name in sorted(names):
            problems = problems or check_index(out / MEMBERS_DIR / name)
    except (OSError, ValueError, PackError) as exc:
        return str(exc)
    return problems[0] if problems else None


def _verify_member(pack: Path, allowed_signers: Path | None, require_signature: bool,
                   stages: str | None) -> tuple[ProvenanceCheck, dict]:
    """(its provenance check, the stage outcomes verify derived from its files)."""
    derived: dict = {}
    problems, prov = verify_all(pack, allowed_signers=allowed_signers, require_signature=require_signature,
                                stages=stages, derived_out=derived)
    if problems:
        raise PackError(f"member {pack} does not verify ({len(problems)} problem(s); first: {problems[0]}): "
                        "nothing was written")
    log.info("member %s: verified; provenance %s", pack.name, prov.summary)
    return prov, derived


def _copy(src: Path, dst: Path, expected: dict[str, str]) -> None:
    """Copy a verified member; the copy must hash as its index.json says and carry the digests read before."""
    shutil.copytree(src, dst)  # a verified pack holds regular files only
    if digests(dst) != expected or check_index(dst):
        raise PackError(f"member {src} changed while it was merged (its copy does not match what was verified)")


def _write_index(folder: Path) -> None:
    files = {name: sha256_file(folder / name) for name in VERDICT_FILES}
    write_json(folder / INDEX_FILE, {"kind": KIND, "schema": SCHEMA, "algorithm": "sha256", "files": files})


def _put_in_place(tmp: Path, out: Path) -> None:
    """Rename the assembled folder to out; an existing verdict (checked by check_out) is replaced."""
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.replaced-{os.getpid()}"
        out.rename(old)
    tmp.rename(out)
    if old is not None:
        shutil.rmtree(old)


def build_record(records: list[dict], *, allowed_signers: Path | None, require_signature: bool,
                 merged_from: list[str]) -> dict:
    src = records[0]["source"]
    return {
        "kind": KIND,
        "schema": SCHEMA,
        "verdict_id": verdict_id(records),
        "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "tool_version": __version__,
        "source": {"commit": src["commit"], "dirty": any(r["source"]["dirty"] for r in records),
                   "tree_sha256": src["tree_sha256"]},
        "rule": {"text": RULE, "signatures_checked": allowed_signers is not None,
                 "require_signature": require_signature,
                 "allowed_signers_sha256": sha256_file(allowed_signers) if allowed_signers else None},
        **decide(records, allowed_signers is not None),
        "members": records,
        "merged_from": merged_from,
    }


def merge_packs(packs: list[Path], out: Path, *, allowed_signers: Path | None = None,
                require_signature: bool = False, force: bool = False, stages: str | None = None) -> MergeResult:
    """Verify the members, then write the merged verdict to out. PackError (exit 2) for bad input, with
    nothing written and no member touched."""
    from .report import render_comment, render_report

    if require_signature and allowed_signers is None:
        raise SigningError("--require-signature needs --allowed-signers FILE: a signature is trusted only "
                           "against known signers")
    if allowed_signers is not None:
        allowed_signers = read_allowed_signers(allowed_signers)
        ssh_keygen()
    if not packs:
        raise PackError("merge: give at least one pack")
    members = check_members(packs)
    out = check_out(out, members, force)
    before = [digests(m) for m in members]
    checked = [_verify_member(m, allowed_signers, require_signature, stages) for m in members]
    records = [member_record(m, prov, stages=stages, outcomes=derived)
               for m, (prov, derived) in zip(members, checked, strict=True)]
    problems = source_problems(records)
    if problems:
        raise PackError(f"{problems[0]}: nothing was written")
    ensure_writable(out.parent)
    tmp = out.parent / f"{INCOMPLETE_PREFIX}merge-{out.name}-{os.getpid()}"
    try:
        tmp.mkdir()
        for m, expected in zip(members, before, strict=True):
            _copy(m, tmp / MEMBERS_DIR / m.name, expected)
        record = build_record(records, allowed_signers=allowed_signers, require_signature=require_signature,
                              merged_from=[str(p) for p in packs])
        write_json(tmp / MERGED_FILE, record)
        write_text(tmp / "report.md", render_report(record))
        write_text(tmp / "comment.md", render_comment(record))
        _write_index(tmp)
        _put_in_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return MergeResult(out, record)
