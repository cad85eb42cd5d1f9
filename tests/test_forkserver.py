"""The fork server (stages/forkserver.py): one child per cell, a process of its own, as `python script` runs.

Driven on the CPU with small scripts in place of the oracles: the server imports torch once (CPU torch here);
each child runs its script with its own argv, cwd, sys.path[0] and log, and a crash, an exit code, a raised
exception or a hang is that cell's alone."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import REPO

from evpack.stages import forkserver
from evpack.stages.base import read_json
from evpack.stages.procs import Job, SlotPool, run_jobs

SCRIPTS = {
    "ok.py": "import os, sys, helper\nprint('argv', sys.argv[1:], 'cwd', os.getcwd(), 'pid', os.getpid(), "
             "'sid', os.getsid(0) == os.getpid(), 'helper', helper.X, 'mod', __name__, flush=True)\n",
    "helper.py": "X = 42\n",
    "exit3.py": "import sys\nprint('leaving'); sys.exit(3)\n",
    "boom.py": "raise ValueError('the cell broke')\n",
    "crash.py": "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
    "hang.py": "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(120)\n",
    "env.py": "import os\nprint('visible', os.environ.get('CUDA_VISIBLE_DEVICES'), flush=True)\n",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fork")
    for name, text in SCRIPTS.items():
        (tmp / name).write_text(text, encoding="utf-8")
    sock = tmp / "fork.sock"
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), CUDA_VISIBLE_DEVICES="GPU-test")
    proc = subprocess.Popen([sys.executable, "-m", "evpack.stages.forkserver", str(sock)], cwd=tmp, env=env,
                            start_new_session=True)
    try:
        yield tmp, sock
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _cell(server, script: str, *args: str, timeout_s: float = 60):
    tmp, sock = server
    log = tmp / f"{script}.{time.monotonic_ns()}.log"
    rec = forkserver.run_forked(sock, [sys.executable, str(tmp / script), *args], log, cwd=tmp, timeout_s=timeout_s)
    return rec, log.read_text(encoding="utf-8") if log.exists() else ""


def test_a_forked_cell_runs_as_python_script_would(server):
    rec, log = _cell(server, "ok.py", "--variant", "x y")
    assert rec["returncode"] == 0 and not rec["timed_out"]
    assert "argv ['--variant', 'x y']" in log and f"cwd {server[0]}" in log
    assert "sid True" in log and "helper 42" in log and "mod __main__" in log  # own session; sys.path[0]
    rec, log = _cell(server, "env.py")
    assert "visible GPU-test" in log  # the server's GPU (its CUDA_VISIBLE_DEVICES)


@pytest.mark.parametrize("script, rc, text", [("exit3.py", 3, "leaving"), ("boom.py", 1, "ValueError: the cell broke"),
                                              ("crash.py", -11, "")])
def test_a_failing_cell_fails_alone_with_its_code_and_log(server, script, rc, text):
    rec, log = _cell(server, script)
    assert rec["returncode"] == rc and not rec["timed_out"]
    assert text in log
    assert _cell(server, "ok.py")[0]["returncode"] == 0  # the server lives on


def test_a_hanging_cell_is_killed_with_its_group_at_its_timeout(server):
    t0 = time.monotonic()
    rec, log = _cell(server, "hang.py", timeout_s=1.5)
    assert rec["timed_out"] and rec["returncode"] == -9
    assert time.monotonic() - t0 < 30
    pid = int(log.split()[0])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_cells_run_side_by_side(server):
    recs = []
    threads = [threading.Thread(target=lambda: recs.append(_cell(server, "ok.py")[0])) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(recs) == 4 and all(r["returncode"] == 0 for r in recs)


def test_no_server_means_no_forked_cell(tmp_path):
    assert forkserver.run_forked(tmp_path / "none.sock", [sys.executable, "x.py"], tmp_path / "x.log", cwd=tmp_path,
                                 timeout_s=5, connect_s=0.3) is None


def test_the_server_refuses_what_is_not_a_script(server):
    import json  # noqa: PLC0415
    import socket  # noqa: PLC0415

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(str(server[1]))
        s.sendall(json.dumps({"cmd": ["/bin/sh", "-c", "true"], "cwd": "/", "log": "/dev/null"}).encode() + b"\n")
        assert json.loads(s.makefile("rb").readline()) == {"error": "bad request"}


def test_run_jobs_forks_the_forkable_cells_and_records_how_each_ran(tmp_path):
    for name, text in SCRIPTS.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    pool = SlotPool(tmp_path / "pool", 2, fork=True)
    pool.write()
    servers = forkserver.start(pool.dir, None, tmp_path)
    try:
        jobs = [Job("a", [sys.executable, str(tmp_path / "ok.py")], 60, forkable=True),
                Job("b", [sys.executable, str(tmp_path / "exit3.py")], 60, forkable=True),
                Job("c", [sys.executable, str(tmp_path / "ok.py")], 60, env={"X": "1"}, forkable=True),
                Job("d", [sys.executable, str(tmp_path / "ok.py")], 60)]
        stage = tmp_path / "stage"
        stage.mkdir()
        recs = run_jobs(jobs, stage, tmp_path, parallel=None, pool=pool)
    finally:
        forkserver.stop(servers)
    assert {n: r["ran"] for n, r in recs.items()} == {"a": "forked", "b": "forked", "c": "process", "d": "process"}
    assert [recs[n]["returncode"] for n in "abcd"] == [0, 3, 0, 0]
    assert read_json(stage / "procs.json")["a"]["ran"] == "forked"
    assert "helper 42" in (stage / "a.log").read_text(encoding="utf-8")


def test_the_oracle_cells_that_may_fork_are_those_without_an_environment_of_their_own():
    from evpack.stages import correctness, stability  # noqa: PLC0415

    jobs = correctness.oracle_jobs(REPO, Path("/x"), ["scalar"], correctness.CANARIES, 1) + \
        stability.oracle_jobs(REPO, Path("/x"), ["scalar"], stability.CANARIES)
    assert all(j.forkable == (not j.env) for j in jobs)
    assert any(j.env for j in jobs)  # the CUDA_LAUNCH_BLOCKING replay starts a process of its own
    assert all(j.cmd[1].endswith(".py") for j in jobs)


@pytest.mark.gpu
def test_gpu_oracle_cells_forked_side_by_side_pass_and_catch_their_canaries(tmp_path):
    """The real oracles through the fork server, four at a time on one GPU: the honest variant passes, and the
    canaries are caught as they are in processes of their own (the check that concurrency and forking hide
    nothing)."""
    import importlib  # noqa: PLC0415
    import importlib.util  # noqa: PLC0415

    import torch  # noqa: PLC0415

    from evpack.model import FAIL, PASS  # noqa: PLC0415
    from evpack.stages import correctness, stability  # noqa: PLC0415
    from evpack.stages.base import write_json  # noqa: PLC0415

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    need = ("scalar", stability.CANARY, stability.CAPTURE_CANARY, correctness.CANARY)
    have = set()
    for module in ("evpack._C", "evpack._canaries"):
        if importlib.util.find_spec(module) is not None:
            have |= {k[0] for k in importlib.import_module(module).kernels()}
    if not set(need) <= have:
        pytest.skip(f"not built: {sorted(set(need) - have)} (build with EVPACK_CANARIES=1)")
    pool = SlotPool(tmp_path / "pool", 4, fork=True)
    pool.write()
    servers = forkserver.start(pool.dir, None, REPO)
    write_json(tmp_path / "pack.json", {"schema_version": 3})
    try:
        sd, cd = tmp_path / "stability", tmp_path / "correctness"
        sd.mkdir()
        cd.mkdir()
        sjobs = stability.oracle_jobs(REPO, sd, ["scalar"], (stability.CANARY, stability.CAPTURE_CANARY),
                                      launches=50)
        seed = 20261124
        write_json(cd / correctness.SHORTCUT_FILE, {"generator": correctness.SHORTCUT_GENERATOR, "seed": seed,
                                                    "cases": correctness.shortcut_cases(seed)})
        cjobs = correctness.oracle_jobs(REPO, cd, [], (correctness.CANARY,), seed, quick=True)
        threads = [threading.Thread(target=run_jobs, args=(jobs, d, REPO), kwargs={"parallel": None, "pool": pool})
                   for jobs, d in ((sjobs, sd), (cjobs, cd))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(900)
    finally:
        forkserver.stop(servers)
    sprocs, cprocs = read_json(sd / "procs.json"), read_json(cd / "procs.json")
    assert sprocs["scalar"]["ran"] == "forked" and sprocs["scalar.diagnostic"]["ran"] == "process"
    assert cprocs[correctness.CANARY]["ran"] == "forked"
    out = stability.derive(sd, tmp_path)
    assert out.data["variants"]["scalar"]["status"] == PASS, (sd / "scalar.log").read_text()[-2000:]
    assert out.data["diagnostic"]["scalar.diagnostic"]["status"] == PASS
    assert all(c["caught"] for c in out.data["canaries"]), out.data["canaries"]
    entry = correctness._canary_entry(cd, correctness.CANARY)
    assert entry["observed"] == FAIL and entry["caught"], (cd / f"{correctness.CANARY}.log").read_text()[-2000:]
