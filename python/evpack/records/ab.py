"""What the A/B part of the bench stage (timing/ab_stage.py) reads before it writes ab.json, as read-only views
(records/view.py): the run's `baseline` option (timing/baseline_build.prepared_baseline) and the base build's
result.json (baseline_build.BuildResult, read back from the pack's copy). ab.json itself: records/bench.py."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .view import View


@dataclass(frozen=True)
class BaselineOption(View):
    """The run's baseline option: the base's ref and commit, the head's commit and where the base was built."""

    ref: Any = None
    commit: Any = None
    head_commit: Any = None
    self_check: Any = None
    worktree: Any = None
    build_output: Any = None
    ready_file: Any = None  # a base built in the background: this file appears when the build ended
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class BaseBuild(View):
    """The base build's result.json."""

    returncode: Any = None
    elapsed_s: Any = None
    archs: Any = None
    so_path: Any = None
    so_sha256: Any = None
    error: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    def record(self) -> dict:
        """ab.json's base_build: the build's outcome without the paths."""
        return {"returncode": self.returncode, "elapsed_s": self.elapsed_s, "archs": self.archs, "error": self.error}
