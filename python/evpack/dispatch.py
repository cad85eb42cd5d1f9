"""The default kernel: per device and shape class, the fastest verified variant and config.

`evpack.flash_attention(..., variant=None)` asks `pick` for a (variant, config). The answers come
from python/evpack/dispatch_table.json, which `generate_table(pack_dir)` derives from one committed
reference pack's benchmark (bench/summary.json, bench/run.json, pack.json) and never from a hand-typed
choice; the table names its source pack. Standard library only: no torch, no GPU.

Shape class: (dtype, head dim, causal, size, seq), size "small" when batch * heads is below the device's SM
count (fewer (batch, head) pairs than SMs: small tiles fill the machine better) and "large" otherwise; seq
"short" up to SHORT_SEQ keys, where a tall query tile is mostly padding (a 192-row tile holds S=128 in a third
of its rows wasted), "long" up to LONG_SEQ, and "very long" above, where items of many K/V tiles make a partly idle
last round worth splitting (wgmma's tail_split config, slower on shorter rows).
For each class present in the pack, the candidates are the pack's own kernel rows (impl `evpack`, the
benchmark's primary mode) that ran `ok` with an output error within the row's bound, on every shape of
the class; the winner has the smallest geometric mean of the median times over those shapes. Only a
pack labelled `evidence:complete` (every gate ran on a GPU and passed) is a source.

A shape the pack measured is not left to its class: the table also holds, per measured shape, the kernel
with the smallest median there (`exact`), and `pick` answers a call of exactly that shape on the same device
(name and SM count) with it. A class is an estimate for the shapes nobody timed; where the pack timed the
shape itself, its own fastest kernel is the default (a class geomean can prefer a kernel that is not the
fastest on any one of its shapes).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from . import registry
from .jsonio import read_json, read_member_json
from .packfs import atomic_file
from .records.bench import BenchRun, BenchSummary
from .records.dispatch import DeviceEntry, DispatchTable
from .records.pack import PackJson
from .records.view import view

TABLE_SCHEMA_VERSION = 4  # 2: the shape class has a sequence bucket (seq); 3: seq "very long"; 4: exact shapes
READABLE_VERSIONS = (3, 4)  # a version-3 table has no exact shapes: every call falls to its class; older: not read
SHORT_SEQ = 256
LONG_SEQ = 1024
TABLE_PATH = Path(__file__).with_name("dispatch_table.json")
SOURCE_LABEL = "evidence:complete"
SIZES = ("small", "large")


class DispatchTableError(ValueError):
    """The pack cannot be a source of the table (not complete, no benchmark, unreadable)."""


@dataclass(frozen=True)
class ShapeClass:
    dtype: str  # registry dtype name: "fp16" / "bf16"
    head_dim: int
    causal: bool
    size: str  # "small" / "large"
    seq: str  # "short" / "long" / "very long"

    def key(self) -> str:
        return f"{self.dtype}/d{self.head_dim}/{'causal' if self.causal else 'full'}/{self.size}/{self.seq}"


def size_class(batch: int, heads: int, sm_count: int) -> str:
    return "small" if batch * heads < sm_count else "large"


def seq_class(seqlen: int) -> str:
    return "short" if seqlen <= SHORT_SEQ else "long" if seqlen <= LONG_SEQ else "very long"


def shape_class(*, dtype: str, head_dim: int, causal: bool, batch: int, heads: int, seqlen: int,
                sm_count: int) -> ShapeClass:
    return ShapeClass(dtype, int(head_dim), bool(causal), size_class(batch, heads, sm_count), seq_class(seqlen))


# ---- generation ----------------------------------------------------------------------------------

def _read(path: Path, *, member: bool = False) -> dict:
    """A JSON object of a pack; `member`: in whichever form the pack stores it (summary.json.xz)."""
    try:
        data = read_member_json(path.parent, path.name) if member else read_json(path)
    except FileNotFoundError as exc:
        raise DispatchTableError(f"{path}: missing (not a pack with a benchmark?)") from exc
    except (OSError, ValueError) as exc:
        raise DispatchTableError(f"{path}: unreadable: {exc}") from exc
    if not isinstance(data, dict):
        raise DispatchTableError(f"{path}: not a JSON object")
    return data


def generate_table(pack_dir: Path) -> dict:
    """The dispatch table from one pack's benchmark. Raises DispatchTableError when the pack cannot serve."""
    try:
        return _generate(Path(pack_dir))
    except (KeyError, TypeError, AttributeError, ValueError) as exc:  # a field missing or of another type
        if isinstance(exc, DispatchTableError):
            raise
        raise DispatchTableError(f"{Path(pack_dir).name}: bench/summary.json or bench/run.json is malformed "
                                 f"({type(exc).__name__}: {exc})") from None


def _generate(pack_dir: Path) -> dict:
    pj = view(PackJson, _read(pack_dir / "pack.json"))
    if pj.label != SOURCE_LABEL:
        raise DispatchTableError(f"{pack_dir.name}: label {pj.label!r}; only an {SOURCE_LABEL} pack "
                                 "(every gate passed on a GPU) can choose the default kernels")
    summary = BenchSummary.from_json(_read(pack_dir / "bench" / "summary.json", member=True))
    device = BenchRun.from_json(_read(pack_dir / "bench" / "run.json")).device
    if not device.sm_count or not device.capability:
        raise DispatchTableError(f"{pack_dir.name}: bench/run.json records no device SM count / capability")
    mode = summary.primary_mode
    rows = [r for r in summary.rows if r.impl == "evpack" and r.mode == mode]
    by_class: dict[ShapeClass, dict[str, dict[tuple[str, str], float]]] = {}
    # shape -> ((dtype, head dim, causal, batch, heads, seqlen), its timed kernels: the cell by_class holds)
    measured: dict[str, tuple[tuple, dict[tuple[str, str], float]]] = {}
    for r in rows:
        sc = shape_class(dtype=r.dtype, head_dim=r.D, causal=r.causal, batch=r.B, heads=r.H, seqlen=r.S,
                         sm_count=device.sm_count)
        cell = by_class.setdefault(sc, {}).setdefault(r.shape, {})
        measured[r.shape] = ((r.dtype, int(r.D), bool(r.causal), int(r.B), int(r.H), int(r.S)), cell)
        if r.status == "ok" and r.median_us and r.within_bound:
            cell[(r.variant, r.config)] = float(r.median_us)
    choices = []
    for sc in sorted(by_class, key=lambda c: c.key()):
        shapes = by_class[sc]
        common = set.intersection(*(set(c) for c in shapes.values()))
        if not common:
            continue
        scored = [(math.exp(sum(math.log(shapes[s][vc]) for s in shapes) / len(shapes)), vc) for vc in common]
        choices.append({"dtype": sc.dtype, "head_dim": sc.head_dim, "causal": sc.causal, "size": sc.size, "seq": sc.seq,
                        **_winner(scored, "geomean_us"), "shapes": sorted(shapes)})
    exact = []
    for shape in sorted(measured):
        (dtype, head_dim, causal, batch, heads, seqlen), cell = measured[shape]
        if cell:
            exact.append({"shape": shape, "dtype": dtype, "head_dim": head_dim, "causal": causal, "batch": batch,
                          "heads": heads, "seqlen": seqlen,
                          **_winner([(us, vc) for vc, us in cell.items()], "median_us")})
    return {
        "schema_version": TABLE_SCHEMA_VERSION,
        "generated_by": "evpack.dispatch.generate_table",
        "source_pack": pj.pack_id if "pack_id" in pj.raw else pack_dir.name,
        "source_commit": pj.git.commit,
        "source_label": pj.label,
        "mode": mode,
        "rule": "per shape class, the evpack (variant, config) with the smallest geometric mean of median "
                "times over the class's shapes, among those that ran ok within their error bound on all of them; "
                f"size 'small' when batch*heads < the device's SM count; seq 'short' when S <= {SHORT_SEQ}, "
                f"'long' when S <= {LONG_SEQ}, 'very long' above; a shape the pack measured itself (exact: same "
                "batch, heads, sequence, head dim, dtype and mask, on a device of the same name and SM count) gets "
                "the kernel with the smallest median there",
        "devices": [{"name": device.name, "capability": str(device.capability),
                     "sm_count": int(device.sm_count), "choices": choices, "exact": exact}],
    }


def _winner(scored: list[tuple[float, tuple[str, str]]], unit: str) -> dict:
    """The fastest of (time, (variant, config)) pairs and the runner-up, as a table entry's fields (`unit`: the
    name of the time: a class's geomean_us, a measured shape's median_us). Equal times: the first name in order."""
    ranked = sorted(scored)
    (best, (variant, config)), runner = ranked[0], ranked[1] if len(ranked) > 1 else None
    return {"variant": variant, "config": config, unit: round(best, 3),
            "runner_up": (None if runner is None else
                          {"variant": runner[1][0], "config": runner[1][1], unit: round(runner[0], 3)}),
            "candidates": len(ranked)}


def table_text(table: dict) -> str:
    """The file form of a table (what dispatch_table.json holds)."""
    return json.dumps(table, indent=2, ensure_ascii=True) + "\n"


def write_table(table: dict, path: Path | None = None) -> Path:
    """Write a table atomically (temp file + rename) to `path` (default: the package's dispatch_table.json)."""
    path = Path(path or TABLE_PATH)
    with atomic_file(path) as f:
        f.write(table_text(table).encode("utf-8"))
    return path


# ---- lookup ----------------------------------------------------------------------------------------

def load_table(path: Path | None = None) -> dict | None:
    """The committed table (None when there is none or it is unreadable: the registry default applies)."""
    try:
        table = read_json(path or TABLE_PATH)
    except (OSError, ValueError):
        return None
    return table if isinstance(table, dict) and view(DispatchTable, table).schema_version in READABLE_VERSIONS else None


def fallback() -> tuple[str, str]:
    """The registry's first tensor variant and its first config (one that serves every head dim of it)."""
    var = next(v for v in registry.VARIANTS if v.kind == "tensor")
    return var.name, next(c for c in var.configs if var.head_dims_for(c) == var.head_dims).name


def _device_entry(table: DispatchTable, name: str | None, capability: str) -> DeviceEntry | None:
    devices = [d for d in table.devices if d.capability == capability]
    return next((d for d in devices if d.name == name), devices[0] if devices else None)


def _serves(variant: str, config: str, dtype: str, head_dim: int) -> bool:
    """A registered variant and config that take this dtype and head dim."""
    try:
        var = registry.get(variant)
        cfg = var.config(config)
    except ValueError:
        return False
    return dtype in var.dtypes and cfg in var.configs_for(head_dim)


def pick(table: dict | None, *, device_name: str | None, capability: str, sm_count: int, dtype: str,
         head_dim: int, causal: bool, batch: int, heads: int, seqlen: int) -> tuple[str, str, str]:
    """(variant, config, why). For this device (same capability, the same name first): the table's measured
    choice for exactly this shape when the device's name and SM count are the pack's, else its choice for the
    shape class, if it names a registered variant and config that support the dtype and head dim; else the
    registry's first tensor variant."""
    tbl = view(DispatchTable, table)
    entry = _device_entry(tbl, device_name, capability) if table else None
    if entry is not None:
        if entry.name == device_name and entry.sm_count == sm_count:
            want = (dtype, int(head_dim), bool(causal), int(batch), int(heads), int(seqlen))
            e = next((e for e in entry.exact if e.dims == want), None)
            if e is not None and _serves(e.variant, e.config, dtype, head_dim):
                return e.variant, e.config, f"table {tbl.source_pack}: measured shape {e.shape} on {entry.name}"
        sc = shape_class(dtype=dtype, head_dim=head_dim, causal=causal, batch=batch, heads=heads, seqlen=seqlen,
                         sm_count=sm_count)
        c = next((c for c in entry.choices if c.shape_class == (sc.dtype, sc.head_dim, sc.causal, sc.size, sc.seq)),
                 None)
        if c is not None and _serves(c.variant, c.config, dtype, head_dim):
            return c.variant, c.config, f"table {tbl.source_pack}: {sc.key()} on {entry.name}"
    variant, config = fallback()
    return variant, config, "registry default (no table row for this device and shape class)"
