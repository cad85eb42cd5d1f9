"""One process per cell: exit codes, timeouts that kill the whole process group, the binary record."""
from __future__ import annotations

import json
import sys

from conftest import REPO

from evpack.stages.procs import Job, proc_problem, record_binary, run_jobs


def test_cells_record_exit_codes_and_timeouts(tmp_path):
    child = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    jobs = [Job("ok", [sys.executable, "-c", "print('fine')"], 30),
            Job("bad", [sys.executable, "-c", "raise SystemExit(3)"], 30),
            Job("hang", [sys.executable, "-c", child], 1)]
    recs = run_jobs(jobs, tmp_path, REPO, parallel=3)
    assert recs["ok"]["returncode"] == 0 and (tmp_path / "ok.log").read_text().strip() == "fine"
    assert recs["bad"]["returncode"] == 3
    assert recs["hang"]["timed_out"] and recs["hang"]["duration_s"] < 30  # the grandchild did not keep it alive
    assert proc_problem(tmp_path, "ok") is None
    assert proc_problem(tmp_path, "bad").startswith("bad: exited 3")
    assert "timed out" in proc_problem(tmp_path, "hang")
    assert json.loads((tmp_path / "procs.json").read_text()).keys() == {"ok", "bad", "hang"}


def test_record_binary_takes_the_first_result_that_names_one(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"rows": []}))
    (tmp_path / "b.json").write_text(json.dumps({"binary": {"module": "evpack._C", "sha256": "1" * 64}}))
    (tmp_path / "c.json").write_text(json.dumps({"binary": {"module": "evpack._C", "sha256": "2" * 64}}))
    record_binary(tmp_path, [tmp_path / n for n in ("missing.json", "a.json", "b.json", "c.json")])
    assert json.loads((tmp_path / "binary.json").read_text())["sha256"] == "1" * 64
