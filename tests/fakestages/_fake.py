"""Stand-in stages for the pipeline tests (selected with EVPACK_STAGE_PACKAGE=fakestages).

FAKE_PLAN (JSON) maps a stage name to one of: pass, fail, error, skipped, raise,
crash (the process dies with SIGSEGV), hang (sleeps past the timeout),
sleep:N (sleeps N seconds, then passes). "gpu": [...] lists the stages that run
isolated in their own process, as GPU stages do. "bench_rows": [...] is written as the bench
stage's summary.json (the rows `compare` reads).

"cells": true runs the GPU stages as the real ones are run: one process per variant (and a canary) through
the real procs.run_jobs, for the variants procs.variants_to_run leaves (an incremental run carries the
others); build writes result.json and sass a real cuobjdump dump (tests/fixtures/sass, the wmma and scalar
kernels) and run.json, from which evpack.incremental derives the device keys. "device_edit": [variant, ...]
changes one instruction of each kernel of those variants in the dump (a changed kernel); "cell_fail":
[variant, ...] makes their cells exit 1.
"pool_cells": {stage: [seconds, ...]} runs one cell process per entry through stages/procs.run_jobs, on the
scheduler's shared slot pool when the run has one (each cell writes <cell>.json with its own wall-clock start
and end).
"""
from __future__ import annotations

import gzip
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

from evpack.stages.base import StageContext, StageOutcome, read_json, write_json
from evpack.stages.procs import Job, run_jobs, stage_pool, variants_to_run

CELL = ("import json, sys, time; t = time.time(); time.sleep(float(sys.argv[1])); "
        "json.dump({'start': t, 'end': time.time()}, open(sys.argv[2], 'w'))")

FAKE_SHA = "ab" * 32
CELL_STAGES = ("tensor_proof", "sanitize", "correctness", "stability")
VARIANT_CELLS = "variant_cells.json"  # marks a stage whose cells ran in the "cells" (one per variant) mode
SASS_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sass" / "kernels.sm80_89_90.sass.gz"
CELL_CODE = ("import json, sys; json.dump({'variant': sys.argv[2], 'ok': True, 'pid': __import__('os').getpid()}, "
             "open(sys.argv[1], 'w')); print('cell of', sys.argv[2]); sys.exit(int(sys.argv[3]))")


def _plan() -> dict:
    return json.loads(os.environ.get("FAKE_PLAN", "{}"))


def make(name: str) -> dict:
    """Module globals for stage `name`; the plan is read at use time (tests change it between runs)."""

    def run(ctx: StageContext) -> None:
        plan = _plan()
        if plan.get("cells"):
            _cells_run(name, ctx, plan)
        what = plan.get(name, "pass")
        write_json(ctx.dir / "raw.json", {"stage": name, "plan": what, "values": [1, 2, 3]})
        sha = plan.get("binary", {}).get(name, FAKE_SHA if name in ("build", "correctness") else None)
        if sha:
            write_json(ctx.dir / "binary.json", {"module": "evpack._C", "path": "/x/_C.so", "sha256": sha})
        (ctx.dir / "tool.log").write_text(f"raw output of {name}\n", encoding="utf-8")
        if name == "bench" and "bench_rows" in plan:  # rows for `compare` (only it reads them)
            write_json(ctx.dir / "summary.json", {"schema": 1, "rows": plan["bench_rows"]})
        cells = plan.get("pool_cells", {}).get(name)
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
        if name in CELL_STAGES and (stage_dir / VARIANT_CELLS).is_file():
            return _cells_derive(name, stage_dir)
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


def _cell_name(stage: str, variant: str) -> str:
    return f"memcheck.{variant}.m64n64" if stage == "sanitize" else variant


def _cells_run(name: str, ctx: StageContext, plan: dict) -> None:
    if name == "build":
        write_json(ctx.dir / "result.json", {"returncode": 0, "env": {"EVPACK_CUDA_ARCHS": "80;89;90"}})
    elif name == "sass":
        text = gzip.decompress(SASS_FIXTURE.read_bytes()).decode()
        for variant in plan.get("device_edit", []):  # the first instruction of each of its kernels becomes a NOP
            text = re.sub(rf"(Function : _ZN6evpack{len(variant)}{variant}10fwd_kernel\S*\n[^/]*/\*0000\*/\s+)\S+",
                          r"\1NOP", text)
        (ctx.dir / "evpack._C.sass.gz").write_bytes(gzip.compress(text.encode(), mtime=0))
        write_json(ctx.dir / "run.json", {"binaries": [{"module": "evpack._C", "dump": "evpack._C.sass.gz", "rc": 0}]})
    elif name in CELL_STAGES:
        fail = plan.get("cell_fail", [])
        variants = [v.name for v in variants_to_run(ctx)]
        jobs = [Job(_cell_name(name, v), [sys.executable, "-c", CELL_CODE, str(ctx.dir / f"{_cell_name(name, v)}.json"),
                                          v, "1" if v in fail else "0"], 60) for v in variants + ["canary_wrong_result"]]
        run_jobs(jobs, ctx.dir, ctx.repo)
        write_json(ctx.dir / VARIANT_CELLS, {"variants": variants})


def _cells_derive(name: str, stage_dir: Path) -> StageOutcome:
    procs = read_json(stage_dir / "procs.json")
    bad = [c for c, rec in procs.items() if rec["returncode"] != 0 or not read_json(stage_dir / f"{c}.json")["ok"]]
    status = "fail" if bad else "pass"
    return StageOutcome(status, f"{name}: {len(procs) - len(bad)}/{len(procs)} cells pass",
                        {"cells": sorted(procs), "failed": bad})
