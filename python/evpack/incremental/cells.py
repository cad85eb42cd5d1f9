"""Which variant a GPU stage's cell belongs to, and which files of the stage folder are the cell's. Pure."""
from __future__ import annotations

from .. import registry

# the files one cell writes into its stage folder besides its procs.json entry (those that exist; a result
# over packfs's size threshold is stored as <cell>.json.xz)
CELL_SUFFIXES = (".log", ".json", ".json.xz", ".manifest.json")


def cell_variant(stage: str, cell: str) -> str:
    """The variant a cell ran: sanitize names cells <tool>.<variant>.<config>, the others <variant>[.<what>]."""
    parts = cell.split(".")
    return parts[1] if stage == "sanitize" and len(parts) > 2 else parts[0]


def carryable_variant(name: str) -> bool:
    """Only registered (non-canary) variants are ever carried: every pack runs every canary."""
    return name in {v.name for v in registry.VARIANTS}


def cell_files(stage: str, cell: str, files) -> list[str]:
    """The paths (relative to the pack) among `files` that are the cell's own."""
    return sorted(f"{stage}/{cell}{s}" for s in CELL_SUFFIXES if f"{stage}/{cell}{s}" in files)


def cells_of(stage: str, variant: str, procs: dict) -> list[str]:
    """The cells of `variant` in a stage's procs.json table."""
    return [c for c in procs if isinstance(c, str) and cell_variant(stage, c) == variant]
