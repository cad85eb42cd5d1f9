"""The benchmark sections of the reports, rendered from the files in the bench stage folder only."""
from __future__ import annotations

import json
from pathlib import Path

from ..timing import ceilings as ceilings_mod
from ..timing.baselines import BACKENDS, classify_kernels
from ..timing.compare import compare_rows
from ..timing.compare import render as render_diff

SKIP_MARK = {"unsupported": "unsupported", "skipped": "skipped", "error": "error", "fail": "FAIL"}


def _load(path: Path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def f(x, spec: str = ".1f", none: str = "-") -> str:
    return none if x is None else format(x, spec)


def cost_line(run: dict) -> str:
    secs = run.get("gpu_seconds")
    line = f"GPU time {f(secs, '.1f')} s ({f(secs / 3600 if secs is not None else None, '.3f')} GPU-h)"
    if run.get("cost_usd") is not None:
        line += f" · cost ${run['cost_usd']:.2f} at ${run['cost_per_hour']:.2f}/h"
    else:
        line += " · cost: no rate given (--cost-per-hour or EVPACK_COST_PER_HOUR)"
    return line


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def _per_gpu(stage_dir: Path, run: dict) -> list[str]:
    """Ceilings and clocks of the run's GPU, or of each GPU of a benchmark sharded over several (every
    row's ratios and roofline come from its own GPU's shard)."""
    shards = run.get("shards")
    if not shards:
        return _ceilings_clocks(stage_dir, "")
    lines = [f"**Sharded over {len(shards)} GPU(s):** each shape measured whole on one GPU, with its SDPA "
             "baselines and ceilings; no ratio is taken across GPUs.", ""]
    lines += _table(["shard", "GPU", "UUID", "shapes"],
                    [[s["dir"], str((s.get("gpu") or {}).get("index", "?")), f"`{(s.get('gpu') or {}).get('uuid', '?')}`",
                      str(len(s.get("shapes", [])))] for s in shards]) + [""]
    for s in shards:
        lines += _ceilings_clocks(stage_dir / s["dir"], f" ({s['dir']}, GPU {(s.get('gpu') or {}).get('index', '?')})")
    return lines


def _ceilings_clocks(folder: Path, where: str) -> list[str]:
    lines = []
    ceil = _load(folder / "ceilings.json")
    if ceil:
        r = ceilings_mod.rates(ceil)
        lines += [f"**Same-run ceilings{where}:** copy {r['bandwidth'] / 1e12:.2f} TB/s (read + write), "
                  f"matmul fp16 {r['matmul_fp16'] / 1e12:.0f} TFLOP/s, bf16 {r['matmul_bf16'] / 1e12:.0f} TFLOP/s.", ""]
    clk = _load(folder / "clocks.json")
    if clk:
        b, a = clk.get("before", {}), clk.get("after", {})
        state = f"**THROTTLED**: {clk['reason']}" if clk.get("throttled") else (clk.get("reason") or "not throttled")
        lines += [f"**SM clock under load{where}:** before {b.get('sm_mhz', '?')} MHz, after {a.get('sm_mhz', '?')} MHz "
                  f"(max {a.get('max_sm_mhz', '?')}, via {a.get('source', '?')}) — {state}.", ""]
    return lines


def leaderboard_md(board: list[dict]) -> list[str]:
    rows = [[str(e["rank"]), e["impl"], e["variant"], e["config"] or "-", f(e["median_us"], ".2f"),
             f(e["iqr_us"], ".2f"), f(e["tflops"]), f(e["pct_floor"]), f(e["speedup_vs_default"], ".2f"),
             f(e["graph_median_us"], ".2f"), "" if e["status"] == "ok" else e["status"]]
            for e in board]
    return _table(["#", "impl", "variant", "config", "median µs", "IQR µs", "TFLOP/s", "% floor",
                   "× default", "graph µs", "status"], rows)


def top_rows(board: list[dict], n: int) -> list[dict]:
    """The first n rows, plus our best row and SDPA default's when they rank lower (the ratio's two sides)."""
    keep = list(board[:n])
    ours = next((e for e in board if e["impl"] == "evpack" and e["status"] == "ok"), None)
    default = next((e for e in board if e["impl"] == "sdpa" and e["variant"] == "default"), None)
    for e in (default, ours):
        if e is not None and e not in keep:
            keep.append(e)
    return sorted(keep, key=lambda e: e["rank"])


def canonical_leaderboard(stage_dir: Path, max_rows: int | None = None, level: int = 2) -> list[str]:
    """Heading + leaderboard table at the canonical shape ([] when the pack has no benchmark summary)."""
    summary = _load(stage_dir / "summary.json")
    if not summary or not summary.get("leaderboard"):
        return []
    board = summary["leaderboard"]
    shown = board if max_rows is None or len(board) <= max_rows else top_rows(board, max_rows)
    more = "" if len(shown) == len(board) else f"; {len(shown)} of {len(board)} rows"
    params = summary["canonical"].replace(",", ", ").replace("causal=0", "non-causal").replace("causal=1", "causal")
    lines = [f"{'#' * level} Leaderboard at the canonical shape ({params}; {summary['primary_mode']} mode{more})", ""]
    lines += leaderboard_md(shown)
    cs = summary.get("canonical_speedup")
    if cs is not None:
        vs = summary.get("canonical_speedup_vs") or {}
        others = ", ".join(f"{f(v, '.2f')}× {b}" for b, v in vs.items() if b != "default" and v is not None)
        lines += ["", f"Best of ours: `{summary['canonical_best']}` = **{cs:.2f}×** SDPA default"
                  + (f" ({others})" if others else "") + "."]
    return lines


def per_shape_md(rows: list[dict], mode: str) -> list[str]:
    shapes = []
    for r in rows:
        if r["mode"] == mode and r["shape"] not in shapes:
            shapes.append(r["shape"])
    out = []
    for s in shapes:
        here = [r for r in rows if r["shape"] == s and r["mode"] == mode]
        ours = [r for r in here if r["impl"] == "evpack" and r["status"] == "ok" and r["median_us"] is not None]
        best = min(ours, key=lambda r: r["median_us"]) if ours else None
        sd = {r["variant"]: r for r in here if r["impl"] == "sdpa"}
        cells = [s, f"{best['variant']}/{best['config']}" if best else "-",
                 f(best["median_us"], ".2f") if best else "-", f(best["tflops"]) if best else "-",
                 f(best["pct_floor"]) if best else "-"]
        for b in BACKENDS:
            r = sd.get(b)
            cells.append(f(r["median_us"], ".2f") if r and r["median_us"] is not None
                         else SKIP_MARK.get(r["status"], "-") if r else "-")
        cells += [f(best["speedup_vs"].get("default"), ".2f") if best else "-",
                  f(best["speedup_vs"].get("flash"), ".2f") if best else "-"]
        out.append(cells)
    return _table(["shape", "best of ours", "µs", "TFLOP/s", "% floor", *[f"{b} µs" for b in BACKENDS],
                   "× default", "× flash"], out)


def _problems(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        if r["status"] == "fail":
            out.append(f"- **FAIL** `{r['key']}`: max |err| {f(r.get('max_abs_err'), '.3g', 'non-finite')} "
                       f"> bound {f(r.get('err_bound'), '.3g')}")
        elif r["status"] in ("error", "skipped") or (r["status"] == "unsupported" and r["mode"] == "cold"):
            out.append(f"- {r['status']} `{r['impl']}|{r['variant']}|{r['config']}|{r['shape']}`"
                       f"{'' if r['status'] == 'unsupported' else '|' + r['mode']}: {r['reason'][:300]}")
    return out


def render(stage_dir: Path, outcome, *, leaderboard: bool = True) -> str:
    """The benchmark section; with leaderboard=False the canonical leaderboard is left to the report's top."""
    summary = _load(stage_dir / "summary.json")
    run = _load(stage_dir / "run.json") or {}
    lines = ["## Benchmark", "", f"**Status: {outcome.status}** — {outcome.reason}", ""]
    from ..timing.ab_stage import report_section  # the same-run A/B against the base: first

    ab_md = report_section(stage_dir)
    if ab_md:
        lines += [ab_md, ""]
    if summary is None:
        return "\n".join(lines + ["No summary.json in the stage folder."])
    dev = run.get("device", {})
    mode = summary["primary_mode"]
    lines += [f"Suite `{summary['suite']}` on {dev.get('name', '?')} (torch {dev.get('torch', '?')}, "
              f"CUDA {dev.get('cuda', '?')}); statistics: median of CUDA-event times per call, IQR, "
              f"95% order-statistic CI; primary mode `{mode}`.", "", f"**Cost:** {cost_line(run)}", ""]
    lines += _per_gpu(stage_dir, run)
    rows = summary["rows"]
    cs = summary.get("canonical_speedup")
    lines += [f"**Canonical shape** `{summary['canonical']}` ({mode}): "
              + (f"best `{summary['canonical_best']}` = **{cs:.2f}×** SDPA default" if cs is not None
                 else "no timed variant of ours at this shape"), ""]
    if summary.get("leaderboard") and leaderboard:
        lines += [f"### Leaderboard (canonical shape, {mode} mode)", ""] + leaderboard_md(summary["leaderboard"]) + [""]
    elif summary.get("leaderboard"):
        lines += ["The leaderboard at the canonical shape is at the top of this report.", ""]
    lines += [f"### Per shape ({mode} mode)", ""] + per_shape_md(rows, mode) + [""]
    for other in ("graph", "warm"):
        if other != mode and any(r["mode"] == other for r in rows):
            lines += [f"<details><summary>Per shape ({other} mode)</summary>", ""] + per_shape_md(rows, other) + ["", "</details>", ""]
    ran = [r for r in rows if r["impl"] == "sdpa" and r["shape"] == summary["canonical"] and r["mode"] == mode
           and r.get("kernels")]
    if ran:
        lines += ["### SDPA kernels that ran (profiler, canonical shape)", ""]
        lines += _table(["backend", "ran as", "kernels"],
                        [[r["variant"], classify_kernels(r["kernels"]), "<br>".join(f"`{k[:90]}`" for k in r["kernels"][:4])]
                         for r in ran]) + [""]
    graph = [r for r in rows if r["impl"] == "evpack" and r["mode"] == "graph" and r.get("capture_ms") is not None]
    if graph:
        lines += ["<details><summary>CUDA graph capture of our op</summary>", ""]
        lines += _table(["variant", "config", "shape", "calls/graph", "capture ms", "replay µs/call"],
                        [[r["variant"], r["config"], r["shape"], str(r.get("calls_per_sample")), f(r["capture_ms"], ".2f"),
                          f(r["median_us"], ".2f")] for r in graph]) + ["", "</details>", ""]
    probs = _problems(rows)
    if probs:
        lines += ["### Not timed, unsupported or failed", ""] + probs + [""]
    prev = _load(stage_dir / "previous_summary.json")
    if prev and prev.get("rows"):
        diff = compare_rows(prev["rows"], rows)
        table = render_diff(diff, only_changed=True)
        head, _, foot = table.rpartition("\n\n")
        lines += [f"### Against the previous pack `{run.get('previous_pack_id', '?')}`", "", foot or table, ""]
        if head:
            lines += ["<details><summary>Rows that changed or could not be compared</summary>", "", head, "",
                      "</details>", ""]
    return "\n".join(lines)
