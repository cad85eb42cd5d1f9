"""Running one stage under the stage contract.

GPU stages run in their own process (`python -m evpack _run-stage`) with a timeout, so a crash,
an illegal address or a hang becomes `error` with its log kept. While such a process runs, its
log is followed and shown line by line (and a heartbeat every HEARTBEAT_S of silence), so a
person watching the terminal sees the stage move. How a stage ran is recorded in
`<stage>/runner.json`; `derivation.final_outcome` combines that record with the stage's derive().

A stage's process may be started before its turn (`WarmStage`): it runs the stage module's `prepare(options)`
(imports, the extension, a CUDA context: nothing that checks or measures), then waits until its turn comes
(`await_turn`), which is when the scheduler starts the stage; from there it is the same process, with the same
timeout, as a stage started then. A warm process that never gets its turn is killed.
"""
from __future__ import annotations

import json
import logging
import os
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
from .stages.procs import kill_isolated, run_isolated, start_isolated, wait_isolated

log = logging.getLogger("evpack")
TURN_POLL_S = 0.02


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def record_skip(stage_dir: Path, stage: str, reason: str) -> None:
    stage_dir.mkdir(parents=True, exist_ok=True)
    write_json(stage_dir / RUNNER_FILE, RunnerRecord.skip(stage, _now(), reason).to_json())


def _stage_cmd(name: str, pack_dir: Path, options: dict, stages: str | None, slots: Path | None) -> list[str]:
    cmd = [sys.executable, "-m", "evpack", "_run-stage", name, "--pack", str(pack_dir), "--options", json.dumps(options)]
    if stages:
        cmd += ["--stage-package", stages]
    if slots:
        cmd += ["--slots", str(slots)]
    return cmd


class WarmStage:
    """An isolated stage's process started before its turn, waiting in `await_turn` for the file `turn` (in the
    scheduler's slot folder, outside the pack) that `run_stage` creates when the stage starts."""

    def __init__(self, name: str, pack_dir: Path, repo: Path, options: dict, *, stages: str | None, slots: Path):
        self.turn = Path(slots) / f"{name}.turn"
        self.turn.unlink(missing_ok=True)
        (pack_dir / name).mkdir(parents=True, exist_ok=True)
        cmd = _stage_cmd(name, pack_dir, options, stages, slots) + ["--start-after", str(self.turn)]
        self.cmd = cmd[:-2]  # the stage's own command: what a stage started at its turn runs
        self.proc = start_isolated(cmd, pack_dir / name / LOG_FILE, repo=repo, append=True)
        self.used = False
        log.info("%s: its process starts now and waits for its turn", name)

    def cancel(self) -> None:
        """Kill the process if the stage never took it (skipped, or the run stopped)."""
        if not self.used:
            kill_isolated(self.proc)


def await_turn(name: str, turn: Path, options: dict, *, stages: str | None = None) -> bool:
    """In a warm stage process: prepare, then wait for `turn`. False when the process that started this one
    is gone (nobody will give the turn)."""
    parent = os.getppid()
    prepare = getattr(stage_module(name, stages), "prepare", None)
    t0 = time.monotonic()
    if prepare is not None:
        prepare(options)
    print(f"{name}: prepared in {time.monotonic() - t0:.1f} s; waiting for its turn", flush=True)
    t1 = time.monotonic()
    while not turn.exists():
        if os.getppid() != parent:
            print(f"{name}: the evidence run is gone; exiting", flush=True)
            return False
        time.sleep(TURN_POLL_S)
    print(f"{name}: its turn came after {time.monotonic() - t1:.1f} s of waiting", flush=True)
    return True


def run_stage(name: str, pack_dir: Path, repo: Path, options: dict, *, isolate: bool, timeout_s: int,
              stages: str | None = None, slots: Path | None = None, warm: WarmStage | None = None) -> None:
    """Run one stage; never raises for stage failures (they are recorded). `slots`: the scheduler's shared
    GPU slot pool (StageContext.slots). `warm`: this stage's process, started before its turn; it is used only
    when it runs exactly the command a start now would (otherwise it is killed and a process starts now)."""
    stage_dir = pack_dir / name
    stage_dir.mkdir(parents=True, exist_ok=True)
    rec = RunnerRecord(name, _now(), mode=PROCESS if isolate else INLINE).to_json()
    t0 = time.monotonic()
    # isolated: show the process's log as it grows; inline: the stage logs itself, add a heartbeat
    follower = LogFollower(stage_dir / LOG_FILE if isolate else None, name)
    follower.start()
    try:
        _run(name, pack_dir, repo, options, rec, isolate=isolate, timeout_s=timeout_s, stages=stages, slots=slots,
             warm=warm)
    finally:
        follower.stop.set()
        follower.join()
    rec["duration_s"] = round(time.monotonic() - t0, 3)
    write_json(stage_dir / RUNNER_FILE, rec)


def _run(name: str, pack_dir: Path, repo: Path, options: dict, rec: dict, *, isolate: bool, timeout_s: int,
         stages: str | None, slots: Path | None, warm: WarmStage | None = None) -> None:
    stage_dir = pack_dir / name
    if isolate:
        cmd = _stage_cmd(name, pack_dir, options, stages, slots)
        if warm is not None and warm.cmd == cmd and warm.proc.poll() is None:
            warm.used = True
            t0 = time.monotonic()
            warm.turn.touch()
            run = wait_isolated(warm.proc, t0, timeout_s=timeout_s, grace_s=10)
        else:
            if warm is not None:
                warm.cancel()
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
