"""A cell's record in a stage's procs.json (written by stages/procs.run_jobs) as a typed, read-only view
(records/required.py): the command, how the process ended and how long it ran. The fields a verdict needs are
required; a record that is not an object is refused (TypeError), as reading it as one was.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .required import Strict


@dataclass(frozen=True, eq=False, repr=False)
class ProcRun(Strict):
    """One cell's process: its command, return code, wall time and whether it timed out."""

    required = frozenset({"returncode", "duration_s", "timed_out"})
    cmd: Any = None
    returncode: Any = None
    duration_s: Any = None
    timed_out: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, value: Any) -> ProcRun:
        if not isinstance(value, Mapping):
            raise TypeError(f"a procs.json record that is not an object ({type(value).__name__})")
        return cls.from_json(value)

    @property
    def command(self) -> Any:
        """The command (none recorded: empty)."""
        return self.cmd if self.has("cmd") else ()
