"""Thin sessions: each installs what it needs, then calls `python -m evpack <command>`.

GPU sessions reuse the interpreter that runs nox when it already has torch (the
GPU machine: nothing is reinstalled there); on a machine without torch they make
a virtualenv with the CPU extras so the build-time stages still run for real.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import nox
import tomllib

ROOT = Path(__file__).parent
nox.options.default_venv_backend = "virtualenv"
nox.options.sessions = ["evidence"]
HAS_TORCH = importlib.util.find_spec("torch") is not None
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _evpack(session: nox.Session, *args: str, python: str = "python") -> None:
    # Prepend, never replace: a machine without network carries pure-Python wheels (nox, the report
    # renderer) on PYTHONPATH (README, Notes).
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "python"), os.environ.get("PYTHONPATH")) if p)}
    session.run(python, "-m", "evpack", *args, *session.posargs, env=env, external=python != "python")


def _torch_session(name: str, *cmd: str):
    """A session that needs torch: the current interpreter if it has torch, else a CPU virtualenv."""

    @nox.session(name=name, venv_backend="none" if HAS_TORCH else None, python=None)
    def _session(session: nox.Session) -> None:
        if HAS_TORCH:
            _evpack(session, *cmd, python=sys.executable)
        else:
            _install(session, groups=("cpu",))
            _evpack(session, *cmd)

    _session.__doc__ = f"python -m evpack {' '.join(cmd)} [posargs]"
    return _session


def _install(session: nox.Session, *, groups: tuple[str, ...]) -> None:
    """Install the pyproject extras named in groups (one source of truth for dependencies)."""
    session.install(*[d for g in groups for d in EXTRAS[g]])


for _name, _cmd in {
    "evidence": ("evidence",), "build": ("build",), "ptxas": ("ptxas",), "sass": ("sass",),
    "tensor_proof": ("tensor_proof",), "sanitize": ("sanitize",), "oracles": ("oracles",),
    "bench": ("bench",), "env": ("env",), "report": ("report",), "verify": ("verify",),
    "label": ("label",), "compare": ("compare",), "history": ("history",),
}.items():
    globals()[f"session_{_name}"] = _torch_session(_name, *_cmd)


@nox.session
def tests(session: nox.Session) -> None:
    """CPU test suite (GPU tests are skipped with a reason where there is no CUDA device)."""
    _install(session, groups=("cpu", "test"))
    session.run("python", "-m", "pytest", *(session.posargs or ["tests"]),
                env={"PYTHONPATH": str(ROOT / "python"), "MAX_JOBS": os.environ.get("MAX_JOBS", "2")})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff on the Python sources, actionlint on the workflows."""
    _install(session, groups=("lint", "test"))
    session.run("ruff", "check", "python", "tests", "oracles", "noxfile.py", "setup.py", *session.posargs)
    session.run("actionlint", *map(str, sorted((ROOT / ".github" / "workflows").glob("*.yml"))))
