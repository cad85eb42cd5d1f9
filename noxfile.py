"""Thin sessions: each installs what it needs, then calls `python -m evpack <command>`.

The package is installed (editable) into the session's interpreter; nothing edits the import
path. GPU sessions reuse the interpreter that runs nox when it already has torch (the GPU
machine: only the editable evpack is added, nothing is downloaded); on a machine without torch
they use a virtualenv with the CPU extras, kept between runs (`reuse_venv`), so a rerun with
nothing changed reinstalls nothing and ninja recompiles nothing.
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
nox.options.reuse_venv = "yes"
HAS_TORCH = importlib.util.find_spec("torch") is not None
TORCH_VENV = "none" if HAS_TORCH else None  # reuse the GPU machine's interpreter
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _install(session: nox.Session, *, groups: tuple[str, ...]) -> None:
    """The pyproject extras named in groups (one source of truth), then evpack itself, editable."""
    if session.venv_backend == "none":
        # the interpreter that runs nox (torch and CUDA already there): add evpack, nothing else
        session.run(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-e", str(ROOT), external=True)
        return
    # silent=False: pip's own lines show while a cold virtualenv fills (no long silent stretch)
    session.install(*[d for g in groups for d in EXTRAS[g]], silent=False)
    session.install("--no-deps", "--no-build-isolation", "-e", str(ROOT))


def _evpack(session: nox.Session, *args: str) -> None:
    python = sys.executable if session.venv_backend == "none" else "python"
    session.run(python, "-m", "evpack", *args, *session.posargs, external=python != "python")


def _torch_command(session: nox.Session, *args: str) -> None:
    _install(session, groups=("cpu",))
    _evpack(session, *args)


@nox.session(venv_backend=TORCH_VENV, python=None)
def evidence(session: nox.Session) -> None:
    """python -m evpack evidence [posargs]: every stage, the reports, verify."""
    _torch_command(session, "evidence")


@nox.session(venv_backend=TORCH_VENV, python=None)
def build(session: nox.Session) -> None:
    """python -m evpack build [posargs]"""
    _torch_command(session, "build")


@nox.session(venv_backend=TORCH_VENV, python=None)
def ptxas(session: nox.Session) -> None:
    """python -m evpack ptxas [posargs]"""
    _torch_command(session, "ptxas")


@nox.session(venv_backend=TORCH_VENV, python=None)
def sass(session: nox.Session) -> None:
    """python -m evpack sass [posargs]"""
    _torch_command(session, "sass")


@nox.session(venv_backend=TORCH_VENV, python=None)
def tensor_proof(session: nox.Session) -> None:
    """python -m evpack tensor_proof [posargs]"""
    _torch_command(session, "tensor_proof")


@nox.session(venv_backend=TORCH_VENV, python=None)
def sanitize(session: nox.Session) -> None:
    """python -m evpack sanitize [posargs]"""
    _torch_command(session, "sanitize")


@nox.session(venv_backend=TORCH_VENV, python=None)
def oracles(session: nox.Session) -> None:
    """python -m evpack oracles [posargs]: correctness, stability, canaries"""
    _torch_command(session, "oracles")


@nox.session(venv_backend=TORCH_VENV, python=None)
def bench(session: nox.Session) -> None:
    """python -m evpack bench [posargs]"""
    _torch_command(session, "bench")


@nox.session(venv_backend=TORCH_VENV, python=None)
def env(session: nox.Session) -> None:
    """python -m evpack env [posargs]"""
    _torch_command(session, "env")


@nox.session(venv_backend=TORCH_VENV, python=None)
def report(session: nox.Session) -> None:
    """python -m evpack report [posargs]"""
    _torch_command(session, "report")


@nox.session(venv_backend=TORCH_VENV, python=None)
def verify(session: nox.Session) -> None:
    """python -m evpack verify [posargs]"""
    _torch_command(session, "verify")


@nox.session(venv_backend=TORCH_VENV, python=None)
def label(session: nox.Session) -> None:
    """python -m evpack label [posargs]"""
    _torch_command(session, "label")


@nox.session(venv_backend=TORCH_VENV, python=None)
def merge(session: nox.Session) -> None:
    """python -m evpack merge [posargs]: several GPUs' packs of one commit into one verdict"""
    _torch_command(session, "merge")


@nox.session(venv_backend=TORCH_VENV, python=None)
def compare(session: nox.Session) -> None:
    """python -m evpack compare [posargs]"""
    _torch_command(session, "compare")


@nox.session(venv_backend=TORCH_VENV, python=None)
def history(session: nox.Session) -> None:
    """python -m evpack history [posargs]"""
    _torch_command(session, "history")


@nox.session
def tests(session: nox.Session) -> None:
    """CPU test suite (GPU tests are skipped with a reason where there is no CUDA device)."""
    _install(session, groups=("cpu", "test"))
    session.run("python", "-m", "pytest", *(session.posargs or ["tests"]),
                env={"MAX_JOBS": os.environ.get("MAX_JOBS", "2")})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff on the Python sources; actionlint and zizmor (offline, no finding of medium or higher) on the workflows."""
    _install(session, groups=("lint", "test"))
    session.run("ruff", "check", "python", "tests", "oracles", "noxfile.py", "setup.py", *session.posargs)
    workflows = ROOT / ".github" / "workflows"
    session.run("actionlint", *map(str, sorted(workflows.glob("*.yml"))))
    session.run("zizmor", "--offline", "--persona", "auditor", "--min-severity", "medium", str(workflows))
