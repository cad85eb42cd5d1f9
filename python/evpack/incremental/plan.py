"""Planning a rerun: which cells are carried from the previous complete pack, and from which pack they came.

`choose_source` names the newest complete pack of the packs folder (it must then verify: run.py has it
verified while the build runs). `make_plan` compares, per (stage, variant), the new run's keys with those the
source recorded; a variant is carried when they are equal, every cell of it in the source finished cleanly,
and the chain stays within MAX_CHAIN_DEPTH. In every stage at least one variant runs afresh (the one whose
cells took least time in the source): every runtime stage then loads the new binary and records it, and the
one_binary gate keeps its meaning.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..binary import sha256_file
from ..jsonio import read_json
from ..labels import COMPLETE
from ..pack import list_packs
from ..records.incremental import CarriedRecord, IndexFiles
from ..records.pack import PackJson
from ..records.procs import ProcRecord
from . import MAX_CHAIN_DEPTH
from .cells import carryable_variant, cell_files, cells_of


@dataclass(frozen=True)
class CarriedCell:
    stage: str
    cell: str
    variant: str
    source_pack: str  # the pack where the cell ran (its files are equal in every pack of the chain)
    keys: dict
    files: dict[str, str]  # path in the pack -> sha256

    def to_json(self) -> dict:
        return {"stage": self.stage, "cell": self.cell, "variant": self.variant, "source_pack": self.source_pack,
                "keys": self.keys, "files": dict(sorted(self.files.items()))}


@dataclass(frozen=True)
class Plan:
    carried: tuple[CarriedCell, ...] = ()
    reason: str = ""
    fresh: bool = False
    source: Path | None = None  # the pack the files are copied from (the newest complete one)
    sources: dict[str, str] = field(default_factory=dict)  # source_pack -> sha256 of its index.json

    def carry_option(self) -> dict[str, list[str]]:
        """options["carry"]: the variants each stage skips."""
        out: dict[str, list[str]] = {}
        for c in self.carried:
            if c.variant not in out.setdefault(c.stage, []):
                out[c.stage].append(c.variant)
        return out


def _pack_record(pack: Path) -> PackJson | None:
    try:
        pj = read_json(pack / "pack.json")
    except (OSError, ValueError):
        return None
    return PackJson.from_json(pj) if isinstance(pj, dict) else None


def choose_source(packs_root: Path, exclude: str | None = None) -> Path | None:
    """The newest finished pack of the folder labelled complete (None: there is none)."""
    for pack in reversed(list_packs(packs_root)):
        if pack.name == exclude:
            continue
        pj = _pack_record(pack)
        if pj is not None and pj.complete is True and pj.label == COMPLETE:
            return pack
    return None


def chain_depth(pack: Path, limit: int = MAX_CHAIN_DEPTH + 1) -> int:
    """How many packs deep a pack's chain of carried cells goes (0: it carried nothing); limit + 1 when deeper
    than `limit`, or when a pack of it cannot be read."""
    if limit < 0:
        return 1
    pj = _pack_record(pack) or PackJson()
    inc = pj.incremental_record
    if not isinstance(pj.incremental, dict) or not inc.carried:
        return 0
    ids = {CarriedRecord.from_json(c).source_pack for c in inc.carried if isinstance(c, dict)}
    depths = [chain_depth(pack.parent / i, limit - 1) if isinstance(i, str) and (pack.parent / i).is_dir()
              else limit + 1 for i in ids]
    return 1 + max(depths, default=0)


def _cell_ok(rec) -> bool:
    entry = ProcRecord.from_json(rec)
    return isinstance(rec, dict) and entry.returncode == 0 and not entry.timed_out


def describe(carried) -> str:
    """One line: how many cells of how many (stage, variant) pairs are carried, and from where."""
    used = {c.source_pack for c in carried}
    return (f"{len(carried)} cells of {len({(c.stage, c.variant) for c in carried})} (stage, variant) pairs carried "
            f"from {', '.join(sorted(used))}") if carried else "no cell's keys equal the previous pack's"


def _same(new: dict, old, parts: tuple[str, ...] | None) -> bool:
    if parts is None:
        return new == old
    return isinstance(old, dict) and all(p in new and p in old and new[p] == old[p] for p in parts)


def make_plan(source: Path, new_keys: dict[str, dict[str, dict]], stages: list[str],
              parts: tuple[str, ...] | None = None) -> Plan:
    """The cells of `stages` to carry from `source` (a complete pack that verified). `parts`: compare only these
    key parts (a plan made before this build's device keys are known; it is checked once they are)."""
    old_keys = (_pack_record(source) or PackJson()).incremental_record.keys
    if not isinstance(old_keys, dict):
        return Plan(reason=f"the newest complete pack {source.name} records no cell keys (made before incremental "
                           "evidence): every cell runs", source=source)
    index = IndexFiles.from_json(read_json(source / "index.json")).files
    carried: list[CarriedCell] = []
    sources: dict[str, str] = {}
    depths: dict[str, int] = {}
    for stage in stages:
        try:
            procs = read_json(source / stage / "procs.json")
        except (OSError, ValueError):
            continue
        stage_cells: list[CarriedCell] = []
        cost: dict[str, float] = {}
        for variant, keys in new_keys.get(stage, {}).items():
            if not carryable_variant(variant) or not _same(keys, (old_keys.get(stage) or {}).get(variant), parts):
                continue
            cells = cells_of(stage, variant, procs)
            entries = {c: ProcRecord.from_json(procs[c]) for c in cells}
            origins = {entries[c].carried_from or source.name for c in cells if isinstance(procs[c], dict)}
            if not cells or not all(_cell_ok(procs[c]) for c in cells) or len(origins) != 1:
                continue
            origin = origins.pop()
            if origin not in depths:
                folder = source.parent / origin
                depths[origin] = (chain_depth(folder) if folder.is_dir() else MAX_CHAIN_DEPTH + 1)
                if folder.is_dir() and (folder / "index.json").is_file():
                    sources[origin] = sha256_file(folder / "index.json")
            if depths[origin] + 1 > MAX_CHAIN_DEPTH or origin not in sources:
                continue
            cost[variant] = sum(float(entries[c].duration_s or 0.0) for c in cells)
            stage_cells += [CarriedCell(stage, c, variant, origin, keys,
                                        {f: index[f] for f in cell_files(stage, c, index)}) for c in cells]
        ran = {v for v in new_keys.get(stage, {}) if carryable_variant(v)}
        if cost and set(cost) >= ran:  # every variant would be carried: the cheapest runs, loading the new binary
            cheapest = min(cost, key=lambda v: (cost[v], v))
            stage_cells = [c for c in stage_cells if c.variant != cheapest]
        carried += stage_cells
    used = {c.source_pack for c in carried}
    return Plan(tuple(carried), describe(carried), False, source, {k: v for k, v in sources.items() if k in used})
