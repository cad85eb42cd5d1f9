from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# A committer identity for the test repositories (a CI machine's git may have none).
GIT_AS_TESTER = ("git", "-c", "user.name=t", "-c", "user.email=t@example.org")
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


@pytest.fixture(autouse=True, scope="session")
def _private_tool_cache(tmp_path_factory):
    """SASS runs in the tests keep cuobjdump's output in a tool cache of their own, not the user's
    (evpack.toolcache); subprocesses inherit it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVPACK_TOOL_CACHE", str(tmp_path_factory.mktemp("tool-cache")))
        yield


# Variables the libraries set in-process for themselves (pytest per phase; Triton and TorchInductor when a
# test compiles in-process): not a test's leak, and not put back (the library may rely on them).
_LIBRARY_OWNED = ("PYTEST_CURRENT_TEST", "TRITON_", "_TORCHINDUCTOR", "TORCHINDUCTOR_")


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(_LIBRARY_OWNED)}


def _put_back(before: dict[str, str], who: str) -> None:
    """Fail `who` if os.environ differs from `before`, after putting it back."""
    after = _environ()
    if after == before:
        return
    for k in after.keys() - before.keys():
        del os.environ[k]
    os.environ.update(before)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    pytest.fail(f"{who} left os.environ changed: {', '.join(changed)} (use monkeypatch)", pytrace=False)


@pytest.fixture(autouse=True, scope="module")
def _no_environment_leak_from_a_module():
    """The same for a module's fixtures: a module-scoped fixture runs before any test's own guard. A leaked
    FAKE_PLAN once made every later `run_cli` verify the real reference packs on the stand-in stages."""
    before = _environ()
    yield
    _put_back(before, "this module (a fixture of it)")


@pytest.fixture(autouse=True)
def _no_environment_leak():
    """A test that leaves os.environ changed fails here, and the environment is put back."""
    before = _environ()
    yield
    _put_back(before, "the test")


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


def run_cli(*args: str, env: dict | None = None, timeout: int = 120, repo: Path = REPO) -> subprocess.CompletedProcess:
    """`python -m evpack ARGS` in a fresh process; with a fake_env plan, on the stand-in stages; repo= the
    evpack of another checkout (a scratch_checkout)."""
    e = dict(env or os.environ)
    first = [str(TESTS)] + ([str(repo / "python")] if repo != REPO else [])
    e["PYTHONPATH"] = os.pathsep.join([*first, e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    args = list(args)
    if "FAKE_PLAN" in e and args and args[0] in _STAGE_PACKAGE_COMMANDS:
        args += ["--stage-package", FAKE]
    return subprocess.run([sys.executable, "-m", "evpack", *args], capture_output=True, text=True, env=e,
                          timeout=timeout, cwd=repo)


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


def scratch_checkout(dst: Path) -> Path:
    """A copy of this checkout's sources (what git tracks or would add; artifacts/ left out) in `dst`, made a
    git repository of one commit: a test that builds the extension builds it there, never in the checkout,
    whose build outputs (python/evpack/_C*.so, build/) are the user's."""
    git = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         capture_output=True)
    if git.returncode != 0:
        pytest.skip(f"{REPO} is not a git checkout: no scratch copy of its sources")
    listed = git.stdout.decode().split("\0")
    for name in listed:
        src = REPO / name
        if name and not name.startswith("artifacts/") and src.is_file() and not src.is_symlink():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    for cmd in (["init", "-q"], ["add", "-A"], ["-c", "commit.gpgsign=false", "commit", "-qm", "scratch"]):
        subprocess.run(["git", *cmd], cwd=dst, env=env, check=True, capture_output=True)
    return dst


def build_outputs(repo: Path = REPO) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every build output of a checkout: the extensions and everything under build/."""
    files = [*(repo / "python" / "evpack").glob("*.so"), *(p for p in (repo / "build").rglob("*") if p.is_file())]
    out = {}
    for p in files:
        try:
            st = p.lstat()
        except OSError:
            continue
        out[str(p.relative_to(repo))] = (st.st_size, st.st_mtime_ns)
    return out


def pytest_sessionstart(session):
    session.config._evpack_build_outputs = build_outputs()  # compared when the session ends


def pytest_sessionfinish(session, exitstatus):
    """The tests never write into this checkout's build outputs (a test build goes to a scratch_checkout)."""
    before = getattr(session.config, "_evpack_build_outputs", None)
    if before is None:
        return
    after = build_outputs()
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if changed:
        print(f"\nERROR: the tests changed {len(changed)} build output(s) of the checkout {REPO}: "
              + ", ".join(changed[:10]), file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def copy_pack(src: Path, dst_root: Path) -> Path:
    dst = dst_root / src.name
    shutil.copytree(src, dst, symlinks=True)
    return dst


@pytest.fixture
def needs_ssh_keygen():
    """For the tests that sign and check signatures with the real OpenSSH client (`pytestmark` of their files)."""
    if shutil.which("ssh-keygen") is None:
        from ssh_helpers import missing

        missing("ssh-keygen not found on PATH (OpenSSH client): the signature tests need the real tool")
