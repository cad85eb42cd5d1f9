"""The benchmark sections of the reports, rendered from the files in the bench stage folder only.

Every pack value goes through evpack.markdown (text, code); render() returns report blocks, so the
collapsed parts and the plots sit where they belong (the plots right after the per-shape results).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..markdown import code, short, table, text
from ..model import FAIL, PASS, StageOutcome
from ..records.bench import BenchRow, BenchRun, BenchSummary, Clocks, LeaderEntry
from ..records.view import number
from ..timing import ceilings as ceilings_mod
from ..timing import plots
from ..timing import summary as sm
from ..timing.baselines import BACKENDS, classify_kernels
from ..timing.compare import SAME, compare_rows, drift_note, recorded_rule
from . import ab_section
from .blocks import Block, Details, Figure, Md

SKIP_MARK = {"unsupported": "unsupported", "skipped": "skipped", "error": "error", "fail": "FAIL"}
FIGURE_CAPTIONS = {
    "latency_by_shape.png": "Median latency per shape: the best config of each of our variants and every SDPA backend",
    "tflops_roofline.png": "Achieved TFLOP/s per shape against the same-run roofline (FLOPs / floor time)",
    "speedup.png": "Best of ours against each SDPA backend, per shape (1.0 = parity)",
    "sweep.png": "TFLOP/s against S at fixed B*S (the sequence sweep)",
}


def _load(path: Path):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _load_summary(stage_dir: Path, name: str = sm.SUMMARY_FILE) -> BenchSummary | None:
    """summary.json (or previous_summary.json) in whichever form the pack stores it; None when unreadable."""
    try:
        data = sm.read_summary(stage_dir, name)
    except (OSError, ValueError):
        return None
    return BenchSummary.from_json(data) if isinstance(data, dict) else None


def _or(x, missing: str = "?"):
    """A value the file holds, or `missing` where it holds none."""
    return missing if x is None else x


def f(x, spec: str = ".1f", none: str = "-") -> str:
    return format(x, spec) if number(x) else none


def cost_line(run: BenchRun) -> str:
    secs = run.gpu_seconds
    hours = secs / 3600 if isinstance(secs, (int, float)) else None
    line = f"GPU time {f(secs, '.1f')} s ({f(hours, '.3f')} GPU-h)"
    if isinstance(run.cost_usd, (int, float)):
        line += f" · cost \\${run.cost_usd:.2f} at \\${f(run.cost_per_hour, '.2f')}/h"
    else:
        line += " · cost: no rate given (--cost-per-hour or EVPACK\\_COST\\_PER\\_HOUR)"
    return line


def _per_gpu(stage_dir: Path, run: BenchRun) -> list[str]:
    """Ceilings and clocks of the run's GPU, or of each GPU of a benchmark sharded over several (every
    row's ratios and roofline come from its own GPU's shard)."""
    shards = run.shards
    if not shards:
        return _ceilings_clocks(stage_dir, "")
    lines = [f"**Sharded over {len(shards)} GPU(s):** each shape measured whole on one GPU, with its SDPA "
             "baselines and ceilings; no ratio is taken across GPUs.", ""]
    lines += table(["shard", "GPU", "UUID", "shapes"],
                   [[text(s.dir), text(_or(s.gpu.index)), code(_or(s.gpu.uuid), in_table=True), str(s.shape_count)]
                    for s in shards]) + [""]
    for s in shards:
        where = f" ({s.dir}, GPU {_or(s.gpu.index)})"
        lines += _ceilings_clocks(stage_dir / Path(str(s.dir)).name, text(where))
    return lines


def _ceilings_clocks(folder: Path, where: str) -> list[str]:
    lines = []
    ceil = _load(folder / "ceilings.json")
    if ceil:
        r = ceilings_mod.rates(ceil)
        lines += [f"**Same-run ceilings{where}:** copy {r['bandwidth'] / 1e12:.2f} TB/s (read + write), "
                  f"matmul fp16 {r['matmul_fp16'] / 1e12:.0f} TFLOP/s, bf16 {r['matmul_bf16'] / 1e12:.0f} TFLOP/s.", ""]
    stored = _load(folder / "clocks.json")
    if stored:
        clk = Clocks.from_json(stored)
        b, a = clk.before, clk.after
        state = f"**THROTTLED**: {text(clk.reason)}" if clk.throttled else text(clk.reason or "not throttled")
        lines += [f"**SM clock under load{where}:** before {text(_or(b.sm_mhz))} MHz, after "
                  f"{text(_or(a.sm_mhz))} MHz (max {text(_or(a.max_sm_mhz))}, via "
                  f"{text(_or(a.source))}) — {state}.", ""]
    return lines


def leaderboard_md(board: tuple[LeaderEntry, ...]) -> list[str]:
    rows = [[text(e.rank), text(e.impl), text(e.variant), (text(e.config) if e.config else "-"), f(e.median_us, ".2f"),
             f(e.iqr_us, ".2f"), f(e.tflops), f(e.pct_floor), f(e.speedup_vs_default, ".2f"),
             f(e.graph_median_us, ".2f"), "" if e.status == "ok" else text(e.status)]
            for e in board]
    return table(["#", "impl", "variant", "config", "median µs", "IQR µs", "TFLOP/s", "% floor",
                  "× default", "graph µs", "status"], rows)


def top_rows(board: tuple[LeaderEntry, ...], n: int) -> tuple[LeaderEntry, ...]:
    """The first n rows, plus our best row and SDPA default's when they rank lower (the ratio's two sides)."""
    keep = list(board[:n])
    ours = next((e for e in board if e.impl == sm.OURS and e.status == "ok"), None)
    default = next((e for e in board if e.impl == sm.SDPA and e.variant == "default"), None)
    for e in (default, ours):
        if e is not None and e not in keep:
            keep.append(e)
    return tuple(sorted(keep, key=lambda e: e.rank if isinstance(e.rank, int) else 0))


def canonical_leaderboard(stage_dir: Path, max_rows: int | None = None, level: int = 2) -> list[str]:
    """Heading + leaderboard table at the canonical shape ([] when the pack has no benchmark summary)."""
    summary = _load_summary(stage_dir)
    if not summary or not summary.leaderboard:
        return []
    board = summary.leaderboard
    shown = board if max_rows is None or len(board) <= max_rows else top_rows(board, max_rows)
    more = "" if len(shown) == len(board) else f"; {len(shown)} of {len(board)} rows"
    params = (str(summary.canonical).replace(",", ", ").replace("causal=0", "non-causal")
              .replace("causal=1", "causal"))
    lines = [f"{'#' * level} Leaderboard at the canonical shape ({text(params)}; {text(summary.primary_mode)} "
             f"mode{more})", ""]
    lines += leaderboard_md(shown)
    cs = summary.canonical_speedup
    if isinstance(cs, (int, float)):
        others = ", ".join(f"{f(v, '.2f')}× {text(b)}" for b, v in summary.speedups_vs().items()
                           if b != "default" and v is not None)
        lines += ["", f"Best of ours: {code(summary.canonical_best)} = **{cs:.2f}×** SDPA default"
                  + (f" ({others})" if others else "") + "."]
    return lines


def per_shape_md(rows: tuple[BenchRow, ...], mode: str) -> list[str]:
    shapes = []
    for r in rows:
        if r.mode == mode and r.shape not in shapes:
            shapes.append(r.shape)
    out = []
    for s in shapes:
        here = [r for r in rows if r.shape == s and r.mode == mode]
        ours = [r for r in here if r.impl == sm.OURS and r.status == "ok" and isinstance(r.median_us, (int, float))]
        best = min(ours, key=lambda r: r.median_us) if ours else None
        sd = {r.variant: r for r in here if r.impl == sm.SDPA}
        cells = [text(s), code(f"{best.variant}/{best.config}", in_table=True) if best else "-",
                 f(best.median_us, ".2f") if best else "-", f(best.tflops) if best else "-",
                 f(best.pct_floor) if best else "-"]
        for b in BACKENDS:
            r = sd.get(b)
            cells.append(f(r.median_us, ".2f") if r and r.median_us is not None
                         else SKIP_MARK.get(str(r.status), "-") if r else "-")
        cells += [f(best.speedup("default"), ".2f") if best else "-",
                  f(best.speedup("flash"), ".2f") if best else "-"]
        out.append(cells)
    return table(["shape", "best of ours", "µs", "TFLOP/s", "% floor", *[f"{b} µs" for b in BACKENDS],
                  "× default", "× flash"], out)


def _problems(rows: tuple[BenchRow, ...]) -> list[str]:
    out = []
    for r in rows:
        if r.status == "fail":
            out.append(f"- **FAIL** {code(r.key)}: max \\|err\\| {f(r.max_abs_err, '.3g', 'non-finite')} "
                       f"> bound {f(r.err_bound, '.3g')}")
        elif r.status in ("error", "skipped") or (r.status == "unsupported" and r.mode == "cold"):
            key = f"{r.impl}|{r.variant}|{r.config}|{r.shape}"
            key += "" if r.status == "unsupported" else "|" + str(r.mode)
            out.append(f"- {text(r.status)} {code(key)}: {text(short(str(r.reason or ''), 300))}")
    return out


def _sdpa_kernels(ran: list[BenchRow]) -> list[str]:
    """One row per kernel name (whole: a table cell wraps it), the backend on its first row."""
    rows = []
    for r in ran:
        for i, k in enumerate(r.kernel_names[:4]):
            first = i == 0
            rows.append([text(r.variant) if first else "", text(classify_kernels(r.kernel_names)) if first else "",
                         code(k, in_table=True)])
    return table(["backend", "ran as", "kernel"], rows)


def _previous(stage_dir: Path, run: BenchRun, rows: tuple[BenchRow, ...]) -> list[Block]:
    """The comparison with the previous pack's benchmark: the tally, the changed rows collapsed."""
    prev = _load_summary(stage_dir, sm.PREVIOUS_FILE)
    if not (prev and prev.rows):
        return []
    rule = recorded_rule(run.compare_rule) or 1  # the bench stage's outcome names an unknown one
    diff = compare_rows(prev.rows, rows, rule=rule)
    tally = ", ".join(f"{n} {text(k).lower()}" for k, n in diff.counts.items())
    foot = (f"{tally}; noise rule \\|Δ\\| > {diff.k:g}·sqrt(iqr\\_a² + iqr\\_b²) + drift·median, drift (SDPA rows) "
            f"{100 * diff.drift:.2f}%{drift_note(rule)}")
    changed = [e for e in diff.rows if e.mark != SAME]
    out: list[Block] = [Md(f"### Against the previous pack {code(_or(run.previous_pack_id))}\n\n{foot}")]
    if changed:
        body = table(["mark", "impl", "variant", "config", "shape", "mode", "A µs", "B µs", "Δ %", "noise µs"],
                     [[text(e.mark + (f" ({e.note})" if e.note else "")), text(e.impl),
                       text(e.variant), (text(e.config) if e.config else "-"), text(e.shape), text(e.mode),
                       f(e.median_a_us, ".2f"), f(e.median_b_us, ".2f"), f(e.delta_pct, "+.1f"),
                       f(e.threshold_us, ".2f")] for e in changed])
        out.append(Details(f"Rows that changed or could not be compared ({len(changed)})", (Md("\n".join(body)),)))
    return out


def figures_of(stage_dir: Path) -> list[Block]:
    """The benchmark's plots, as they sit beside the per-shape results."""
    return [Figure(f"{stage_dir.name}/{name}", FIGURE_CAPTIONS.get(name, name)) for name in plots.FILES
            if (stage_dir / name).is_file()]


def render(stage_dir: Path, outcome, *, leaderboard: bool = True) -> list[Block]:
    """The benchmark section; with leaderboard=False the canonical leaderboard is left to the report's top."""
    summary = _load_summary(stage_dir)
    run = BenchRun.from_json(_load(stage_dir / "run.json"))
    out: list[Block] = [Md(f"## Benchmark\n\n**Status: {text(outcome.status)}** — {text(outcome.reason)}")]
    out += ab_section.section(stage_dir)  # the same-run A/B against the base: first
    if summary is None:
        return out + [Md("No summary.json in the stage folder.")]
    dev = run.device
    mode = summary.primary_mode
    lines = [f"Suite {code(summary.suite)} on {text(_or(dev.name))} (torch {text(_or(dev.torch))}, "
             f"CUDA {text(_or(dev.cuda))}); statistics: median of CUDA-event times per call, IQR, "
             f"95% order-statistic CI; primary mode {code(mode)}.", "", f"**Cost:** {cost_line(run)}", ""]
    lines += _per_gpu(stage_dir, run)
    rows = summary.rows
    cs = summary.canonical_speedup
    lines += [f"**Canonical shape** {code(summary.canonical)} ({text(mode)}): "
              + (f"best {code(summary.canonical_best)} = **{cs:.2f}×** SDPA default" if isinstance(cs, (int, float))
                 else "no timed variant of ours at this shape"), ""]
    if summary.leaderboard and leaderboard:
        lines += [f"### Leaderboard (canonical shape, {text(mode)} mode)", ""] + leaderboard_md(summary.leaderboard)
    elif summary.leaderboard:
        lines += ["The leaderboard at the canonical shape is at the top of this report."]
    out.append(Md("\n".join(lines)))
    out.append(Md("\n".join([f"### Per shape ({text(mode)} mode)", "", *per_shape_md(rows, mode)])))
    out += figures_of(stage_dir)
    for other in ("graph", "warm"):
        if other != mode and any(r.mode == other for r in rows):
            out.append(Details(f"Per shape ({other} mode)", (Md("\n".join(per_shape_md(rows, other))),)))
    ran = [r for r in rows if r.impl == sm.SDPA and r.shape == summary.canonical and r.mode == mode and r.kernel_names]
    if ran:
        out.append(Md("\n".join(["### SDPA kernels that ran (profiler, canonical shape)", "", *_sdpa_kernels(ran)])))
    graph = [r for r in rows if r.impl == sm.OURS and r.mode == "graph" and r.capture_ms is not None]
    if graph:
        body = table(["variant", "config", "shape", "calls/graph", "capture ms", "replay µs/call"],
                     [[text(r.variant), text(r.config), text(r.shape), text(r.calls_per_sample),
                       f(r.capture_ms, ".2f"), f(r.median_us, ".2f")] for r in graph])
        out.append(Details("CUDA graph capture of our op", (Md("\n".join(body)),)))
    probs = _problems(rows)
    if probs:
        out.append(Md("\n".join(["### Not timed, unsupported or failed", "", *probs])))
    out += _previous(stage_dir, run, rows)
    return out


# The bench stage's report views (report_md.VIEWS): here, beside the code they draw on, not in the stage
# module, which sits below the reporting layer.
def headline_md(stage_dir: Path, outcome: StageOutcome) -> str:
    """The canonical-shape leaderboard, shown near the top of the reports (never for an errored stage)."""
    if outcome.status not in (PASS, FAIL):
        return ""
    return "\n".join(canonical_leaderboard(stage_dir))


def report_md(stage_dir: Path, outcome: StageOutcome) -> list[Block]:
    return render(stage_dir, outcome, leaderboard=False)


def figures(stage_dir: Path) -> list[Path]:
    return [stage_dir / f for f in plots.FILES if (stage_dir / f).is_file()]
