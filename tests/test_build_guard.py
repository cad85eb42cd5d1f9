"""No build output comes from the checkout (python/evpack/buildguard.py).

The attack: a commit carries files the build would reuse as if it had compiled them (ninja's objects under
build/, a kept Triton cubin, the in-place extension), force-added past .gitignore or with build/ taken out of
.gitignore by the same commit. Each entry point that builds refuses such a checkout with one line before
anything compiles: setup.py (a direct build, and the A/B base's build, which runs REF's own setup.py), the
evidence command's pre-flight (exit 2, nothing written), and the head's check of the base's worktree (for a
REF whose setup.py predates the guard).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import GIT_AS_TESTER

from evpack import buildguard, cli
from evpack.errors import PackError
from evpack.timing import baseline_build

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

PLANTED = "build/temp.linux-x86_64-cpython-312/_C/build/generated/_C/wgmma_fp16_d64.o"


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*GIT_AS_TESTER, "-C", str(repo), *args],
                          check=True, capture_output=True, text=True, timeout=60)


def _checkout(tmp_path: Path, *, with_setup: bool = False) -> Path:
    """A git checkout with the project's .gitignore (and, with_setup, its setup.py and the guard it loads)."""
    repo = tmp_path / "co"
    repo.mkdir()
    _git(repo, "init", "-q")
    shutil.copyfile(REPO / ".gitignore", repo / ".gitignore")
    if with_setup:
        shutil.copyfile(REPO / "setup.py", repo / "setup.py")
        (repo / "python" / "evpack").mkdir(parents=True)
        shutil.copyfile(REPO / "python" / "evpack" / "buildguard.py", repo / "python" / "evpack" / "buildguard.py")
    (repo / "README").write_text("x\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "clean")
    return repo


def _plant(repo: Path, rel: str, *, force: bool = True) -> None:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF not compiled here")
    _git(repo, "add", *(["-f"] if force else []), rel)
    _git(repo, "commit", "-qm", f"plant {rel}")


def test_a_clean_checkout_tracks_no_build_output(tmp_path):
    repo = _checkout(tmp_path)
    (repo / "build").mkdir()
    (repo / "build" / "x.o").write_bytes(b"built here, untracked")  # what a real build leaves: not a problem
    assert buildguard.tracked_outputs(repo) == []
    assert buildguard.refusal(repo) is None


def test_this_project_tracks_no_build_output():
    if not (REPO / ".git").exists():
        pytest.skip("the tests run outside a git checkout")
    assert buildguard.tracked_outputs(REPO) == []


@pytest.mark.parametrize("rel", [PLANTED, "build/triton/_C/wgmma.cubin", "build/lib.linux-x86_64-cpython-312/x.txt",
                                 "python/evpack/_C.cpython-312-x86_64-linux-gnu.so", "csrc/variants/x.fatbin",
                                 "build/temp/_C/k.o.ptxas.log"])
def test_a_force_added_build_output_is_seen(tmp_path, rel):
    repo = _checkout(tmp_path)
    _plant(repo, rel)
    assert buildguard.tracked_outputs(repo) == [rel]
    line = buildguard.refusal(repo)
    assert line is not None and rel in line and "\n" not in line


def test_taking_build_out_of_gitignore_does_not_hide_it(tmp_path):
    repo = _checkout(tmp_path)
    gitignore = repo / ".gitignore"
    kept = [line for line in gitignore.read_text().splitlines(True) if line.strip() not in ("/build/", "*.o", "*.so")]
    assert len(kept) < len(gitignore.read_text().splitlines())
    gitignore.write_text("".join(kept))
    _plant(repo, PLANTED, force=False)
    assert buildguard.tracked_outputs(repo) == [PLANTED]


def test_setup_py_refuses_before_compiling(tmp_path):
    repo = _checkout(tmp_path, with_setup=True)
    _plant(repo, PLANTED)
    proc = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=repo, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("evpack build refused: git tracks 1 build output") and PLANTED in lines[-1]
    assert not (repo / "build" / "generated").exists()  # nothing was generated or compiled


def test_the_evidence_preflight_refuses_with_one_line(tmp_path, monkeypatch):
    repo = _checkout(tmp_path)
    _plant(repo, "python/evpack/_C.cpython-312-x86_64-linux-gnu.so")
    monkeypatch.setattr(cli, "REPO", repo)
    with pytest.raises(PackError, match=r"^build refused: git tracks 1 build output"):
        cli.check_build_environment({})


def test_the_base_build_is_refused_for_a_ref_that_tracks_build_outputs(tmp_path):
    repo = _checkout(tmp_path)
    _plant(repo, PLANTED)
    ran = tmp_path / "ran"
    res = baseline_build.build(repo, tmp_path / "out", archs="90",
                               command=[sys.executable, "-c", f"open({str(ran)!r}, 'w')"])
    assert not ran.exists()  # the base's own build command never ran
    assert res.returncode is None and res.error.startswith("base build refused:") and PLANTED in res.error
    assert PLANTED in (tmp_path / "out" / baseline_build.LOG_FILE).read_text()


def test_a_checkout_git_cannot_list_is_refused(tmp_path, monkeypatch):
    repo = _checkout(tmp_path)
    monkeypatch.setattr(buildguard.shutil, "which", lambda name: None)
    assert buildguard.refusal(repo).startswith("build refused: cannot check")
    plain = tmp_path / "archive"
    plain.mkdir()
    assert buildguard.refusal(plain) is None  # no .git: a source archive tracks nothing


@pytest.mark.parametrize("how", ["symlink", "gitlink"])
def test_build_as_a_link_or_a_submodule_is_seen(tmp_path, how):
    """build/ itself tracked as a symbolic link to a folder of ready objects, or as a submodule entry."""
    repo = _checkout(tmp_path)
    if how == "symlink":
        ready = tmp_path / "ready" / "temp"
        ready.mkdir(parents=True)
        (ready / "x.o").write_bytes(b"not compiled here")
        (repo / "build").symlink_to(ready.parent)
        _git(repo, "add", "-f", "build")
    else:
        head = _git(repo, "rev-parse", "HEAD").stdout.strip()
        _git(repo, "update-index", "--add", "--cacheinfo", f"160000,{head},build")
    _git(repo, "commit", "-qm", f"build as a {how}")
    assert buildguard.tracked_outputs(repo) == ["build"]
    assert buildguard.refusal(repo).startswith("build refused: git tracks 1 build output")
