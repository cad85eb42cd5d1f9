"""The stage contract shared by every pack stage.

A stage module (python/evpack/stages/<name>.py) defines:

    NAME: str                 the folder inside the pack and the CLI command
    NEEDS_GPU: bool           GPU stages run in their own process with TIMEOUT_S
    TIMEOUT_S: int
    def run(ctx: StageContext) -> None
        Runs the tools and writes raw output + parsed files into ctx.dir only.
        May raise; the runner turns exceptions, crashes and timeouts into `error`.
    def derive(stage_dir: Path, pack_dir: Path) -> StageOutcome
        Pure: reads only files inside the pack and decides status/reason/data.
        `evidence` and `verify` both call it, so every result is re-derivable.
    def report_md(stage_dir: Path, outcome: StageOutcome) -> str   (optional)
        A markdown section for report.md (tables, quoted tool lines).
    def headline_md(stage_dir: Path, outcome: StageOutcome) -> str   (optional)
        A short markdown block shown right after the gate table (the bench leaderboard).
    def figures(stage_dir: Path) -> list[Path]   (optional)
        PNG files inside stage_dir to embed in report.html.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PASS, FAIL, ERROR, SKIPPED = "pass", "fail", "error", "skipped"
STATUSES = (PASS, FAIL, ERROR, SKIPPED)


@dataclass(frozen=True)
class StageOutcome:
    status: str
    reason: str  # one line
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if "\n" in self.reason:
            object.__setattr__(self, "reason", " ".join(self.reason.split()))

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "data": self.data}


@dataclass(frozen=True)
class StageContext:
    pack_dir: Path  # the pack folder (still the temporary one while the run is going)
    dir: Path  # pack_dir / NAME, created before run()
    repo: Path  # repository root
    options: dict[str, Any] = field(default_factory=dict)  # CLI options (suite, variants filter, ...)


def worst(statuses) -> str:
    """Combine cell statuses: error > fail > skipped > pass (an empty set is an error)."""
    statuses = list(statuses)
    if not statuses:
        return ERROR
    for s in (ERROR, FAIL, SKIPPED):
        if s in statuses:
            return s
    return PASS


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_json(path: Path, obj: Any) -> None:
    """Atomic JSON write (temp file + rename), sorted keys off so schemas keep their order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=True)
        f.write("\n")
    tmp.replace(path)


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
