"""Benchmark plots (matplotlib, Agg) drawn from summary rows only: PNGs in the stage folder.

latency_by_shape.png  median latency per shape, best config of each of our variants and every SDPA backend
tflops_roofline.png   achieved TFLOP/s per shape against the same-run roofline (FLOPs / floor time)
speedup.png           best of ours against each SDPA backend, per shape (1.0 = parity)
sweep.png             TFLOP/s against S at fixed B*S (the sequence sweep), when the suite has one

Drawn for reading at the width report.html shows them: PAGE_WIDTH_PX wide (never scaled down on a
page of that content width), every text at least MIN_TEXT_PX pixels high, and at most SHAPES_PER_ROW
shapes per panel (more shapes wrap into further panels below).
"""
from __future__ import annotations

import logging
import math
from collections import defaultdict
from pathlib import Path

from ..packfs import atomic_file
from ..records.bench import BenchRow, bench_rows

log = logging.getLogger(__name__)

FILES = ("latency_by_shape.png", "tflops_roofline.png", "speedup.png", "sweep.png")
PAGE_WIDTH_PX = 1200  # the content width of report.html (reporting/templates/report.html.j2)
DPI = 100
MIN_TEXT_PX = 10
SHAPES_PER_ROW = 12
SWEEP_COLUMNS = 3
STYLE = {"font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "xtick.labelsize": 8.5,
         "ytick.labelsize": 9, "legend.fontsize": 9, "figure.titlesize": 12}


def _label(r: BenchRow) -> str:
    return str(r.variant) if r.impl == "evpack" else f"sdpa:{r.variant}"


def _short(shape_key: str) -> str:
    p = dict(kv.split("=") for kv in shape_key.split(","))
    c = " c" if p["causal"] == "1" else ""
    return f"{p['B']}x{p['H']}x{p['S']}\nD{p['D']} {p['dtype']}{c}"


def series(rows: list, mode: str) -> tuple[list[str], dict[str, dict[str, BenchRow]]]:
    """(shape keys in order, {label: {shape: row}}); our variants keep their fastest ok config."""
    shapes: list[str] = []
    out: dict[str, dict[str, BenchRow]] = defaultdict(dict)
    for r in bench_rows(rows):
        if r.mode != mode or r.status != "ok" or r.median_us is None:
            continue
        if r.shape not in shapes:
            shapes.append(r.shape)
        cur = out[_label(r)].get(r.shape)
        if cur is None or r.median_us < cur.median_us:
            out[_label(r)][r.shape] = r
    return shapes, dict(out)


def _bars(ax, shapes, data: dict[str, list], log_y: int = 0, baseline: float = 0.0) -> None:
    """Grouped bars; with a baseline (speedup 1.0) bars grow up or down from it."""
    import numpy as np
    from matplotlib.ticker import ScalarFormatter

    n = max(1, len(data))
    width = 0.8 / n
    x = np.arange(len(shapes))
    for i, (label, ys) in enumerate(data.items()):
        heights = [y - baseline if y is not None else float("nan") for y in ys]
        ax.bar(x + (i - (n - 1) / 2) * width, heights, width, bottom=baseline or None, label=label)
    ax.set_xticks(x, [_short(s) for s in shapes])
    ax.set_xlim(-0.6, max(len(shapes), SHAPES_PER_ROW) - 0.4)  # the same bar width in every panel
    if log_y:
        ax.set_yscale("log", base=log_y)
        ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.grid(axis="y", alpha=0.3)


def _chunks(shapes: list[str]) -> list[list[str]]:
    return [shapes[i:i + SHAPES_PER_ROW] for i in range(0, len(shapes), SHAPES_PER_ROW)]


def _panels(n_panels: int, ncols: int = 1, panel_h_in: float = 3.0):
    """A PAGE_WIDTH_PX-wide figure of n_panels axes (ncols per row), room for a title and one legend."""
    import matplotlib.pyplot as plt

    nrows = math.ceil(n_panels / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(PAGE_WIDTH_PX / DPI, 1.3 + panel_h_in * nrows), dpi=DPI,
                             layout="constrained", squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n_panels:]:
        ax.set_visible(False)
    return fig, flat[:n_panels]


def _legend(fig, axes) -> None:
    """One legend for the figure, below the panels (labels in first-seen order)."""
    seen: dict[str, object] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(lab, h)
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="outside lower center", ncol=min(len(seen), 10))


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    try:
        with atomic_file(path) as f:
            fig.savefig(f, format="png", dpi=DPI)
    finally:
        plt.close(fig)
    return path


def sweep_groups(rows: list, mode: str) -> dict[tuple, list[str]]:
    """Shapes at a fixed (H, D, dtype, causal, B*S) with at least 3 sequence lengths."""
    groups: dict[tuple, set] = defaultdict(set)
    for r in bench_rows(rows):
        if r.mode == mode:
            groups[(r.H, r.D, r.dtype, r.causal, r.B * r.S)].add((r.S, r.shape))
    return {g: [s for _, s in sorted(v)] for g, v in groups.items() if len({S for S, _ in v}) >= 3}


def expected_files(rows: list[dict], mode: str) -> tuple[str, ...]:
    """The plot files make_all writes for these rows (verify requires them of a bench stage that decided)."""
    if not series(rows, mode)[0]:
        return ()
    return FILES[:3] + ((FILES[3],) if sweep_groups(rows, mode) else ())


def make_all(rows: list[dict], out_dir: Path, mode: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes, ser = series(rows, mode)
    if not shapes:
        return []
    with plt.rc_context(STYLE):
        return _draw(rows, ser, shapes, out_dir, mode)


def _draw(rows, ser, shapes, out_dir: Path, mode: str) -> list[Path]:
    chunks = _chunks(shapes)
    written = []
    fig, axes = _panels(len(chunks))
    for ax, part in zip(axes, chunks, strict=True):
        _bars(ax, part, {k: [v[s].median_us if s in v else None for s in part] for k, v in ser.items()},
              log_y=10)
        ax.set_ylabel("median µs (log)")
    fig.suptitle(f"Latency by shape ({mode} mode; B x H x S, head dim, dtype, c = causal)")
    _legend(fig, axes)
    written.append(_save(fig, out_dir / FILES[0]))

    roof = {}
    for v in ser.values():
        for s, r in v.items():
            roof[s] = r.tflops * r.median_us / r.floor_us  # FLOPs / floor time
    fig, axes = _panels(len(chunks))
    for ax, part in zip(axes, chunks, strict=True):
        x = range(len(part))
        for label, v in ser.items():
            ax.plot(x, [v[s].tflops if s in v else float("nan") for s in part], "o", label=label, ms=5)
        ax.plot(x, [roof.get(s, float("nan")) for s in part], "k_", ms=18, mew=2, label="roofline (same run)")
        ax.set_xticks(list(x), [_short(s) for s in part])
        ax.set_xlim(-0.6, max(len(part), SHAPES_PER_ROW) - 0.4)
        ax.set_ylabel("TFLOP/s")
        ax.grid(alpha=0.3)
    fig.suptitle(f"Achieved TFLOP/s against the same-run roofline ({mode} mode)")
    _legend(fig, axes)
    written.append(_save(fig, out_dir / FILES[1]))

    ours = [k for k in ser if not k.startswith("sdpa:")]
    best = {s: min((ser[k][s] for k in ours if s in ser[k]), key=lambda r: r.median_us, default=None)
            for s in shapes}
    backends = [k for k in ser if k.startswith("sdpa:")]
    fig, axes = _panels(len(chunks))
    for ax, part in zip(axes, chunks, strict=True):
        _bars(ax, part, {f"vs {b}": [best[s].speedup(b[5:]) if best[s] else None for s in part]
                         for b in backends}, log_y=2, baseline=1.0)
        ax.axhline(1.0, color="k", lw=1)
        ax.set_ylabel("× (log2)")
    fig.suptitle(f"Speedup of our best against each SDPA backend ({mode} mode; > 1 = ours faster)")
    _legend(fig, axes)
    written.append(_save(fig, out_dir / FILES[2]))

    groups = sweep_groups(rows, mode)
    if groups:
        fig, axes = _panels(len(groups), ncols=min(len(groups), SWEEP_COLUMNS), panel_h_in=3.4)
        for ax, ((H, D, dtype, causal, tokens), gshapes) in zip(axes, sorted(groups.items()), strict=True):
            for label, v in ser.items():
                pts = [(v[s].S, v[s].tflops) for s in gshapes if s in v]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label, ms=4)
            ax.set_xscale("log", base=2)
            ax.set_xlabel(f"S (B·S = {tokens})")
            ax.set_ylabel("TFLOP/s")
            ax.set_title(f"H={H} D={D} {dtype}{' causal' if causal else ''}")
            ax.grid(alpha=0.3)
        fig.suptitle(f"Sequence sweep at a fixed token count ({mode} mode)")
        _legend(fig, axes)
        written.append(_save(fig, out_dir / FILES[3]))
    return written
