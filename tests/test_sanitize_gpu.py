"""The sanitize stage's runner on a real GPU: a clean cell passes and its canary is caught.

Runs the stage's own command line (sanitize._cmd) and runner (procs.run_jobs), then the
pack's derivation, for memcheck on the scalar kernel and on the out-of-bounds canary.
Needs the extension built with EVPACK_CANARIES=1 and compute-sanitizer.
"""
from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.gpu

from conftest import REPO  # noqa: E402

from evpack import registry  # noqa: E402
from evpack.stages import sanitize  # noqa: E402
from evpack.stages.base import PASS  # noqa: E402
from evpack.stages.procs import Job, run_jobs  # noqa: E402
from evpack.tools import find_tool  # noqa: E402


@pytest.fixture
def sanitizer():
    tool = find_tool("compute-sanitizer")
    if tool is None:
        pytest.skip("compute-sanitizer not found on PATH or in CUDA_HOME")
    if importlib.util.find_spec("evpack._canaries") is None:
        pytest.skip("evpack._canaries not built (build with EVPACK_CANARIES=1)")
    return tool


def test_memcheck_cell_clean_and_its_canary_caught(sanitizer, tmp_path):
    scalar = registry.get("scalar").configs[0].name
    canary = sanitize.CANARY_FOR["memcheck"]
    ccfg = registry.get(canary, include_canaries=True).configs[0].name
    jobs = [Job(f"memcheck.scalar.{scalar}", sanitize._cmd(REPO, sanitizer, "memcheck", "scalar", scalar, None),
                sanitize.CELL_TIMEOUT_S, sanitize.ENV),
            Job(f"memcheck.{canary}.{ccfg}", sanitize._cmd(REPO, sanitizer, "memcheck", canary, ccfg, None),
                sanitize.CELL_TIMEOUT_S, sanitize.ENV)]
    run_jobs(jobs, tmp_path, REPO, parallel=2)
    outcome = sanitize.derive(tmp_path, tmp_path)
    (cell,) = outcome.data["cells"]
    assert cell["status"] == PASS, (cell, (tmp_path / f"{jobs[0].name}.log").read_text()[-3000:])
    assert cell["errors"] == 0 and cell["returncode"] == 0
    (row,) = outcome.data["canaries"]
    assert row["caught"], (row, (tmp_path / f"{jobs[1].name}.log").read_text()[-3000:])
    assert outcome.status == PASS
