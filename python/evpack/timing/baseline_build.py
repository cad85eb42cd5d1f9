"""The base side of `--baseline REF`: validate REF up front, check it out into a git worktree, build it.

Order of events in a run with a baseline (driven by the CLI, see `prepared_baseline`):
  1. validate(): `git rev-parse --verify REF^{commit}` before any stage runs; an unknown REF,
     REF equal to HEAD without --self-check, or --self-check with a REF other than HEAD is a
     BaselineError (the CLI prints it and exits 2).
  2. create_worktree(): `git worktree add --detach` into a fresh folder under the system
     temporary folder (or $EVPACK_AB_DIR), outside the repository's tracked tree; a worktree
     that cannot be created is a BaselineError too (exit 2, before any stage runs).
  3. build(): `python setup.py build_ext --inplace` inside the worktree: REF's own setup.py,
     sources and build folder, only the extension the benchmark loads (no canaries), for the
     GPU's architecture when it is one of the head's (same nvcc flags otherwise). The log and
     result.json go to a folder the bench stage copies into the pack (bench/ab_build/).
     A failed build is not bad input: the bench stage records the A/B part as `error` with
     the log, and the head's evidence goes on. The evidence run builds it in the background, at a
     low CPU priority (`nice`), beside the head's stages: nothing but the bench reads it, and the bench
     stage waits for READY_FILE (written once every attempt ended) before it times anything.
  4. remove_worktree(): `git worktree remove --force` and the folder deleted, after the run.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from ..binary import find_built, sha256_file
from ..buildgen import DEFAULT_ARCHS  # setup.py's default, one definition
from ..buildguard import refusal
from ..errors import PackError
from ..jsonio import write_text

BUILD_TIMEOUT_S = 3600
RESULT_FILE = "result.json"
LOG_FILE = "build.log"
READY_FILE = "ready.json"  # every build attempt ended (its result.json is final)
NICE = 10  # the background build's CPU priority: the head's own build and cells go first
WAIT_S = 480  # the bench's wait for a background build (under its stage's 900 s, so the head is still timed)


class BaselineError(PackError):
    """Bad --baseline / --self-check input (one line; the CLI exits 2)."""


@dataclass(frozen=True)
class BaselineSpec:
    ref: str  # as given (branch, tag, commit, HEAD)
    commit: str  # what it resolved to
    head_commit: str
    self_check: bool


def _git(repo: Path, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise BaselineError("--baseline needs git, and git is not on PATH") from None
    except subprocess.TimeoutExpired:
        raise BaselineError(f"git {' '.join(args)} timed out after {timeout} s") from None


def _first_line(proc: subprocess.CompletedProcess) -> str:
    text = (proc.stderr or proc.stdout).strip()
    return text.splitlines()[-1] if text else f"exit {proc.returncode}"


def resolve_commit(repo: Path, ref: str) -> str:
    """The commit REF names (`git rev-parse --verify REF^{commit}`), or BaselineError."""
    if not ref or ref.startswith("-") or any(c.isspace() for c in ref):
        raise BaselineError(f"--baseline {ref!r}: not a git revision")
    proc = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if proc.returncode != 0 or not proc.stdout.strip():
        raise BaselineError(f"--baseline {ref}: unknown revision (git rev-parse --verify {ref}^{{commit}} failed)")
    return proc.stdout.strip()


def validate(repo: Path, ref: str | None, self_check: bool) -> BaselineSpec | None:
    """Check --baseline / --self-check before anything runs; None when neither was given."""
    if ref is None and not self_check:
        return None
    top = _git(repo, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise BaselineError(f"--baseline needs a git checkout: {repo} is not one ({_first_line(top)})")
    head = resolve_commit(repo, "HEAD")
    commit = resolve_commit(repo, ref if ref is not None else "HEAD")
    if self_check and commit != head:
        raise BaselineError(f"--self-check times HEAD ({head[:12]}) against itself, but --baseline {ref} is "
                            f"{commit[:12]}; give one or the other")
    if commit == head and not self_check:
        raise BaselineError(f"--baseline {ref} is {commit[:12]}, the commit being measured; an A/B of a commit "
                            "against itself needs --self-check")
    return BaselineSpec(ref=ref if ref is not None else "HEAD", commit=commit, head_commit=head,
                        self_check=self_check)


def create_worktree(repo: Path, commit: str, parent: Path | None = None) -> Path:
    """`git worktree add --detach` of commit into a new folder outside the repo's tree; BaselineError if not."""
    parent = Path(parent or os.environ.get("EVPACK_AB_DIR") or tempfile.gettempdir())
    try:
        parent.mkdir(parents=True, exist_ok=True)
        holder = Path(tempfile.mkdtemp(prefix=f"evpack-ab-{commit[:12]}-", dir=parent))
    except OSError as exc:
        raise BaselineError(f"cannot create a worktree folder under {parent}: {exc.strerror or exc}") from None
    path = holder / "src"
    proc = _git(repo, "worktree", "add", "--detach", str(path), commit, timeout=600)
    if proc.returncode != 0:
        shutil.rmtree(holder, ignore_errors=True)
        raise BaselineError(f"cannot create a git worktree of {commit[:12]} in {path}: {_first_line(proc)}")
    return path


def remove_worktree(repo: Path, path: Path) -> None:
    """Remove the worktree and its holder folder (never raises: cleanup)."""
    with contextlib.suppress(Exception):
        _git(repo, "worktree", "remove", "--force", str(path))
    shutil.rmtree(path.parent if path.parent.name.startswith("evpack-ab-") else path, ignore_errors=True)
    with contextlib.suppress(Exception):
        _git(repo, "worktree", "prune")


def device_arch() -> str | None:
    """SM version of GPU 0 from nvidia-smi (e.g. "90"), without creating a CUDA context; None if unknown."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        return None
    cap = lines[0].strip().replace(".", "")
    return cap if cap.isdigit() else None


def base_archs(head_archs: str | None, device: str | None) -> str:
    """The archs to build the base for: the device's entries of the head's list, else the head's list.

    nvcc compiles each -gencode on its own, so the device's SASS is the same whether or not the
    other archs are built; building one arch cuts the base build to about a third.
    """
    head = head_archs or DEFAULT_ARCHS
    if device:
        mine = [a for a in head.replace(",", ";").split(";")
                if a.strip().lower().removeprefix("sm_").rstrip("a") == device]
        if mine:
            return ";".join(a.strip() for a in mine)
    return head


@dataclass(frozen=True)
class BuildResult:
    returncode: int | None  # None: not started or timed out
    elapsed_s: float
    archs: str
    so_path: str | None
    so_sha256: str | None
    error: str  # one line, empty when the build produced the extension

    def to_json(self) -> dict:
        return asdict(self)


def build(worktree: Path, out_dir: Path, *, archs: str, timeout_s: int = BUILD_TIMEOUT_S,
          command: list[str] | None = None, nice: bool = False,
          cancel: threading.Event | None = None) -> BuildResult:
    """Build REF's extension in its worktree; log + result.json in out_dir. Never raises for a failed build.
    `nice`: at a low CPU priority; `cancel`: set, the build is stopped (an error result)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = command or [sys.executable, "setup.py", "build_ext", "--inplace"]
    nice_cmd = shutil.which("nice") if nice else None
    if nice_cmd:
        cmd = [nice_cmd, "-n", str(NICE), *cmd]
    env = dict(os.environ, EVPACK_CANARIES="0", EVPACK_CUDA_ARCHS=archs, PYTHONUNBUFFERED="1")
    env.pop("EVPACK_VARIANTS", None)  # the base builds every variant it registers
    t0 = time.monotonic()
    rc, error = None, ""
    with open(out_dir / LOG_FILE, "w", encoding="utf-8") as log:
        log.write(f"# {' '.join(cmd)}  (in {worktree})\n# EVPACK_CUDA_ARCHS={archs} EVPACK_NVCC_FLAGS="
                  f"{env.get('EVPACK_NVCC_FLAGS', '')} EVPACK_CANARIES=0\n")
        log.flush()
        refused = refusal(worktree)  # REF's tracked build outputs would be reused as built here (buildguard.py)
        if refused:
            log.write(f"{refused}\n")
            error = f"base {refused}"
        else:
            try:
                rc, error = _wait(subprocess.Popen(cmd, cwd=worktree, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                   start_new_session=True), timeout_s, cancel)
            except OSError as exc:
                error = f"base build could not start: {exc}"
    so = find_built(worktree) if rc == 0 else None
    if rc not in (0, None):
        error = f"base build exited {rc}: {_error_line(out_dir / LOG_FILE)}"
    elif rc == 0 and so is None:
        error = "base build exited 0 but no python/evpack/_C*.so was found"
    res = BuildResult(rc, round(time.monotonic() - t0, 2), archs, str(so) if so else None,
                      sha256_file(so) if so else None, error)
    write_text(out_dir / RESULT_FILE, json.dumps(res.to_json(), indent=2) + "\n")
    return res


def _wait(proc: subprocess.Popen, timeout_s: int, cancel: threading.Event | None) -> tuple[int | None, str]:
    """(returncode or None, error): the build's end, its time-out or its cancellation (its process group killed)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return proc.wait(timeout=0.5), ""
        except subprocess.TimeoutExpired:
            pass
        stop = f"timed out after {timeout_s} s" if time.monotonic() > deadline else \
            ("stopped: the run ended first" if cancel is not None and cancel.is_set() else "")
        if stop:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None, f"base build {stop}"


def _error_line(log: Path) -> str:
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    hit = next((ln for ln in lines if "error" in ln.lower() and not ln.startswith("#")), lines[-1] if lines else "")
    return " ".join(hit.split())[:200]


def _build_all(wt: Path, out_dir: Path, spec: BaselineSpec, progress, *, nice: bool = False,
               cancel: threading.Event | None = None) -> BuildResult:
    """Build for the GPU's archs (again for the plain ones when a base predates arch-specific targets), then
    write READY_FILE."""
    archs = base_archs(os.environ.get("EVPACK_CUDA_ARCHS"), device_arch())
    progress(f"baseline {spec.ref} ({spec.commit[:12]}): building in {wt} for sm {archs}"
             + (" (in the background, at low priority, beside the head's stages)" if nice else ""))
    res = build(wt, out_dir, archs=archs, nice=nice, cancel=cancel)
    plain = ";".join(a for a in archs.split(";") if not a.strip().endswith(("a", "f")))
    if res.error and plain and plain != archs and not (cancel is not None and cancel.is_set()):
        progress(f"baseline build for sm {archs} failed ({res.error}); again for sm {plain}")
        res = build(wt, out_dir, archs=plain, nice=nice, cancel=cancel)
    progress(f"baseline build: {'ok' if not res.error else res.error} ({res.elapsed_s:.1f} s)")
    write_text(out_dir / READY_FILE, json.dumps({"error": res.error}) + "\n")
    return res


def wait_ready(ready: str | None, timeout_s: float = WAIT_S, say=print) -> str:
    """Wait for a background base build to end (its `ready_file`; None: it was built before the run): '' or why
    the wait ended without it."""
    if not ready or Path(ready).is_file():
        return ""
    say("A/B: waiting for the base build (it runs beside the head's stages)")
    t0 = time.monotonic()
    while not Path(ready).is_file():
        if time.monotonic() - t0 > timeout_s:
            return f"the base build did not end within {timeout_s:.0f} s"
        time.sleep(0.5)
    say(f"A/B: the base build ended ({time.monotonic() - t0:.1f} s waited)")
    return ""


@contextlib.contextmanager
def prepared_baseline(repo: Path, spec: BaselineSpec, *, build_now: bool, progress=print,
                      background: bool = False) -> Iterator[dict]:
    """Create the worktree (BaselineError if it cannot be), build it when build_now (`background`: in a thread
    at low priority, while the body runs; the option's `ready_file` appears when it ended), yield the options
    entry the bench stage reads, and remove the worktree afterwards whatever happens (a build still running is
    stopped first)."""
    wt = create_worktree(repo, spec.commit)
    out_dir = wt.parent / "build-output"
    opt = {"ref": spec.ref, "commit": spec.commit, "head_commit": spec.head_commit,
           "self_check": spec.self_check, "worktree": str(wt), "build_output": str(out_dir)}
    cancel, worker = threading.Event(), None
    try:
        if build_now and background:
            opt["ready_file"] = str(out_dir / READY_FILE)
            worker = threading.Thread(target=_build_all, args=(wt, out_dir, spec, progress),
                                      kwargs={"nice": True, "cancel": cancel}, name="base-build", daemon=True)
            worker.start()
        elif build_now:
            _build_all(wt, out_dir, spec, progress)
        yield opt
    finally:
        if worker is not None:
            cancel.set()
            worker.join()
        remove_worktree(repo, wt)
