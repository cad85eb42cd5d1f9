"""report.md: the full report, assembled from the pack's files and each stage's own section.

Order: verdict and labels, the gate table, the stages' headlines (the canonical-shape leaderboard),
where and from what the pack was made, the stage table, then one section per stage that ran.
Tables longer than LONG_TABLE_ROWS rows are collapsed in <details> (GitHub and report.html both
render it), so the page stays readable around the PTXAS, SASS and per-shape tables.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..provenance import report_line
from ..stages.base import SKIPPED
from ..stages.order import stage_module
from .common import ICON, MARKER, PackView, cell, gate_table, headline, load_view, machine_line, table

LONG_TABLE_ROWS = 16


def _section(mod, hook: str, view: PackView, stage: str) -> str:
    try:
        return getattr(mod, hook)(view.dir / stage, view.outcomes[stage]).strip()
    except Exception as exc:  # a broken section must not cost the whole report
        return f"(this section could not be rendered: {type(exc).__name__}: {exc})"


def collapse_long_tables(md: str, title: str = "table", min_rows: int = LONG_TABLE_ROWS) -> str:
    """Wrap every table of more than min_rows body rows in <details>, unless it already is in one.

    The summary names the table by the nearest heading above it (else `title`) and its row count. Fenced code is
    left alone (a SASS line may start with '|'). A blank line separates the HTML from the table, as
    CommonMark needs to parse the table inside.
    """
    out: list[str] = []
    lines = md.split("\n")
    heading, depth, fenced, i = title, 0, False, 0
    while i < len(lines):
        ln = lines[i]
        if ln.startswith("```"):
            fenced = not fenced
        if fenced or not ln.startswith("|"):
            if not fenced:
                m = re.match(r"#{1,6} (.*)", ln)
                heading = m.group(1).strip() if m else heading
                depth += ln.count("<details") - ln.count("</details>")
            out.append(ln)
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].startswith("|"):
            j += 1
        block, body_rows = lines[i:j], j - i - 2
        if depth == 0 and body_rows > min_rows:
            name = re.sub(r"[`*]", "", heading) or title
            out += [f"<details><summary>{name} (table of {body_rows} rows)</summary>", "", *block, "", "</details>"]
        else:
            out += block
        i = j
    return "\n".join(out)


def render_md(pack_dir: Path, view: PackView | None = None) -> str:
    view = view or load_view(pack_dir)
    pj, env, git = view.pack, view.env, view.pack["git"]
    lines = [MARKER, *headline(view), "", "## Gates", "", *gate_table(pj)]
    for s, out in view.outcomes.items():
        mod = stage_module(s)
        if hasattr(mod, "headline_md") and out.status != SKIPPED:
            block = _section(mod, "headline_md", view, s)
            if block:
                lines += ["", block]
    lines += ["", "## Pack", "",
              f"- commit `{git['commit']}`{' (dirty)' if git['dirty'] else ''}; created {pj['created_utc']}",
              f"- {machine_line(env)}",
              "- toolchain: " + ", ".join(f"{k} {v or '-'}" for k, v in pj["toolchain"].items()),
              f"- binary sha256: `{pj.get('so_sha256') or '-'}`"]
    signature = report_line(pj)  # None for packs made before signed provenance: nothing claimed
    if signature:
        lines.append(signature)
    for w in pj.get("warnings", []):
        lines.append(f"- WARNING: {w}")
    zd = pj.get("zero_delta")
    if zd:
        lines.append(f"- zero-delta: {'same content as' if zd['same'] else 'differs from'} pack "
                     f"`{zd['previous_pack']}` of the same commit (timestamps excluded)")
    lines += ["", "## Stages", ""]
    rows = []
    for s, v in pj["stages"].items():
        dur = v.get("duration_s")
        rows.append([s, ICON[v["status"]], "-" if dur is None else f"{dur:.1f} s", cell(v["reason"])])
    lines += table(["stage", "status", "time", "reason"], rows)
    for s, out in view.outcomes.items():
        mod = stage_module(s)
        if out.status == SKIPPED or not hasattr(mod, "report_md"):
            continue
        section = _section(mod, "report_md", view, s)
        if section:
            lines += ["", f"## {s}", "", collapse_long_tables(section, title=s)]
    lines += ["", f"Every result above is re-derivable: `python -m evpack verify {pj['pack_id']}`.", ""]
    return "\n".join(lines)
