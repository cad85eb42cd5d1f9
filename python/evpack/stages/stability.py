"""Stage `stability`: 1000 back-to-back launches and 1000 graph replays per variant x config,
bitwise identical; the run repeated under CUDA_LAUNCH_BLOCKING=1 + TORCH_USE_CUDA_DSA=1 as a
diagnostic replay; and the second-launch canary, which this gate must catch.

Packs since the stale-result and stream checks also hold, per phase, in-place refills of the
inputs on a side stream behind a pending producer (oracles/stability.py), NaN-poisoned outputs
and an input comparison; their canaries (a pointer-keyed memo, a launch on the legacy stream)
must be caught here too."""
from __future__ import annotations

from pathlib import Path

from ..reporting.markdown import text  # report_md: every pack value escaped
from .base import ERROR, FAIL, PASS, StageContext, StageOutcome, read_json, worst
from .procs import Job, oracle_cmd, proc_problem, record_binary, run_jobs, selected_variants

NAME = "stability"
NEEDS_GPU = True
TIMEOUT_S = 1200
REQUIRED_FILES = ("procs.json",)  # raw files a stage that decided pass/fail keeps (verify requires them)
BINARY_RECORD = "binary.json"  # a passing stage keeps the record of the binary it loaded (verify requires it)
CANARY = "canary_second_launch"
CANARIES = (CANARY, "canary_memo", "canary_wrong_stream")
DIAG_ENV = {"CUDA_LAUNCH_BLOCKING": "1", "TORCH_USE_CUDA_DSA": "1"}
LAUNCHES = 1000


def run(ctx: StageContext) -> None:
    jobs = []
    for v in selected_variants(ctx.options):
        jobs.append(Job(v.name, oracle_cmd(ctx.repo, "stability.py", "--variant", v.name, "--launches",
                                           str(LAUNCHES), "--out", str(ctx.dir / f"{v.name}.json")), 300))
        jobs.append(Job(f"{v.name}.diagnostic", oracle_cmd(
            ctx.repo, "stability.py", "--variant", v.name, "--launches", "100", "--out",
            str(ctx.dir / f"{v.name}.diagnostic.json")), 300, env=DIAG_ENV))
    for c in CANARIES:
        jobs.append(Job(c, oracle_cmd(ctx.repo, "stability.py", "--variant", c, "--launches",
                                      str(LAUNCHES), "--out", str(ctx.dir / f"{c}.json")), 300))
    run_jobs(jobs, ctx.dir, ctx.repo, gpus=ctx.options.get("gpus"))
    record_binary(ctx.dir, [ctx.dir / f"{j.name}.json" for j in jobs if j.name not in CANARIES])


def _cell(stage_dir: Path, name: str) -> tuple[str, str, dict]:
    problem = proc_problem(stage_dir, name)
    if problem:
        return ERROR, problem, {}
    try:
        res = read_json(stage_dir / f"{name}.json", allow_nan=True)
    except (FileNotFoundError, ValueError) as exc:
        return ERROR, f"{name}: no readable result ({exc})", {}
    rows = res["rows"]
    if not rows:
        return ERROR, f"{name}: no config was checked", res
    if res.get("first_error"):
        return FAIL, f"{name}: CUDA error: {res['first_error']}", res
    bad = [r for r in rows if not r["passed"]]
    if bad:
        r = bad[0]
        return FAIL, (f"{name}: {r['config']} causal={r['causal']}: {r['eager']['mismatched_launches']} eager "
                      f"launches and {r['graph']['mismatched_replays']} graph replays differ bitwise"
                      + _new_checks(r)), res
    n = rows[0]["eager"]["launches"]
    extra = ""
    if "refill" in rows[0]["eager"]:
        extra = f", {rows[0]['eager']['refill']['rounds']} + {rows[0]['graph']['refill']['rounds']} in-place refills"
    return PASS, f"{name}: {len(rows)} config x causal cells bitwise stable over {n} launches + {n} replays{extra}", res


def _new_checks(row: dict) -> str:
    """The refill / input findings of a failed row (rows of packs that record them)."""
    notes = []
    for phase in ("eager", "graph"):
        ph = row[phase]
        if "refill" not in ph:
            continue
        if ph["refill"]["bad_rounds"]:
            notes.append(f"{phase}: {ph['refill']['bad_rounds']}/{ph['refill']['rounds']} in-place refills behind a "
                         f"side-stream producer gave a wrong output (err {ph['refill']['worst_err']:.3g}): stale "
                         f"result or a launch outside the caller's stream")
        if ph["inputs_changed"]:
            notes.append(f"{phase}: {ph['inputs_changed']} input elements changed")
    return "".join(f"; {n}" for n in notes)


def derive(stage_dir: Path, pack_dir: Path) -> StageOutcome:
    procs = read_json(stage_dir / "procs.json")
    cells, data = {}, {"variants": {}, "diagnostic": {}}
    for name in procs:
        if name in CANARIES:
            continue
        status, reason, res = _cell(stage_dir, name)
        cells[name] = (status, reason)
        key = "diagnostic" if name.endswith(".diagnostic") else "variants"
        data[key][name] = {"status": status, "reason": reason, "first_error": res.get("first_error"),
                           "graph_capture_s": [r["graph"]["capture_s"] for r in res.get("rows", [])
                                               if r.get("graph")]}
    data["canaries"] = []
    for c in (c for c in CANARIES if c in procs):
        c_status, c_reason, _ = _cell(stage_dir, c)
        data["canaries"].append({"name": c, "expected": "fail", "observed": c_status, "caught": c_status == FAIL,
                                 "reason": c_reason})
    status = worst(s for s, _ in cells.values())
    reason = "; ".join(r for s, r in cells.values() if s != PASS) or \
        f"{len(cells)} runs stable (incl. CUDA_LAUNCH_BLOCKING=1 TORCH_USE_CUDA_DSA=1 replays)"
    return StageOutcome(status, reason, data)


def report_md(stage_dir: Path, outcome: StageOutcome) -> str:
    lines = ["| run | status | detail |", "|---|---|---|"]
    for key in ("variants", "diagnostic"):
        for n, v in outcome.data.get(key, {}).items():
            lines.append(f"| {text(n)} | {text(v['status'])} | {text(v['reason'])} |")
    return "\n".join(lines)


__all__ = ["PASS"]
