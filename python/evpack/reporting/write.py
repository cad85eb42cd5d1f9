"""Write the three reports of a pack into a folder (the pack itself while it is assembled, or --out)."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..stages.base import write_text
from .comment_md import render_comment
from .common import load_view
from .report_md import render_md, report_blocks

REPORT_FILES = ("report.md", "report.html", "comment.md")


@dataclass(frozen=True)
class ReportFiles:
    md: Path
    html: Path
    comment: Path

    def all(self) -> tuple[Path, Path, Path]:
        return (self.md, self.html, self.comment)


def write_reports(pack_dir: Path, out_dir: Path | None = None, environ: Mapping[str, str] | None = None,
                  outcomes: dict | None = None) -> ReportFiles:
    """report.md, report.html and comment.md of pack_dir into out_dir (default: the pack folder).

    The pack is read once; report.md and report.html are two views of the same blocks. environ (default
    os.environ) gives the CI links of comment.md; outcomes (default: the pack's outcome.json files) the stage
    outcomes to show (reporting.common.load_view).
    """
    from .report_html import render_html  # the only module that needs markdown-it-py and jinja2

    out_dir = out_dir or pack_dir
    view = load_view(pack_dir, outcomes)
    blocks = report_blocks(view)
    files = ReportFiles(out_dir / REPORT_FILES[0], out_dir / REPORT_FILES[1], out_dir / REPORT_FILES[2])
    write_text(files.md, render_md(pack_dir, view, blocks))
    write_text(files.html, render_html(pack_dir, blocks))
    write_text(files.comment, render_comment(pack_dir, view, os.environ if environ is None else environ))
    return files


def write_reports_into(pack_dir: Path, out_dir: Path, outcomes: dict | None = None) -> ReportFiles:
    """write_reports into a folder outside the pack, all three files or none: they are rendered into a
    hidden folder inside out_dir, then renamed into place with SIGINT/SIGTERM held back, so an interrupt
    or an error leaves the previous set (or nothing) and no partial one."""
    staging = Path(tempfile.mkdtemp(prefix=".reports-", dir=out_dir))
    try:
        staged = write_reports(pack_dir, staging, outcomes=outcomes)
        files = ReportFiles(*(out_dir / p.name for p in staged.all()))
        with _interrupts_held():
            for src, dst in zip(staged.all(), files.all(), strict=True):
                os.replace(src, dst)
        return files
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block is done (main thread; elsewhere the block runs as is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
