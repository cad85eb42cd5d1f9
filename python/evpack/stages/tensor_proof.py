"""Stage `tensor_proof`: executed tensor-core work, counted by Nsight Compute on one canonical call
per kernel. Tensor kernels must cover >= 95% of the matrix FLOPs the call must do; scalar kernels
must execute no tensor math; the decoy canary (HMMA in SASS, math on CUDA cores) must fail."""
from __future__ import annotations

from pathlib import Path

from .. import registry
from ..parsers.ncu import COVERAGE_MIN, METRICS, parse_ncu_csv
from ..tools import find_tool
from .base import ERROR, FAIL, PASS, StageContext, StageOutcome, read_json, worst, write_json
from .procs import Job, oracle_cmd, proc_problem, record_binary, run_jobs, selected_variants

NAME = "tensor_proof"
NEEDS_GPU = True
TIMEOUT_S = 900
REQUIRED_FILES = ("procs.json",)  # raw files a stage that decided pass/fail keeps (verify requires them)
CANARY = "canary_decoy_hmma"


def run(ctx: StageContext) -> None:
    ncu = find_tool("ncu")
    if ncu is None:
        write_json(ctx.dir / "missing_tool.json", {"tool": "ncu", "found": False})
        return
    jobs = []
    for name in [v.name for v in selected_variants(ctx.options)] + [CANARY]:
        cmd = [ncu, "--clock-control", "none", "--metrics", ",".join(METRICS), "--csv",
               "--print-kernel-base", "mangled", "--kernel-name", "regex:fwd_kernel",
               *oracle_cmd(ctx.repo, "tensor_target.py", "--variant", name, "--manifest",
                           str(ctx.dir / f"{name}.manifest.json"))]
        jobs.append(Job(name, cmd, 420))
    run_jobs(jobs, ctx.dir, ctx.repo)
    record_binary(ctx.dir, [ctx.dir / f"{j.name}.manifest.json" for j in jobs if j.name != CANARY])


def _rows(stage_dir: Path, name: str) -> tuple[str | None, list[dict]]:
    problem = proc_problem(stage_dir, name)
    if problem:
        return problem, []
    try:
        calls = read_json(stage_dir / f"{name}.manifest.json")["calls"]
        kernels = parse_ncu_csv((stage_dir / f"{name}.log").read_text(encoding="utf-8", errors="replace"))
    except (FileNotFoundError, ValueError, KeyError) as exc:
        return f"{name}: unreadable ncu output or manifest ({exc})", []
    if len(kernels) != len(calls):
        return f"{name}: ncu profiled {len(kernels)} launches but the target made {len(calls)} calls", []
    rows = []
    for call, km in zip(calls, kernels, strict=True):
        if f"cfg_{call['config']}" not in km.kernel or call["variant"] not in km.kernel:
            return f"{name}: launch {km.launch_id} is {km.kernel[:80]}, expected {call['variant']}/{call['config']}", []
        flops = km.tensor_flops
        row = {**call, "kernel": km.kernel, "executed_tensor_flops": flops,
               "coverage": flops / call["required_flops"],
               "padding_overhead": call["tile_padded_flops"] / call["required_flops"] - 1.0,
               "tensor_math_inst": km.tensor_math_inst, "metrics": km.values}
        if call["kind"] == "tensor":
            row["passed"] = row["coverage"] >= COVERAGE_MIN
        else:
            row["passed"] = flops == 0 and km.tensor_math_inst == 0
        rows.append(row)
    return None, rows


def derive(stage_dir: Path, pack_dir: Path) -> StageOutcome:
    if (stage_dir / "missing_tool.json").exists():
        return StageOutcome(ERROR, "ncu (Nsight Compute) not found on PATH or in CUDA_HOME")
    procs = read_json(stage_dir / "procs.json")
    statuses, reasons, table = [], [], []
    for name in procs:
        if name == CANARY:
            continue
        problem, rows = _rows(stage_dir, name)
        if problem:
            statuses.append(ERROR)
            reasons.append(problem)
            continue
        bad = [r for r in rows if not r["passed"]]
        statuses.append(FAIL if bad else PASS)
        if bad:
            r = bad[0]
            reasons.append(f"{name}/{r['config']} {r['dtype']} D={r['D']} causal={r['causal']}: tensor FLOPs cover "
                           f"{r['coverage']:.1%} of {r['required_flops']:.3g}")
        table += [{k: r[k] for k in ("variant", "kind", "config", "dtype", "D", "causal", "required_flops",
                                     "executed_tensor_flops", "coverage", "padding_overhead",
                                     "tensor_math_inst", "passed")} for r in rows]
    problem, crows = _rows(stage_dir, CANARY)
    worst_cov = max((r["coverage"] for r in crows), default=None)
    canary = {"name": CANARY, "expected": f"coverage < {COVERAGE_MIN:.0%}",
              "observed": problem or f"max coverage {worst_cov:.2%}",
              "caught": problem is None and bool(crows) and all(r["coverage"] < COVERAGE_MIN for r in crows),
              "reason": problem or "decoy HMMA executed but did not do the work"}
    status = worst(statuses)
    tensor = [r for r in table if r["kind"] == "tensor"]
    reason = "; ".join(reasons) or (
        f"{len(tensor)} tensor-kernel calls cover >= {min(r['coverage'] for r in tensor):.1%} of their matrix FLOPs; "
        f"{len(table) - len(tensor)} scalar calls execute 0 tensor FLOPs" if tensor else "no tensor kernel profiled")
    if not tensor and status == PASS:
        status = ERROR
    return StageOutcome(status, reason, {"calls": table, "canaries": [canary]})


def report_md(stage_dir: Path, outcome: StageOutcome) -> str:
    calls = outcome.data.get("calls", [])
    if not calls:
        return ""
    lines = [f"Nsight Compute (`--clock-control none`), canonical call B=2 H=8 S=512 per kernel. Tensor FLOPs = "
             f"sum of `sm__ops_path_tensor_op_*` counters (HFMA2.MMA moves excluded). Gate: coverage >= "
             f"{COVERAGE_MIN:.0%} for tensor kernels, 0 for scalar.", "",
             "| variant | config | dtype | D | causal | required FLOPs | executed tensor FLOPs | coverage | "
             "tile padding | pass |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in calls:
        lines.append(f"| {r['variant']} | {r['config']} | {r['dtype']} | {r['D']} | {r['causal']} | "
                     f"{r['required_flops']:.4g} | {r['executed_tensor_flops']:.4g} | {r['coverage']:.1%} | "
                     f"{r['padding_overhead']:+.1%} | {'yes' if r['passed'] else 'NO'} |")
    return "\n".join(lines)


__all__ = ["registry"]
