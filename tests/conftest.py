from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
FAKE = "fakestages"  # the stand-in stage package (tests/fakestages), passed as a parameter
# CLI commands that take the stand-in stage package (hidden option --stage-package)
_STAGE_PACKAGE_COMMANDS = {"evidence", "build", "ptxas", "sass", "tensor_proof", "sanitize", "correctness",
                           "stability", "canaries", "bench", "oracles", "verify", "label", "report",
                           "merge", "sign"}


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
        monkeypatch.setenv("FAKE_PLAN", json.dumps(plan))
        # the isolated stage processes import the stand-in package from tests/, and this checkout's evpack
        # (not another installed copy)
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(REPO / "python")]))
        return dict(os.environ)

    return set_plan


def run_cli(*args: str, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    """`python -m evpack ARGS` in a fresh process; with a fake_env plan, on the stand-in stages."""
    e = dict(env or os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(TESTS), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    args = list(args)
    if "FAKE_PLAN" in e and args and args[0] in _STAGE_PACKAGE_COMMANDS:
        args += ["--stage-package", FAKE]
    return subprocess.run([sys.executable, "-m", "evpack", *args], capture_output=True, text=True, env=e,
                          timeout=timeout, cwd=REPO)


def fake_pack(root: Path, **kw) -> Path:
    """A pack made by the real pipeline on the stand-in stages (a fake_env plan must be set); repo= another
    git checkout to record its commit instead of this one's."""
    from evpack.evidence import run_evidence

    return run_evidence(kw.pop("repo", REPO), selected=kw.pop("selected", None), packs_root=root,
                        options=kw.pop("options", {}), stages=FAKE, **kw).pack


def verify_fake(pack: Path) -> list[str]:
    """Everything `verify` checks (consistency and provenance), for a pack made on the stand-in stages."""
    from evpack.verify import verify_all

    return verify_all(pack, stages=FAKE)[0]


def copy_pack(src: Path, dst_root: Path) -> Path:
    dst = dst_root / src.name
    shutil.copytree(src, dst, symlinks=True)
    return dst
