"""Reports: views of a pack, rendered from the pack's files only and covered by its index.json.

  common.py          what every report shows: pack facts, stage outcomes, the gate table, table helpers
  report_md.py       report.md, the full report (verdict, gates, canonical leaderboard first)
  report_html.py     report.html: report.md through markdown-it-py into a jinja2 template, plots embedded
  comment_md.py      comment.md: the short PR comment (at most COMMENT_MAX_CHARS characters)
  bench_sections.py  the benchmark sections (leaderboard, per shape, kernels, against the previous pack)
  write.py           write_reports(): all three files into a folder

Only report_html.py needs the third-party renderer (markdown-it-py, jinja2), and it imports
it at call time: `verify` never imports this package's renderer.
"""
from __future__ import annotations

# The renderer is part of the pack: these exact versions are pinned in pyproject.toml
# (tests/test_report_render.py checks that both places agree).
RENDERER_PINS = {"markdown-it-py": "4.3.0", "mdurl": "0.1.2", "jinja2": "3.1.6", "MarkupSafe": "3.0.3"}


def missing_renderer() -> str | None:
    """Why report.html cannot be rendered here (a renderer module is not importable), or None.

    Checked before a run spends time on stages: the reports are written last.
    """
    from importlib.util import find_spec

    missing = [dist for dist, module in (("markdown-it-py", "markdown_it"), ("jinja2", "jinja2"))
               if find_spec(module) is None]
    if not missing:
        return None
    return ("the report renderer is not importable: " + ", ".join(missing) + " missing; install "
            + " ".join(f"{d}=={RENDERER_PINS[d]}" for d in missing) + " (pure-Python wheels)")
