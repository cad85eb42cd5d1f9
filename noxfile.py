"""Thin sessions: each installs what it needs, then calls `python -m evpack <command>`.

The package is installed (editable) into the session's interpreter; nothing edits the import
path. GPU sessions reuse the interpreter that runs nox when it already has torch (the GPU
machine: only the editable evpack is added, nothing is downloaded); on a machine without torch
they use a virtualenv with the CPU extras, kept between runs (`reuse_venv`), so a rerun with
nothing changed reinstalls nothing and ninja recompiles nothing.

verify, label, compare, history, merge and report need no torch (verify is standard-library only:
tests/test_layers.py): their virtualenvs hold pip, setuptools, evpack and, for report, the renderer
(the `report` extra; `history --plot` adds matplotlib), under 150 MB. On the GPU machine they reuse
its interpreter like the GPU sessions (nothing can be downloaded there).
"""
from __future__ import annotations

import importlib.util
import os
import sys
import urllib.request
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
TEST_WORKERS = 4  # nox -s tests: the most pytest-xdist workers (CI has 2 cores)
# The sessions whose command needs no torch, and the extras each installs.
LIGHT = {"verify": (), "label": (), "compare": (), "history": (), "merge": (), "report": ("report",)}
# torch for a CPU virtualenv. Every torch 2.13.0 wheel for Linux x86_64 on PyPI is a CUDA build (527 MB,
# and 19 nvidia-*/cuda-* wheels besides: `pip install --dry-run --report` of torch==2.13.0, 2026-11-24);
# PyPI holds no CPU build for Linux x86_64 under any version, so no pin reaches one through PyPI alone.
# The CPU build, 2.13.0+cpu (192 MB), is on the PyTorch CPU index, and it satisfies the `cpu` extra's
# torch==2.13.0 (a local version label matches the plain pin and sorts above it). So torch is installed
# first, with that index added to pip's own when it answers: the CPU build there; where only PyPI is
# reachable (the CI runners) the CUDA build from PyPI, which runs on a CPU too; a wheel folder of pip's
# configuration (find-links) counts either way. The index is added, not put in PyPI's place, for this one
# install. EVPACK_TORCH_INDEX names another index, or "none" for pip's configuration alone.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _torch_index(session: nox.Session) -> str | None:
    """The index to add for torch, when it answers (a 5 s probe), else None (said in the session's log)."""
    index = os.environ.get("EVPACK_TORCH_INDEX", TORCH_CPU_INDEX).strip()
    if index.lower() in ("", "none", "off"):
        return None
    try:
        with urllib.request.urlopen(urllib.request.Request(index.rstrip("/") + "/torch/", method="HEAD"),
                                    timeout=5):
            pass
    except (OSError, ValueError) as exc:
        session.log(f"torch index {index} does not answer ({exc}): torch comes from pip's own index "
                    "(on PyPI, for Linux x86_64: the CUDA build)")
        return None
    return index


def _has_torch(session: nox.Session) -> bool:
    location = Path(session.virtualenv.location)
    return any(location.glob("lib/python3*/site-packages/torch-*.dist-info"))


def _install(session: nox.Session, *, groups: tuple[str, ...]) -> None:
    """The pyproject extras named in groups (one source of truth), then evpack itself, editable."""
    if session.venv_backend == "none":
        # the interpreter that runs nox (torch and CUDA already there): add evpack, nothing else
        session.run(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-e", str(ROOT), external=True)
        return
    if "cpu" in groups and not _has_torch(session):
        torch = next(d for d in EXTRAS["cpu"] if d.split("=")[0].strip() == "torch")
        index = _torch_index(session)
        session.install(torch, *(("--extra-index-url", index) if index else ()), silent=False)
    # silent=False: pip's own lines show while a cold virtualenv fills (no long silent stretch);
    # setuptools builds the editable evpack (--no-build-isolation)
    session.install("setuptools>=70.1", *[d for g in groups for d in EXTRAS[g]], silent=False)
    session.install("--no-deps", "--no-build-isolation", "-e", str(ROOT))


def _evpack(session: nox.Session, *args: str) -> None:
    python = sys.executable if session.venv_backend == "none" else "python"
    session.run(python, "-m", "evpack", *args, *session.posargs, external=python != "python")


def _torch_command(session: nox.Session, *args: str) -> None:
    _install(session, groups=("cpu",))
    _evpack(session, *args)


def _light_command(session: nox.Session, command: str) -> None:
    plot = command == "history" and any(a == "--plot" or a.startswith("--plot=") for a in session.posargs)
    _install(session, groups=LIGHT[command] + (("plot",) if plot else ()))
    _evpack(session, command)


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
    """python -m evpack report [posargs] (no torch)"""
    _light_command(session, "report")


@nox.session(venv_backend=TORCH_VENV, python=None)
def verify(session: nox.Session) -> None:
    """python -m evpack verify [posargs] (no torch)"""
    _light_command(session, "verify")


@nox.session(venv_backend=TORCH_VENV, python=None)
def label(session: nox.Session) -> None:
    """python -m evpack label [posargs] (no torch)"""
    _light_command(session, "label")


@nox.session(venv_backend=TORCH_VENV, python=None)
def merge(session: nox.Session) -> None:
    """python -m evpack merge [posargs]: several GPUs' packs of one commit into one verdict (no torch)"""
    _light_command(session, "merge")


@nox.session(venv_backend=TORCH_VENV, python=None)
def compare(session: nox.Session) -> None:
    """python -m evpack compare [posargs] (no torch)"""
    _light_command(session, "compare")


@nox.session(venv_backend=TORCH_VENV, python=None)
def history(session: nox.Session) -> None:
    """python -m evpack history [posargs] (no torch)"""
    _light_command(session, "history")


@nox.session
def tests(session: nox.Session) -> None:
    """CPU test suite (GPU tests are skipped with a reason where there is no CUDA device)."""
    _install(session, groups=("cpu", "test"))
    # the whole suite: one worker per core (at most TEST_WORKERS), each taking whole files (their module
    # fixtures are made once); named tests or options run as given, in one process
    default = ["tests", "-n", "auto", "--maxprocesses", str(TEST_WORKERS), "--dist", "loadfile"]
    session.run("python", "-m", "pytest", *(session.posargs or default),
                env={"MAX_JOBS": os.environ.get("MAX_JOBS", "2")})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff on the Python sources; actionlint and zizmor (offline, no finding of medium or higher) on the workflows."""
    _install(session, groups=("lint", "test"))
    session.run("ruff", "check", "python", "tests", "oracles", "noxfile.py", "setup.py", *session.posargs)
    workflows = ROOT / ".github" / "workflows"
    session.run("actionlint", *map(str, sorted(workflows.glob("*.yml"))))
    session.run("zizmor", "--offline", "--persona", "auditor", "--min-severity", "medium", str(workflows))
