"""Benchmark plots (matplotlib, Agg) drawn from summary rows only: PNGs in the stage folder.

latency_by_shape.png  median latency per shape, best config of each of our variants and every SDPA backend
tflops_roofline.png   achieved TFLOP/s per shape against the same-run roofline (FLOPs / floor time)
speedup.png           best of ours against each SDPA backend, per shape (1.0 = parity)
sweep.png             TFLOP/s against S at fixed B*S (the sequence sweep), when the suite has one
"""
from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path

log = logging.getLogger(__name__)

FILES = ("latency_by_shape.png", "tflops_roofline.png", "speedup.png", "sweep.png")


def _label(r: dict) -> str:
    return r["variant"] if r["impl"] == "evpack" else f"sdpa:{r['variant']}"


def _short(shape_key: str) -> str:
    p = dict(kv.split("=") for kv in shape_key.split(","))
    c = " c" if p["causal"] == "1" else ""
    return f"{p['B']}x{p['H']}x{p['S']}\nD{p['D']} {p['dtype']}{c}"


def series(rows: list[dict], mode: str) -> tuple[list[str], dict[str, dict[str, dict]]]:
    """(shape keys in order, {label: {shape: row}}); our variants keep their fastest ok config."""
    shapes: list[str] = []
    out: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in rows:
        if r["mode"] != mode or r["status"] != "ok" or r.get("median_us") is None:
            continue
        if r["shape"] not in shapes:
            shapes.append(r["shape"])
        cur = out[_label(r)].get(r["shape"])
        if cur is None or r["median_us"] < cur["median_us"]:
            out[_label(r)][r["shape"]] = r
    return shapes, dict(out)


def _bars(ax, shapes, data: dict[str, list], ylabel: str, log_y: int = 0, baseline: float = 0.0) -> None:
    """Grouped bars; with a baseline (speedup 1.0) bars grow up or down from it."""
    import numpy as np
    from matplotlib.ticker import ScalarFormatter

    n = max(1, len(data))
    width = 0.8 / n
    x = np.arange(len(shapes))
    for i, (label, ys) in enumerate(data.items()):
        heights = [y - baseline if y is not None else float("nan") for y in ys]
        ax.bar(x + (i - (n - 1) / 2) * width, heights, width, bottom=baseline or None, label=label)
    ax.set_xticks(x, [_short(s) for s in shapes], fontsize=7)
    ax.set_ylabel(ylabel)
    if log_y:
        ax.set_yscale("log", base=log_y)
        ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.legend(fontsize=7, ncol=min(n, 5))
    ax.grid(axis="y", alpha=0.3)


def _fig(n_shapes: int):
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(max(8.0, 0.9 * n_shapes + 2), 4.5), layout="constrained")


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return path


def sweep_groups(rows: list[dict], mode: str) -> dict[tuple, list[str]]:
    """Shapes at a fixed (H, D, dtype, causal, B*S) with at least 3 sequence lengths."""
    groups: dict[tuple, set] = defaultdict(set)
    for r in rows:
        if r["mode"] == mode:
            groups[(r["H"], r["D"], r["dtype"], r["causal"], r["B"] * r["S"])].add((r["S"], r["shape"]))
    return {g: [s for _, s in sorted(v)] for g, v in groups.items() if len({S for S, _ in v}) >= 3}


def make_all(rows: list[dict], out_dir: Path, mode: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    shapes, ser = series(rows, mode)
    if not shapes:
        return []
    written = []
    fig, ax = _fig(len(shapes))
    _bars(ax, shapes, {k: [v[s]["median_us"] if s in v else None for s in shapes] for k, v in ser.items()},
          "median latency (µs, log)", log_y=10)
    ax.set_title(f"Latency by shape ({mode} mode)")
    written.append(_save(fig, out_dir / FILES[0]))

    fig, ax = _fig(len(shapes))
    x = range(len(shapes))
    for label, v in ser.items():
        ax.plot(x, [v[s]["tflops"] if s in v else float("nan") for s in shapes], "o", label=label, ms=5)
    roof = {}
    for v in ser.values():
        for s, r in v.items():
            roof[s] = r["tflops"] * r["median_us"] / r["floor_us"]  # FLOPs / floor time
    ax.plot(x, [roof.get(s, float("nan")) for s in shapes], "k_", ms=18, mew=2, label="roofline (same run)")
    ax.set_xticks(list(x), [_short(s) for s in shapes], fontsize=7)
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"Achieved TFLOP/s against the roofline ({mode} mode)")
    ax.legend(fontsize=7, ncol=4)
    ax.grid(alpha=0.3)
    written.append(_save(fig, out_dir / FILES[1]))

    ours = [k for k in ser if not k.startswith("sdpa:")]
    best = {s: min((ser[k][s] for k in ours if s in ser[k]), key=lambda r: r["median_us"], default=None)
            for s in shapes}
    backends = [k for k in ser if k.startswith("sdpa:")]
    fig, ax = _fig(len(shapes))
    _bars(ax, shapes, {f"vs {b}": [best[s]["speedup_vs"].get(b[5:]) if best[s] else None for s in shapes]
                       for b in backends}, "speedup of our best (×, log2)", log_y=2, baseline=1.0)
    ax.axhline(1.0, color="k", lw=1)
    ax.set_title(f"Best of ours against each SDPA backend ({mode} mode; > 1 = faster)")
    written.append(_save(fig, out_dir / FILES[2]))

    groups = sweep_groups(rows, mode)
    if groups:
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4.2), layout="constrained", squeeze=False)
        for ax, ((H, D, dtype, causal, tokens), gshapes) in zip(axes[0], sorted(groups.items()), strict=True):
            for label, v in ser.items():
                pts = [(v[s]["S"], v[s]["tflops"]) for s in gshapes if s in v]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label, ms=4)
            ax.set_xscale("log", base=2)
            ax.set_xlabel(f"S (B·S = {tokens})")
            ax.set_ylabel("TFLOP/s")
            ax.set_title(f"H={H} D={D} {dtype}{' causal' if causal else ''}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        written.append(_save(fig, out_dir / FILES[3]))
    return written
