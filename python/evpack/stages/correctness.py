"""Stage `correctness`: the correctness oracle per variant (own process each), plus its canary."""
from __future__ import annotations

from pathlib import Path

from .. import registry
from .base import ERROR, FAIL, PASS, StageContext, StageOutcome, read_json, worst
from .procs import Job, oracle_cmd, proc_problem, record_binary, run_jobs, selected_variants

NAME = "correctness"
NEEDS_GPU = True
TIMEOUT_S = 1500
REQUIRED_FILES = ("procs.json",)  # raw files a stage that decided pass/fail keeps (verify requires them)
CANARY = "canary_wrong_result"


def run(ctx: StageContext) -> None:
    jobs = [Job(v.name, oracle_cmd(ctx.repo, "correctness.py", "--variant", v.name, "--out",
                                   str(ctx.dir / f"{v.name}.json")), 900) for v in selected_variants(ctx.options)]
    jobs.append(Job(CANARY, oracle_cmd(ctx.repo, "correctness.py", "--variant", CANARY, "--quick", "--out",
                                       str(ctx.dir / f"{CANARY}.json")), 300))
    run_jobs(jobs, ctx.dir, ctx.repo)
    record_binary(ctx.dir, [ctx.dir / f"{j.name}.json" for j in jobs if j.name != CANARY])


def _variant_status(stage_dir: Path, name: str) -> tuple[str, str, list[dict]]:
    problem = proc_problem(stage_dir, name)
    if problem:
        return ERROR, problem, []
    try:
        rows = read_json(stage_dir / f"{name}.json")["rows"]
    except (FileNotFoundError, KeyError, ValueError) as exc:
        return ERROR, f"{name}: no readable result ({exc})", []
    if not rows:
        return ERROR, f"{name}: the oracle checked no case", []
    bad = [r for r in rows if not r["passed"]]
    if bad:
        w = min(bad, key=lambda r: r["margin"] if r["margin"] == r["margin"] else float("-inf"))
        return FAIL, (f"{name}: {len(bad)}/{len(rows)} cases out of bound, worst {w['config']} "
                      f"{w['dtype']} D={w['D']} S={w['S']} causal={w['causal']}: err {w['max_err']:.3g} "
                      f"> bound {w['bound']:.3g}"), rows
    return PASS, f"{name}: {len(rows)} cases within bound", rows


def derive(stage_dir: Path, pack_dir: Path) -> StageOutcome:
    procs = read_json(stage_dir / "procs.json")
    names = [n for n in procs if n != CANARY]
    results, per_variant = {}, {}
    for n in names:
        status, reason, rows = _variant_status(stage_dir, n)
        results[n] = (status, reason)
        per_variant[n] = {"status": status, "reason": reason, "cases": len(rows),
                          "min_margin": min((r["margin"] for r in rows), default=None),
                          "max_err": max((r["max_err"] for r in rows), default=None)}
    c_status, c_reason, c_rows = _variant_status(stage_dir, CANARY)
    canary = {"name": CANARY, "expected": "fail", "observed": c_status,
              "caught": c_status == FAIL, "reason": c_reason}
    status = worst(s for s, _ in results.values())
    reason = "; ".join(r for s, r in results.values() if s != PASS) or \
        f"{sum(v['cases'] for v in per_variant.values())} cases within the bound for {', '.join(names)}"
    return StageOutcome(status, reason, {"variants": per_variant, "canaries": [canary]})


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def report_md(stage_dir: Path, outcome: StageOutcome) -> str:
    lines = ["Bound: max |out - ref| <= 2 x PyTorch same-precision error + rounding floor (float64 reference; "
             "NaN-poisoned outputs).", "", "| variant | status | cases | max error | min margin |",
             "|---|---|---|---|---|"]
    for n, v in outcome.data.get("variants", {}).items():
        lines.append(f"| {n} | {v['status']} | {v['cases']} | {_fmt(v['max_err'])} | {_fmt(v['min_margin'])} |")
    lines += ["", "Per config x dtype x head dim (worst case):", "",
              "| variant | config | dtype | D | cases | max error | bound at worst | pass |", "|---|---|---|---|---|---|---|---|"]
    for n in outcome.data.get("variants", {}):
        p = stage_dir / f"{n}.json"
        if not p.exists():
            continue
        groups: dict = {}
        for r in read_json(p)["rows"]:
            groups.setdefault((r["config"], r["dtype"], r["D"]), []).append(r)
        for (cfg, dt, d), rows in sorted(groups.items()):
            w = min(rows, key=lambda r: r["margin"])
            lines.append(f"| {n} | {cfg} | {dt} | {d} | {len(rows)} | {w['max_err']:.3g} | {w['bound']:.3g} | "
                         f"{'yes' if all(r['passed'] for r in rows) else 'NO'} |")
    return "\n".join(lines)


__all__ = ["registry"]
