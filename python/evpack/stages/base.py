"""The stage contract shared by every pack stage.

A stage module (python/evpack/stages/<name>.py) defines:

    NAME: str                 the folder inside the pack and the CLI command
    NEEDS_GPU: bool           GPU stages run in their own process with TIMEOUT_S
    TIMEOUT_S: int
    REQUIRED_FILES: tuple     raw files (globs, relative to the stage folder) a stage that ran must
                              hold; `verify` requires them (optional, default none)
    def required_files(stage_dir: Path) -> tuple   (optional)
        The same, where the layout decides (bench: every shard's folder); `verify` prefers it.
    def run(ctx: StageContext) -> None
        Runs the tools and writes raw output + parsed files into ctx.dir only.
        May raise; the runner turns exceptions, crashes and timeouts into `error`.
    def derive(stage_dir: Path, pack_dir: Path) -> StageOutcome
        Pure: reads only files inside the pack and decides status/reason/data.
        `evidence` and `verify` both call it, so every result is re-derivable.
    def facts(outcome: StageOutcome, facts: PackFacts) -> PackFacts   (optional)
        What this stage tells the pack as a whole (binary digest, regression, speedup).
    def report_md(stage_dir: Path, outcome: StageOutcome) -> str   (optional)
        A markdown section for report.md (tables, quoted tool lines).
    def headline_md(stage_dir: Path, outcome: StageOutcome) -> str   (optional)
        A short markdown block shown right after the gate table (the bench leaderboard).
    def figures(stage_dir: Path) -> list[Path]   (optional)
        PNG files inside stage_dir to embed in report.html.
    def headline(outcome: StageOutcome) -> dict   (optional)
        Headline numbers for a merged verdict (name -> text or number), one column per GPU.

The records themselves (StageOutcome, statuses) live in evpack.model; JSON I/O in evpack.jsonio.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..jsonio import read_json, write_json, write_text
from ..model import ERROR, FAIL, PASS, SKIPPED, STATUSES, StageOutcome, worst

log = logging.getLogger("evpack.stages")

__all__ = ["ERROR", "FAIL", "PASS", "SKIPPED", "STATUSES", "StageContext", "StageOutcome", "read_json", "worst",
           "write_json", "write_text", "progress", "other_outcome"]


@dataclass(frozen=True)
class StageContext:
    pack_dir: Path  # the pack folder (still the temporary one while the run is going)
    dir: Path  # pack_dir / NAME, created before run()
    repo: Path  # repository root
    options: dict[str, Any] = field(default_factory=dict)  # CLI options (suite, variants filter, ...)
    # the scheduler's shared GPU slots (procs.SlotPool folder, outside the pack); None outside a scheduled run.
    # How cells were placed, never what they check: it is not an option and not in the pack.
    slots: Path | None = None


OUTCOME_READERS: list = []  # [derivation.final_outcome], registered when evpack.derivation is imported


def other_outcome(name: str, pack_dir: Path) -> StageOutcome:
    """The final outcome of another stage of the pack, for a derive() that reads other stages
    (DERIVE_READS_STAGES). It is derivation.final_outcome, which registers itself here: the stages sit below
    the derivation layer and do not import it."""
    if not OUTCOME_READERS:
        raise RuntimeError("no stage outcome reader: import evpack.derivation before deriving this stage")
    return OUTCOME_READERS[-1](name, pack_dir)


def progress(message: str) -> None:
    """One progress line of a running stage (the CLI shows these on the terminal)."""
    log.info("  %s", message)
