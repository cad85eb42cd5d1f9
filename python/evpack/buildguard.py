"""No build output comes from the checkout.

The build reuses what it finds in place when its inputs did not change: ninja's objects under build/,
Triton's kept cubins under build/triton/ (their inputs.json hashes match), the generated sources, the
extension that `build_ext --inplace` copies into python/evpack/. A commit that carries such files
(force-added past .gitignore, or with build/ taken out of .gitignore in the same commit) would have the
build link code it never compiled, and the pack would say "built from this source" of it; every gate
still checks the binary that runs, but that one claim would be false. So a build in a git checkout
refuses to start while git tracks a build output: any file under build/, or a compiled object or shared
library (*.o, *.so, *.cubin, *.fatbin) anywhere in the tree (a pack's kept PTXAS logs are evidence, not
build outputs: only those under build/ count). The list is fixed here, never
read from .gitignore, which the same commit could change.

A tree without .git (a source archive) tracks nothing: nothing to check. A checkout whose tracked files
cannot be listed (git missing, or refusing the folder) is refused: the check cannot be made.

Pure standard library: setup.py loads this file by path (no package import, no torch).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

# git pathspecs, relative to the repository root: the build folder, and compiled outputs anywhere
OUTPUT_PATHSPECS = ("build", ":(glob)**/*.o", ":(glob)**/*.so", ":(glob)**/*.cubin", ":(glob)**/*.fatbin")


class GuardError(Exception):
    """The tracked files of a checkout could not be listed."""


def tracked_outputs(repo: Path) -> list[str]:
    """The build outputs git tracks in repo ([] outside a git checkout); GuardError if git cannot say."""
    repo = Path(repo)
    if not (repo / ".git").exists():  # a folder in a checkout, a file in a worktree
        return []
    git = shutil.which("git")
    if git is None:
        raise GuardError("git is not on PATH, so the tracked files of this checkout cannot be listed")
    try:
        proc = subprocess.run([git, "-C", str(repo), "ls-files", "-z", "--", *OUTPUT_PATHSPECS],
                              capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GuardError(f"git ls-files could not be run: {exc}") from None
    if proc.returncode != 0:
        first = (proc.stderr.decode(errors="replace").strip().splitlines() or [f"exit {proc.returncode}"])[0]
        raise GuardError(f"git ls-files failed: {first}")
    return sorted(p for p in proc.stdout.decode(errors="replace").split("\0") if p)


def refusal(repo: Path) -> str | None:
    """One line saying why this checkout must not be built, or None."""
    try:
        files = tracked_outputs(repo)
    except GuardError as exc:
        return f"build refused: cannot check that no build output is tracked by git: {exc}"
    if not files:
        return None
    shown = ", ".join(repr(f) for f in files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    return (f"build refused: git tracks {len(files)} build output(s) ({shown}); the build would reuse them as "
            "if compiled here: take them out of the commit (git rm --cached)")
