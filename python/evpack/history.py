"""`python -m evpack history`: the packs under artifacts/ and the speedup trend over them.

Lists every pack in artifacts/packs/ (local runs, git-ignored) and artifacts/reference/
(packs committed on purpose) with its commit, GPU, label and canonical speedup against
SDPA, oldest first; `--plot PATH` draws the speedup over the packs. Everything is read
from each pack's pack.json (and env.json for the GPU when pack.json has no summary):
this module never re-derives results, `verify` does that.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from .jsonio import read_json, read_member_json
from .packfs import atomic_file
from .records.pack import ABSENT, PackRecord

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("packs", "reference")
_PACK_ID = re.compile(r"^(\d{8}T\d{6}Z)-([0-9a-f]{4,40}|nogit)(-dirty)?$")


@dataclass(frozen=True)
class PackRow:
    pack_id: str
    source: str  # "packs", "reference" or "packs+reference" (the same pack id in both)
    created: str  # UTC yyyymmddTHHMMSSZ (from created_utc or the pack id)
    commit: str | None  # full commit as recorded, None if git was unavailable
    dirty: bool | None
    gpu: str | None  # None: no CUDA device (a CPU-only pack)
    label: str | None
    speedup: float | None  # canonical speedup vs SDPA default; None if not measured
    error: str | None = None  # why the pack could not be read

    @property
    def short_commit(self) -> str:
        if not self.commit:
            return "-"
        return self.commit[:12] + ("+dirty" if self.dirty else "")


def _text(value) -> str | None:
    """A value of pack.json shown in the list: a string (control characters escaped) or None."""
    if value is None or value is ABSENT or isinstance(value, (dict, list)):
        return None
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in str(value))


def _object(value) -> dict:
    return value if isinstance(value, dict) else {}


def _created(pack_id: str, pack: PackRecord | None) -> str:
    m = _PACK_ID.match(pack_id)
    if m:
        return m.group(1)
    created = str(pack.created_utc or "") if pack is not None else ""
    digits = re.sub(r"[^0-9]", "", created)
    if len(digits) >= 14:
        return f"{digits[:8]}T{digits[8:14]}Z"
    return ""


def _side_file(path: Path) -> dict:
    """A JSON object beside pack.json, in whichever form the pack stores it (summary.json.xz) ({} when absent
    or unreadable: the row then shows '-')."""
    try:
        return _object(read_member_json(path.parent, path.name))
    except (OSError, ValueError):
        return {}


def _speedup(pack: PackRecord, pack_dir: Path) -> float | None:
    value = pack.summary.canonical_speedup
    if value is None or value is ABSENT:
        value = _side_file(pack_dir / "bench" / "summary.json").get("canonical_speedup")
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        value = float(value)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _gpu(pack: PackRecord, pack_dir: Path) -> str | None:
    gpu = pack.summary.gpu_name or _side_file(pack_dir / "env.json").get("gpu_name")
    return _text(gpu) if gpu else None


def read_pack(pack_dir: Path, source: str) -> PackRow:
    """One row from pack_dir/pack.json; a pack that cannot be read becomes a row with error set."""
    pack_id = _text(pack_dir.name) or ""
    try:
        obj = read_json(pack_dir / "pack.json")
        if not isinstance(obj, dict):
            raise ValueError("pack.json is not a JSON object")
        pack = PackRecord.from_json(obj)  # values as the file holds them: a row shows what it can
    except OSError as exc:
        return PackRow(pack_id, source, _created(pack_id, None), None, None, None, None, None,
                       error=_text(f"unreadable pack.json: {exc.strerror or exc}"))
    except ValueError as exc:
        return PackRow(pack_id, source, _created(pack_id, None), None, None, None, None, None,
                       error=_text(f"unreadable pack.json: {exc}"))
    dirty = pack.git.dirty
    return PackRow(
        pack_id=pack_id,  # the folder's name: a pack.json naming another id must not hide that pack's row
        source=source,
        created=_created(pack_id, pack),
        commit=_text(pack.git.commit),
        dirty=dirty if isinstance(dirty, bool) else None,
        gpu=_gpu(pack, pack_dir),
        label=_text(pack.label),
        speedup=_speedup(pack, pack_dir),
    )


def find_packs(artifacts: Path) -> list[tuple[Path, str]]:
    """(pack folder, source) for every folder with a pack.json or an index.json under
    artifacts/{packs,reference} (one without the other is a broken pack, listed with why).

    Skips the `latest` symlink and hidden folders (packs being written or fetched).
    """
    found = []
    for source in SOURCES:
        root = artifacts / source
        if not root.is_dir():
            continue
        for d in sorted(root.iterdir()):
            if d.name.startswith(".") or d.is_symlink() or not d.is_dir():
                continue
            try:
                is_pack = (d / "pack.json").exists() or (d / "index.json").exists()
            except OSError:  # a folder this user cannot read: listed, with why it cannot be read
                is_pack = True
            if is_pack:
                found.append((d, source))
    return found


def collect(artifacts: Path, verify=None) -> list[PackRow]:
    """All packs, oldest first; a pack id present in both packs/ and reference/ is listed once.
    With `verify(pack_dir) -> problems`, a pack that does not verify is listed with its first problem
    and no label or speedup: nothing it claims is shown."""
    rows: dict[str, PackRow] = {}
    for d, source in find_packs(artifacts):
        row = read_pack(d, source)
        problems = verify(d) if verify is not None and not row.error else []
        if problems:
            row = PackRow(row.pack_id, source, row.created, row.commit, row.dirty, row.gpu, None, None,
                          error=_text(f"does not verify ({len(problems)} mismatch(es)): {problems[0]}"))
        if row.pack_id in rows and rows[row.pack_id].source != source:
            rows[row.pack_id] = PackRow(**{**asdict(rows[row.pack_id]), "source": "packs+reference"})
            continue
        rows.setdefault(row.pack_id, row)
    return sorted(rows.values(), key=lambda r: (r.created, r.pack_id))


def format_speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def format_table(rows: list[PackRow]) -> str:
    header = ("pack", "where", "commit", "gpu", "label", "speedup vs SDPA")
    body = [(r.pack_id, r.source, r.short_commit, r.gpu or "- (no GPU)",
             r.label or (f"? ({r.error})" if r.error else "-"), format_speedup(r.speedup)) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body, strict=True)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)).rstrip() for line in (header, *body)]
    return "\n".join(lines)


def to_json(rows: list[PackRow]) -> str:
    return json.dumps({"schema_version": 1, "packs": [asdict(r) for r in rows]}, indent=2)


def plot(rows: list[PackRow], path: Path) -> int:
    """Canonical speedup over the packs (oldest left) as a PNG; returns the number of points drawn."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(6.0, 0.5 * len(rows) + 2), 4), layout="constrained")
    ax = fig.add_subplot()
    points = 0
    ref_labelled = False
    for gpu in sorted({r.gpu or "no GPU" for r in rows}):
        pts = [(i, r) for i, r in enumerate(rows) if (r.gpu or "no GPU") == gpu and r.speedup is not None]
        if not pts:
            continue
        (line,) = ax.plot([i for i, _ in pts], [r.speedup for _, r in pts], marker="o", label=gpu)
        points += len(pts)
        ref = [(i, r.speedup) for i, r in pts if "reference" in r.source]
        if ref:  # committed reference packs: a square around the point
            ax.plot([i for i, _ in ref], [y for _, y in ref], linestyle="none", marker="s", markersize=11,
                    markerfacecolor="none", color=line.get_color(),
                    label=None if ref_labelled else "reference pack")
            ref_labelled = True
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="SDPA default (1.0x)")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r.short_commit[:7] + ("*" if r.dirty else "") for r in rows], rotation=45, ha="right")
    ax.set_xlabel("pack (oldest left; commit, * = dirty tree)")
    ax.set_ylabel("canonical speedup vs SDPA (x)")
    ax.set_title("evidence-pack history: canonical speedup")
    if points == 0:
        ax.text(0.5, 0.5, "no pack has a canonical speedup yet", transform=ax.transAxes, ha="center")
    ax.legend(fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as f:
        fig.savefig(f, format="png", dpi=120)
    return points
