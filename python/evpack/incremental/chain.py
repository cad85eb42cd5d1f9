"""verify's checks of a pack's `incremental` record (standard library only).

For a pack whose pack.json holds `incremental` (packs without it verify as before):
- every key recorded for a (stage, variant) has the device, build, toolchain and gpu parts the pack's own
  files give (keys.derived_keys);
- procs.json entries marked `carried_from` are exactly the carried cells the record lists, each of a stage
  that may carry (never bench, never a canary) and of the variant the record names;
- each source pack is found (next to the pack, or in the folder --carried-from names), is the pack whose
  index.json digest the record holds, and verifies itself (its own chain too, at most MAX_CHAIN_DEPTH deep);
- each carried file hashes, in the pack's index and in the source's, to what the record says, and the record
  lists every file the source holds of that cell; the cell's procs.json entry equals the source's, where the
  cell ran (no `carried_from` there);
- the keys of a carried cell equal the pack's keys for its (stage, variant) and the source's.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from ..binary import sha256_file
from ..jsonio import read_json
from ..records.incremental import CarriedRecord, IndexFiles
from ..records.pack import PackJson
from ..records.procs import ProcRecord
from ..records.view import obj
from . import CARRY_STAGES, MAX_CHAIN_DEPTH
from .cells import carryable_variant, cell_files, cell_variant
from .keys import DERIVED_PARTS, KeysUnavailable, derived_keys

# pack.PACK_ID_RE (pack imports the derivation, which must not import back)
PACK_ID = re.compile(r"^\d{8}T\d{6}Z-[0-9a-z]{5,12}(-dirty)?(-\d+)?$")
Verifier = Callable[[Path, int], list[str]]


def _read(path: Path):
    try:
        return read_json(path)
    except (OSError, ValueError, RecursionError):
        return None


def locate(pack_dir: Path, source_id: str, carried_from: Path | None) -> Path | None:
    """The source pack's folder: `carried_from` itself when it is that pack, else <carried_from>/<id>, else the
    pack's own packs folder."""
    if carried_from is not None:
        for cand in (carried_from, carried_from / source_id):
            if cand.name == source_id and cand.is_dir() and not cand.is_symlink():
                return cand
        return None
    cand = pack_dir.parent / source_id
    return cand if cand.is_dir() and not cand.is_symlink() else None


def _key_problems(pack_dir: Path, pj: dict, keys: dict) -> list[str]:
    try:
        derived = derived_keys(pack_dir, pj)
    except KeysUnavailable as exc:
        return [f"incremental: the keys cannot be derived from the pack's files: {exc}"]
    out = []
    for stage, table in keys.items():
        if not isinstance(table, dict):
            out.append(f"incremental: keys of {stage!r} are not a table")
            continue
        for variant, k in table.items():
            mine = derived.get(variant, {})
            bad = [p for p in DERIVED_PARTS if not isinstance(k, dict) or k.get(p) != mine.get(p)]
            if bad:
                out.append(f"incremental: the {'/'.join(bad)} key of {stage}/{variant} is not what the pack's "
                           "files give")
    return out


def check_incremental(pack_dir: Path, pj: dict, verify_source: Verifier, *, carried_from: Path | None = None,
                      depth: int = 0) -> list[str]:
    pack = PackJson.from_json(pj)
    inc = pack.incremental_record
    if pack.incremental is None:
        return []
    if not isinstance(pack.incremental, dict) or not inc.well_formed:
        return ["incremental: pack.json's incremental record is malformed"]
    keys, carried = inc.keys or {}, inc.carried or []
    problems = _key_problems(pack_dir, pj, keys) if keys else []
    index = IndexFiles.from_json(_read(pack_dir / "index.json")).files
    # procs.json marks and the record list the same cells
    marked = set()
    for stage in sorted({*CARRY_STAGES, *(p.parent.name for p in pack_dir.glob("*/procs.json"))}):
        procs = _read(pack_dir / stage / "procs.json")
        if isinstance(procs, dict):
            marked |= {(stage, c) for c, r in procs.items() if isinstance(r, dict) and "carried_from" in r}
    records = [CarriedRecord.from_json(r) for r in carried if isinstance(r, dict)]
    if len(records) != len(carried):
        return problems + ["incremental: a carried record is not an object"]
    listed = {(r.stage, r.cell) for r in records}
    for stage, cell in sorted(marked - listed):
        problems.append(f"incremental: {stage}/procs.json marks cell {cell!r} carried, but pack.json lists no such "
                        "carried cell")
    for stage, cell in sorted(listed - marked, key=str):
        problems.append(f"incremental: carried cell {stage}/{cell} is not marked carried in its procs.json")
    by_source: dict[str, list[CarriedRecord]] = {}
    for r in records:
        by_source.setdefault(r.source_pack, []).append(r)
    for source_id, recs in by_source.items():
        problems += _check_source(pack_dir, pack, index, source_id, recs, verify_source, carried_from, depth)
    return problems


def _check_source(pack_dir: Path, pack: PackJson, index: Mapping, source_id, recs: list[CarriedRecord],
                  verify_source: Verifier, carried_from: Path | None, depth: int) -> list[str]:
    if not isinstance(source_id, str) or not PACK_ID.match(source_id) or source_id == pack.pack_id:
        return [f"incremental: carried cells name the source pack {source_id!r}: not another pack's id"]
    if depth + 1 > MAX_CHAIN_DEPTH:
        return [f"incremental: the chain of carried cells is deeper than {MAX_CHAIN_DEPTH} packs at {source_id}"]
    src = locate(pack_dir, source_id, carried_from)
    where = f"in {carried_from}" if carried_from is not None else f"next to the pack in {pack_dir.parent}"
    if src is None:
        return [f"incremental: {len(recs)} carried cells come from pack {source_id}, which is not {where} "
                "(give its folder with --carried-from DIR)"]
    want = pack.incremental_record.source(source_id).index_sha256
    try:
        got = sha256_file(src / "index.json")
    except OSError:
        got = None
    if want is None or got != want:
        return [f"incremental: source pack {source_id} {where} is not the pack the carried cells came from (its "
                "index.json differs from the digest pack.json records)"]
    bad = verify_source(src, depth + 1)
    if bad:
        return [f"incremental: source pack {source_id} does not verify ({len(bad)} mismatch(es), first: {bad[0]})"]
    skeys = obj(PackJson.from_json(_read(src / "pack.json")).incremental_record.keys)
    sindex = IndexFiles.from_json(_read(src / "index.json")).files
    own_keys = pack.incremental_record.keys or {}
    problems = []
    procs_cache: dict[tuple[Path, str], dict] = {}

    def procs(folder: Path, stage: str) -> dict:
        if (folder, stage) not in procs_cache:
            got = _read(folder / stage / "procs.json")
            procs_cache[(folder, stage)] = got if isinstance(got, dict) else {}
        return procs_cache[(folder, stage)]

    for r in recs:
        stage, cell, variant = r.stage, r.cell, r.variant
        name = f"{stage}/{cell}"
        if stage not in CARRY_STAGES or not isinstance(cell, str) or not isinstance(variant, str):
            problems.append(f"incremental: carried cell {name}: stage {stage!r} never carries cells")
            continue
        if cell_variant(stage, cell) != variant or not carryable_variant(variant):
            problems.append(f"incremental: carried cell {name} is not a cell of a registered variant {variant!r} "
                            "(canaries always run)")
            continue
        k = r.keys
        if k != (own_keys.get(stage) or {}).get(variant):
            problems.append(f"incremental: carried cell {name}: its keys are not the pack's keys of {stage}/{variant}")
        if k != (skeys.get(stage) or {}).get(variant):
            problems.append(f"incremental: carried cell {name}: its keys are not those source pack {source_id} "
                            f"records for {stage}/{variant}")
        files = r.files if isinstance(r.files, dict) else {}
        expected = cell_files(stage, cell, sindex)
        if sorted(files) != expected:
            problems.append(f"incremental: carried cell {name}: lists files {sorted(files)}, source pack "
                            f"{source_id} holds {expected}")
        for rel, sha in sorted(files.items()):
            if index.get(rel) != sha or sindex.get(rel) != sha:
                problems.append(f"incremental: carried file {rel}: its hash differs from "
                                f"{'the pack' if index.get(rel) != sha else 'source pack ' + source_id}'s")
        mine, theirs = procs(pack_dir, stage).get(cell), procs(src, stage).get(cell)
        if not isinstance(mine, dict) or ProcRecord.from_json(mine).carried_from != source_id:
            problems.append(f"incremental: carried cell {name}: its procs.json entry does not name {source_id}")
        elif not isinstance(theirs, dict) or "carried_from" in theirs or \
                json.dumps({k2: v for k2, v in mine.items() if k2 != "carried_from"}, sort_keys=True) != \
                json.dumps(theirs, sort_keys=True):
            problems.append(f"incremental: carried cell {name}: its procs.json entry is not the one of source pack "
                            f"{source_id}, where the cell ran")
    return problems
