"""Git commit and dirty flag of the checkout (None + an error string when git is unavailable)."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class GitInfo:
    commit: str | None
    dirty: bool | None
    error: str | None

    @property
    def short(self) -> str:
        return (self.commit or "nogit")[:12]


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        msg = (out.stderr or out.stdout).strip()
        raise RuntimeError(msg.splitlines()[0] if msg else f"git {' '.join(args)} exited {out.returncode}")
    return out.stdout


def git_info(repo: Path) -> GitInfo:
    try:
        commit = _git(repo, "rev-parse", "HEAD").strip()
        # Packs and build outputs are ignored, so they never make the tree dirty.
        dirty = bool(_git(repo, "status", "--porcelain", "--untracked-files=normal").strip())
        return GitInfo(commit, dirty, None)
    except FileNotFoundError:
        return GitInfo(None, None, "git not found on PATH")
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
        return GitInfo(None, None, f"git failed: {exc}")
