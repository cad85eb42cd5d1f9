"""Running one stage under the stage contract.

GPU stages run in their own process (`python -m evpack _run-stage`) with a
timeout, so a crash, an illegal address or a hang becomes `error` with its log
kept. How a stage ran is recorded in `<stage>/runner.json`; `final_outcome`
combines that record with the stage's pure `derive()` and is what both
`evidence` and `verify` call.
"""
from __future__ import annotations

import json
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

from .stages.base import ERROR, SKIPPED, StageContext, StageOutcome, read_json, write_json
from .stages.order import stage_module
from .stages.procs import last_line, run_isolated

RUNNER_FILE = "runner.json"
LOG_FILE = "stage.log"


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def record_skip(stage_dir: Path, stage: str, reason: str) -> None:
    stage_dir.mkdir(parents=True, exist_ok=True)
    write_json(stage_dir / RUNNER_FILE, {"stage": stage, "started_utc": _now(), "duration_s": 0.0,
                                         "mode": "none", "returncode": None, "timed_out": False,
                                         "skipped": reason, "exception": None})


def run_stage(name: str, pack_dir: Path, repo: Path, options: dict, *, isolate: bool, timeout_s: int) -> None:
    """Run one stage; never raises for stage failures (they are recorded)."""
    stage_dir = pack_dir / name
    stage_dir.mkdir(parents=True, exist_ok=True)
    rec = {"stage": name, "started_utc": _now(), "duration_s": None, "mode": "process" if isolate else "inline",
           "returncode": None, "timed_out": False, "skipped": None, "exception": None}
    t0 = time.monotonic()
    if isolate:
        cmd = [sys.executable, "-m", "evpack", "_run-stage", name, "--pack", str(pack_dir),
               "--options", json.dumps(options)]
        run = run_isolated(cmd, stage_dir / LOG_FILE, repo=repo, timeout_s=timeout_s, grace_s=10, append=True)
        rec["returncode"], rec["timed_out"] = run["returncode"], run["timed_out"]
    else:
        try:
            run_inline(name, pack_dir, repo, options)
            rec["returncode"] = 0
        except Exception as exc:  # the stage broke: recorded, never fatal to the pack
            rec["returncode"] = 1
            rec["exception"] = f"{type(exc).__name__}: {exc}"
            with open(stage_dir / LOG_FILE, "a", encoding="utf-8") as log:
                log.write(traceback.format_exc())
    rec["duration_s"] = round(time.monotonic() - t0, 3)
    write_json(stage_dir / RUNNER_FILE, rec)


def run_inline(name: str, pack_dir: Path, repo: Path, options: dict) -> None:
    mod = stage_module(name)
    ctx = StageContext(pack_dir=pack_dir, dir=pack_dir / name, repo=repo, options=options)
    mod.run(ctx)


def _log_tail(stage_dir: Path) -> str:
    return last_line(stage_dir / LOG_FILE)


def final_outcome(name: str, pack_dir: Path) -> StageOutcome:
    """Status of a stage from the files in the pack alone (used by evidence and verify)."""
    stage_dir = pack_dir / name
    try:
        rec = read_json(stage_dir / RUNNER_FILE)
    except FileNotFoundError:
        return StageOutcome(ERROR, f"{name}: no {RUNNER_FILE}: the stage never ran to completion")
    except (json.JSONDecodeError, OSError) as exc:
        return StageOutcome(ERROR, f"{name}: unreadable {RUNNER_FILE}: {exc}")
    if rec.get("skipped"):
        return StageOutcome(SKIPPED, rec["skipped"])
    if rec.get("timed_out"):
        return StageOutcome(ERROR, f"timed out after {rec.get('duration_s')} s; log kept in {name}/{LOG_FILE}: "
                                   f"{_log_tail(stage_dir)}")
    if rec.get("returncode") != 0:
        what = rec.get("exception") or f"stage process exited with code {rec.get('returncode')}"
        return StageOutcome(ERROR, f"{what}; log kept in {name}/{LOG_FILE}: {_log_tail(stage_dir)}")
    try:
        return stage_module(name).derive(stage_dir, pack_dir)
    except Exception as exc:
        return StageOutcome(ERROR, f"could not derive {name} from its files: {type(exc).__name__}: {exc}")
