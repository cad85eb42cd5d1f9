"""Stage `sanitize`: memcheck (+leak check), racecheck, initcheck, synccheck on every registered
variant x config (one process per cell, on the same release binary that is benchmarked), and
each tool's canary, which it must flag for the gate to count as live."""
from __future__ import annotations

import math
from pathlib import Path

from .. import registry
from ..markdown import code, text  # report_md: every pack value escaped
from ..parsers.sanitizer import TOOLS, canary_caught, cell_status, parse_sanitizer
from ..records.canary import CanaryRecord
from ..records.procs import CellRun
from ..records.sanitize import SanitizeCell, SanitizeData, SanitizeRun
from ..tools import find_tool
from .base import ERROR, PASS, StageContext, StageOutcome, read_json, worst, write_json
from .order import declared
from .procs import Job, oracle_cmd, run_jobs, selected_variants, stage_pool, variants_to_run

NAME = "sanitize"
SPEC = declared(NAME)  # stages/order.py: the one declaration of this stage
NEEDS_GPU, TIMEOUT_S = SPEC.needs_gpu, SPEC.timeout_s
REQUIRED_FILES = SPEC.required_files  # raw files a stage that decided keeps (verify requires them)
BINARY_RECORD = SPEC.binary_record  # the record of the binary a passing stage loaded
CELL_TIMEOUT_S = 240
EXIT_CODE = 86  # --error-exitcode: tells "the tool found errors" from a crash
CANARY_FOR = {c.expect_caught_by: c.name for c in registry.CANARIES if c.expect_caught_by in TOOLS}
ENV = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
# Cells are mostly CPU-bound (instrumentation, interpreter start-up). 12 at a time on the 16-core
# H200 host: 32 cells (194.8 s of process time) in 19.2 s wall (reference pack
# 20261121T142018Z-b40b5c2fd4c6; per-cell times in its sanitize/procs.json).
PARALLEL = 12


def tool_limits(tool: str, variant: str) -> list[str]:
    """Options that work around a documented limit of the tool for this variant (registry: tma_output)."""
    var = registry.get(variant, include_canaries=True)
    if tool == "initcheck" and var.tma_output:
        return ["--check-api-memory-access", "no"]  # TMA stores are not seen as writes by initcheck
    return []


def _cmd(repo: Path, sanitizer: str, tool: str, variant: str, config: str, binary_out: Path | None) -> list[str]:
    args = [sanitizer, "--tool", tool, "--error-exitcode", str(EXIT_CODE), "--print-limit", "20",
            "--kernel-name", "kns=fwd_kernel", "--report-api-errors", "no", *tool_limits(tool, variant)]
    if tool == "memcheck":
        args += ["--leak-check", "full"]
    target = ["--variant", variant, "--config", config]
    if binary_out:
        target += ["--binary-out", str(binary_out)]
    return args + oracle_cmd(repo, "sanitize_target.py", *target)


def run(ctx: StageContext) -> None:
    sanitizer = find_tool("compute-sanitizer")
    if sanitizer is None:
        write_json(ctx.dir / "missing_tool.json", {"tool": "compute-sanitizer", "found": False})
        return
    jobs = []
    for v in variants_to_run(ctx):
        for cfg in v.configs:
            for tool in TOOLS:
                bin_out = ctx.dir / "binary.json" if not jobs else None
                jobs.append(Job(f"{tool}.{v.name}.{cfg.name}", _cmd(ctx.repo, sanitizer, tool, v.name, cfg.name,
                                                                    bin_out), CELL_TIMEOUT_S, ENV))
    for tool, canary in CANARY_FOR.items():
        cfg = registry.get(canary, include_canaries=True).configs[0]
        jobs.append(Job(f"{tool}.{canary}.{cfg.name}", _cmd(ctx.repo, sanitizer, tool, canary, cfg.name, None),
                        CELL_TIMEOUT_S, ENV))
    limits = {f"{tool}.{v.name}": tool_limits(tool, v.name) for v in selected_variants(ctx.options) for tool in TOOLS
              if tool_limits(tool, v.name)}
    write_json(ctx.dir / "run.json", {"parallel": PARALLEL, "gpus": ctx.options.get("gpus"), "cell_timeout_s": CELL_TIMEOUT_S, "env": ENV,
                                      "tool_limits": limits})
    # a scheduled run: the cells share the GPU's slots with the other checks (PARALLEL stays this stage's cap)
    run_jobs(jobs, ctx.dir, ctx.repo, parallel=PARALLEL, gpus=ctx.options.get("gpus"), pool=stage_pool(ctx))


def derive(stage_dir: Path, pack_dir: Path) -> StageOutcome:
    if (stage_dir / "missing_tool.json").exists():
        return StageOutcome(ERROR, "compute-sanitizer not found on PATH or in CUDA_HOME")
    procs = {name: CellRun.of(rec) for name, rec in read_json(stage_dir / "procs.json").items()}
    cells, canaries = [], []
    for name, rec in procs.items():
        tool, variant, config = name.split(".", 2)
        log = stage_dir / f"{name}.log"
        text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        res = parse_sanitizer(text, tool)
        if variant.startswith("canary_"):
            caught = canary_caught(res, rec.returncode)
            canaries.append(CanaryRecord(
                variant, caught, ", ".join(res.records) or f"exit {rec.returncode}, no records", tool=tool,
                expected=f"{tool} flags it", reason=f"{res.errors} errors" if res.summary_found else "no summary")
                .to_json())
            continue
        summary = {k: v for k, v in res.to_json().items() if k != "tool"}
        status, reason = cell_status(res, rec.returncode, rec.timed_out)
        cells.append(SanitizeCell(tool, variant, config, rec.returncode, rec.duration_s, summary, status, reason))
    if not cells:
        return StageOutcome(ERROR, "no sanitizer cell ran", {"cells": [], "canaries": canaries})
    status = worst(c.status for c in cells)
    bad = [c for c in cells if c.status != PASS]
    # math.fsum: the correctly rounded sum, whatever the cells' order or the Python (3.12's sum() compensates, 3.11's
    # does not: 856.95 rounded to 857.0 on one and 856.9 on the other, and verify then saw a mismatch)
    total_s = round(math.fsum(r.duration_s for r in procs.values()), 1)
    reason = (f"{len(bad)}/{len(cells)} cells not clean, first: {bad[0].tool} {bad[0].variant}/"
              f"{bad[0].config}: {bad[0].reason}") if bad else \
        f"{len(cells)} (tool, variant, config) cells clean"
    return StageOutcome(status, reason, {"cells": [c.to_json() for c in cells], "canaries": canaries,
                                         "cell_seconds_total": total_s})


def _run_record(stage_dir: Path, default: SanitizeRun) -> SanitizeRun:
    return SanitizeRun.from_json(read_json(stage_dir / "run.json")) if (stage_dir / "run.json").is_file() else default


def report_md(stage_dir: Path, outcome: StageOutcome) -> str:
    data = SanitizeData.from_json(outcome.data)
    cells = data.cells
    if not cells:
        return ""
    tools = [t for t in TOOLS if any(c.tool == t for c in cells)]
    keys = sorted({(c.variant, c.config) for c in cells})
    run = _run_record(stage_dir, SanitizeRun())
    limits = [f"{code(cell)} ran with {code(' '.join(map(str, opts)))}"
              for cell, opts in (run.tool_limits or {}).items()]
    note = ("Documented tool limits (registry `tma_output`: initcheck does not see TMA stores as writes; "
            "device-side reads are still checked): " + "; ".join(limits) + ".\n\n") if limits else ""
    lines = [note + "Each cell: status, errors/hazards from the parsed summary, and wall time of its process.", "",
             "| variant | config | " + " | ".join(tools) + " |", "|---|---|" + "---|" * len(tools)]
    for v, cfg in keys:
        row = []
        for t in tools:
            c = next((c for c in cells if (c.variant, c.config, c.tool) == (v, cfg, t)), None)
            if c is None:
                row.append("-")
                continue
            n = c.hazards if t == "racecheck" else c.errors
            row.append(text(f"{str(c.status).upper()} {'-' if n is None else n} ({c.duration_s:.0f} s)"))
        lines.append(f"| {text(v)} | {text(cfg)} | " + " | ".join(row) + " |")
    run = _run_record(stage_dir, SanitizeRun(parallel=PARALLEL))
    lines.append(f"\nTotal process time {text(data.cell_seconds_total)} s (run {text(run.parallel)} at a time).")
    return "\n".join(lines)
