"""Running one stage under the stage contract.

GPU stages run in their own process (`python -m evpack _run-stage`) with a timeout, so a crash,
an illegal address or a hang becomes `error` with its log kept. While such a process runs, its
log is followed and shown line by line (and a heartbeat every HEARTBEAT_S of silence), so a
person watching the terminal sees the stage move. How a stage ran is recorded in
`<stage>/runner.json`; `derivation.final_outcome` combines that record with the stage's derive().
"""
from __future__ import annotations

import json
import logging
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

from .derivation import LOG_FILE, RUNNER_FILE
from .jsonio import write_json
from .records.runner import INLINE, PROCESS, RunnerRecord
from .stages.base import StageContext
from .stages.logfollow import LogFollower
from .stages.order import stage_module
from .stages.procs import run_isolated

log = logging.getLogger("evpack")


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def record_skip(stage_dir: Path, stage: str, reason: str) -> None:
    stage_dir.mkdir(parents=True, exist_ok=True)
    write_json(stage_dir / RUNNER_FILE, RunnerRecord.skip(stage, _now(), reason).to_json())


def run_stage(name: str, pack_dir: Path, repo: Path, options: dict, *, isolate: bool, timeout_s: int,
              stages: str | None = None, slots: Path | None = None) -> None:
    """Run one stage; never raises for stage failures (they are recorded). `slots`: the scheduler's shared
    GPU slot pool (StageContext.slots)."""
    stage_dir = pack_dir / name
    stage_dir.mkdir(parents=True, exist_ok=True)
    rec = RunnerRecord(name, _now(), mode=PROCESS if isolate else INLINE).to_json()
    t0 = time.monotonic()
    # isolated: show the process's log as it grows; inline: the stage logs itself, add a heartbeat
    follower = LogFollower(stage_dir / LOG_FILE if isolate else None, name)
    follower.start()
    try:
        _run(name, pack_dir, repo, options, rec, isolate=isolate, timeout_s=timeout_s, stages=stages, slots=slots)
    finally:
        follower.stop.set()
        follower.join()
    rec["duration_s"] = round(time.monotonic() - t0, 3)
    write_json(stage_dir / RUNNER_FILE, rec)


def _run(name: str, pack_dir: Path, repo: Path, options: dict, rec: dict, *, isolate: bool, timeout_s: int,
         stages: str | None, slots: Path | None) -> None:
    stage_dir = pack_dir / name
    if isolate:
        cmd = [sys.executable, "-m", "evpack", "_run-stage", name, "--pack", str(pack_dir),
               "--options", json.dumps(options)]
        if stages:
            cmd += ["--stage-package", stages]
        if slots:
            cmd += ["--slots", str(slots)]
        run = run_isolated(cmd, stage_dir / LOG_FILE, repo=repo, timeout_s=timeout_s, grace_s=10, append=True)
        rec["returncode"], rec["timed_out"] = run["returncode"], run["timed_out"]
    else:
        try:
            run_inline(name, pack_dir, repo, options, stages=stages, slots=slots)
            rec["returncode"] = 0
        except Exception as exc:  # the stage broke: recorded, never fatal to the pack
            rec["returncode"] = 1
            rec["exception"] = f"{type(exc).__name__}: {exc}"
            with open(stage_dir / LOG_FILE, "a", encoding="utf-8") as f:
                f.write(traceback.format_exc())


def run_inline(name: str, pack_dir: Path, repo: Path, options: dict, *, stages: str | None = None,
               slots: Path | None = None) -> None:
    mod = stage_module(name, stages)
    ctx = StageContext(pack_dir=pack_dir, dir=pack_dir / name, repo=repo, options=options, slots=slots)
    mod.run(ctx)
