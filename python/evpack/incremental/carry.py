"""Copying carried cells into the new pack, after the stage ran the others: each file byte for byte (its hash
checked against the plan), each procs.json entry as the source holds it, marked `carried_from`."""
from __future__ import annotations

import shutil
from pathlib import Path

from ..binary import sha256_file
from ..jsonio import read_json, write_json
from ..stages.procs import PROCS_FILE
from .plan import CarriedCell


class CarryError(Exception):
    """A carried file is not what the plan recorded (the source changed after it was verified)."""


def copy_cells(cells: list[CarriedCell], source: Path, pack_dir: Path, stage: str) -> None:
    """Copy `cells` (all of `stage`) from `source` into `pack_dir`, then add their procs.json entries to the
    table the stage wrote (carried entries first, in the source's order)."""
    if not cells:
        return
    for c in cells:
        for rel, sha in c.files.items():
            dest = pack_dir / rel
            shutil.copyfile(source / rel, dest)
            if sha256_file(dest) != sha:
                dest.unlink()
                raise CarryError(f"{rel} in {source.name} is not the file its index listed when the pack verified")
    stage_dir = pack_dir / stage
    fresh = read_json(stage_dir / PROCS_FILE) if (stage_dir / PROCS_FILE).is_file() else {}
    src_procs = read_json(source / stage / PROCS_FILE)
    merged = {c.cell: {**src_procs[c.cell], "carried_from": c.source_pack} for c in cells}
    merged.update({k: v for k, v in fresh.items() if k not in merged})
    write_json(stage_dir / PROCS_FILE, merged)
