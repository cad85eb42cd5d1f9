"""Reports: views of a pack, rendered from the pack's files only and covered by its index.json. Every pack
value enters Markdown through evpack.markdown (text(), code(), fence() escape it); the reports of a merged
verdict are evpack.merge.report.

  blocks.py          a report as blocks (Markdown runs, collapsed parts, figures); report.md from them
  common.py          what every report shows: pack facts, stage outcomes, the gate table
  decision.py        the performance decision (A/B against the base, else the previous pack)
  report_md.py       the full report's blocks (verdict, decision, gates, canonical leaderboard first)
  report_html.py     report.html: the blocks in a jinja2 template, the Markdown through markdown-it-py with
                     raw HTML, links and images off, plots embedded
  comment_md.py      comment.md: the PR comment, decision first (at most COMMENT_MAX_CHARS characters)
  bench_sections.py  the benchmark sections (leaderboard, per shape and its plots, kernels, previous pack)
  ab_section.py      the same-run A/B against the base
  write.py           write_reports(): all three files into a folder

Pack values are data: escaped wherever they enter Markdown, never HTML, a link or an image. Only
report_html.py needs the third-party renderer (markdown-it-py, jinja2), and it imports it at call
time: `verify` never imports this package's renderer.
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

    missing = [(dist, module) for dist, module in (("markdown-it-py", "markdown_it"), ("jinja2", "jinja2"))
               if find_spec(module) is None]
    if not missing:
        return None
    return ("the report renderer is not importable: " + ", ".join(f"{d} (module '{m}')" for d, m in missing)
            + " missing; install " + " ".join(f"{d}=={RENDERER_PINS[d]}" for d, _ in missing)
            + " (pure-Python wheels)")
