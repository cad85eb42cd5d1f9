from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "tests"))


def _cuda_available() -> tuple[bool, str]:
    try:
        import torch
    except Exception as exc:  # pragma: no cover
        return False, f"torch not importable: {exc}"
    if not torch.cuda.is_available():
        return False, "no CUDA device (torch.cuda.is_available() is False)"
    return True, ""


def pytest_collection_modifyitems(config, items):
    ok, why = _cuda_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fake_env(monkeypatch, tmp_path):
    """Run the real pipeline on stand-in stages; returns a function(plan) -> env for subprocesses."""

    def set_plan(plan: dict) -> dict:
        monkeypatch.setenv("EVPACK_STAGE_PACKAGE", "fakestages")
        monkeypatch.setenv("FAKE_PLAN", json.dumps(plan))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO / "python"), str(REPO / "tests")]))
        return dict(os.environ)

    return set_plan


def run_cli(*args: str, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    e = dict(env or os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), str(REPO / "tests"), e.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "evpack", *args], capture_output=True, text=True, env=e,
                          timeout=timeout, cwd=REPO)


def copy_pack(src: Path, dst_root: Path) -> Path:
    dst = dst_root / src.name
    shutil.copytree(src, dst, symlinks=True)
    return dst
