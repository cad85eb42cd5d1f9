"""The sanitize stage's records: a (tool, variant, config) cell as derive() writes it under outcome.json's data,
the same cell and the stage's data as read-only views of a pack (records/view.py: report_md), and the stage's
run.json (how many cells ran at a time, the documented tool limits).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .view import View


@dataclass(frozen=True)
class SanitizeCell:
    """One cell as derive() writes it: who ran, how the process ended, the parsed summary (parsers/sanitizer
    SanitizerResult.to_json() less its tool), and the cell's status and reason."""

    tool: str
    variant: str
    config: str
    returncode: Any
    duration_s: Any
    summary: dict[str, Any]
    status: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"tool": self.tool, "variant": self.variant, "config": self.config, "returncode": self.returncode,
                "duration_s": self.duration_s, **self.summary, "status": self.status, "reason": self.reason}


@dataclass(frozen=True)
class CellView(View):
    """A cell as a pack holds it."""

    tool: Any = None
    variant: Any = None
    config: Any = None
    returncode: Any = None
    duration_s: Any = None
    errors: Any = None
    hazards: Any = None
    status: Any = None
    reason: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class SanitizeData(View):
    """sanitize/outcome.json's data: the cells, the canaries and the cells' total process time."""

    cells: tuple[CellView, ...] = ()
    canaries: Any = None
    cell_seconds_total: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class SanitizeRun(View):
    """sanitize/run.json: cells at a time, the GPUs, a cell's time limit, the environment, and per tool.variant the
    options that work around a documented limit of the tool."""

    parallel: Any = None
    gpus: Any = None
    cell_timeout_s: Any = None
    env: Any = None
    tool_limits: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)
