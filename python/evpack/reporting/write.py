"""Write the three reports of a pack into a folder (the pack itself while it is assembled, or --out)."""
from __future__ import annotations

import os
from collections.abc import Mapping
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
