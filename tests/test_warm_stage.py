"""A warm stage (runner.WarmStage): the bench's process starts when the GPU checks start, prepares, and waits.

The run is the real pipeline on the stand-in stages (tests/fakestages), with the GPU stages in their own
processes as on a GPU machine. What must hold: the stage's work starts only at its turn (after every GPU check
ended), in the process started early; a process that never gets its turn, or whose run is gone, does not stay.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from conftest import FAKE, REPO, TESTS

from evpack.runner import WarmStage, run_stage
from evpack.stages.base import read_json

GPU = ["tensor_proof", "sanitize", "correctness", "stability", "bench"]


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(REPO / "python")]))
    return monkeypatch


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(pid: int, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_the_bench_prepares_while_the_checks_run_and_starts_at_its_turn(tmp_path, env):
    from evpack.evidence import run_evidence

    env.setenv("FAKE_PLAN", json.dumps({"gpu": GPU, "sanitize": "sleep:2", "correctness": "sleep:1"}))
    pack = run_evidence(REPO, selected=None, packs_root=tmp_path / "packs", options={}, stages=FAKE,
                        gpu=(True, "")).pack
    log = (pack / "bench" / "stage.log").read_text()
    assert "bench: prepared in" in log
    waited = float(re.search(r"bench: its turn came after ([\d.]+) s of waiting", log)[1])
    assert waited >= 1.0  # it started with the checks (sanitize ran 2 s) and waited for them
    t = read_json(pack / "pack.json")["timings"]["stages"]
    assert t["bench"]["start_s"] >= max(t[s]["end_s"] for s in ("sanitize", "correctness", "stability"))
    assert read_json(pack / "bench" / "runner.json")["returncode"] == 0
    assert read_json(pack / "bench" / "raw.json")["stage"] == "bench"  # its work ran, at its turn


def test_without_gpu_checks_the_bench_starts_cold(tmp_path, env):
    from evpack.evidence import run_evidence

    env.setenv("FAKE_PLAN", json.dumps({"gpu": ["bench"]}))
    pack = run_evidence(REPO, selected=None, packs_root=tmp_path / "packs", options={}, stages=FAKE,
                        gpu=(True, "")).pack
    assert "prepared in" not in (pack / "bench" / "stage.log").read_text()
    assert read_json(pack / "bench" / "runner.json")["returncode"] == 0


def _warm(tmp_path, options=None) -> WarmStage:
    (tmp_path / "slots").mkdir(exist_ok=True)
    return WarmStage("bench", tmp_path / "pack", REPO, options or {}, stages=FAKE, slots=tmp_path / "slots")


def _until(pred, seconds: float = 20.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_a_warm_process_that_never_gets_its_turn_is_killed(tmp_path, env):
    env.setenv("FAKE_PLAN", json.dumps({"gpu": GPU}))
    warm = _warm(tmp_path)
    log = tmp_path / "pack" / "bench" / "stage.log"
    assert _until(lambda: log.exists() and "waiting for its turn" in log.read_text())
    assert warm.proc.poll() is None
    warm.cancel()
    assert warm.proc.poll() is not None and not (tmp_path / "pack" / "bench" / "raw.json").exists()


def test_a_warm_process_started_with_other_options_is_not_used(tmp_path, env):
    """The stage runs what a start at its turn would run: a warm process with another command is killed and
    the stage gets a process of its own."""
    env.setenv("FAKE_PLAN", json.dumps({"gpu": GPU}))
    warm = _warm(tmp_path, {"suite": "quick"})
    run_stage("bench", tmp_path / "pack", REPO, {"suite": "full"}, isolate=True, timeout_s=30, stages=FAKE,
              slots=tmp_path / "slots", warm=warm)
    assert warm.proc.poll() is not None and not warm.used
    assert read_json(tmp_path / "pack" / "bench" / "runner.json")["returncode"] == 0
    assert "its turn came" not in (tmp_path / "pack" / "bench" / "stage.log").read_text()


def test_a_warm_process_whose_run_is_gone_exits(tmp_path, env):
    """The evidence run dies without killing it (SIGKILL): the warm process sees its parent gone and exits
    rather than wait forever, and never runs the stage."""
    (tmp_path / "slots").mkdir()
    code = ("import json, os, sys; from pathlib import Path; from evpack.runner import WarmStage; "
            f"w = WarmStage('bench', Path({str(tmp_path / 'pack')!r}), Path({str(REPO)!r}), {{}}, "
            f"stages={FAKE!r}, slots=Path({str(tmp_path / 'slots')!r})); print(w.proc.pid, flush=True); "
            "import time; time.sleep(1.5); os._exit(0)")
    env.setenv("FAKE_PLAN", json.dumps({"gpu": GPU}))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    pid = int(out.stdout.split()[0])
    assert _wait_gone(pid), "the warm process outlived the run that started it"
    log = (tmp_path / "pack" / "bench" / "stage.log").read_text()
    assert "the evidence run is gone" in log and not (tmp_path / "pack" / "bench" / "raw.json").exists()
