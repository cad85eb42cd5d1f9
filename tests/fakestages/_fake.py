"""Stand-in stages for the pipeline tests (selected with EVPACK_STAGE_PACKAGE=fakestages).

FAKE_PLAN (JSON) maps a stage name to one of: pass, fail, error, skipped, raise,
crash (the process dies with SIGSEGV), hang (sleeps past the timeout),
sleep:N (sleeps N seconds, then passes). "gpu": [...] lists the stages that run
isolated in their own process, as GPU stages do. "bench_rows": [...] is written as the bench
stage's summary.json (the rows `compare` reads). "cells": {stage: [seconds, ...]} runs one cell
process per entry through stages/procs.run_jobs, on the scheduler's shared slot pool when the run
has one (each cell writes <cell>.json with its own wall-clock start and end).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from evpack.stages.base import StageContext, StageOutcome, read_json, write_json
from evpack.stages.procs import Job, run_jobs, stage_pool

CELL = ("import json, sys, time; t = time.time(); time.sleep(float(sys.argv[1])); "
        "json.dump({'start': t, 'end': time.time()}, open(sys.argv[2], 'w'))")

FAKE_SHA = "ab" * 32


def _plan() -> dict:
    return json.loads(os.environ.get("FAKE_PLAN", "{}"))


def make(name: str) -> dict:
    """Module globals for stage `name`; the plan is read at use time (tests change it between runs)."""

    def run(ctx: StageContext) -> None:
        plan = _plan()
        what = plan.get(name, "pass")
        write_json(ctx.dir / "raw.json", {"stage": name, "plan": what, "values": [1, 2, 3]})
        sha = plan.get("binary", {}).get(name, FAKE_SHA if name in ("build", "correctness") else None)
        if sha:
            write_json(ctx.dir / "binary.json", {"module": "evpack._C", "path": "/x/_C.so", "sha256": sha})
        (ctx.dir / "tool.log").write_text(f"raw output of {name}\n", encoding="utf-8")
        if name == "bench" and "bench_rows" in plan:  # rows for `compare` (only it reads them)
            write_json(ctx.dir / "summary.json", {"schema": 1, "rows": plan["bench_rows"]})
        cells = plan.get("cells", {}).get(name)
        if cells:
            jobs = [Job(f"cell{i}", [sys.executable, "-c", CELL, str(sec), str(ctx.dir / f"cell{i}.json")], 60,
                        est_s=sec) for i, sec in enumerate(cells)]
            pool = stage_pool(ctx)
            run_jobs(jobs, ctx.dir, ctx.repo, parallel=None if pool else 1, pool=pool)
        if what == "raise":
            raise RuntimeError(f"{name} broke")
        if what == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        if what == "hang":
            time.sleep(3600)
        if what.startswith("sleep:"):
            time.sleep(float(what.split(":")[1]))

    def derive(stage_dir: Path, pack_dir: Path) -> StageOutcome:
        raw = read_json(stage_dir / "raw.json")
        status = raw["plan"] if raw["plan"] in ("pass", "fail", "error", "skipped") else "pass"
        return StageOutcome(status, f"{name} says {status}", {"sum": sum(raw["values"]), "elapsed_s": 0.1})

    def report_md(stage_dir: Path, outcome: StageOutcome) -> str:
        return f"{name}: sum={outcome.data.get('sum')}"

    def module_getattr(attr: str):
        if attr == "NEEDS_GPU":
            return name in _plan().get("gpu", [])
        if attr == "TIMEOUT_S":
            return int(_plan().get("timeout", 5))
        raise AttributeError(attr)

    return {"NAME": name, "run": run, "derive": derive, "report_md": report_md, "__getattr__": module_getattr}
