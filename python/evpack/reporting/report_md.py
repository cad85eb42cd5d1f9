"""report.md: the full report, assembled from the pack's files and each stage's own section, as blocks.

Order: verdict and labels, the performance decision, the gate table, the stages' headlines (the
canonical-shape leaderboard), where and from what the pack was made, the stage table, then one section per
stage that ran, its plots in it. Tables longer than LONG_TABLE_ROWS rows are collapsed (blocks.Details:
a <details> block in report.md, the template's element in report.html).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..markdown import code, table, text
from ..records.pack import StageTiming, Timings
from ..stages.base import SKIPPED
from ..stages.order import stage_module
from . import bench_sections
from .blocks import LONG_TABLE_ROWS, Block, Figure, Md, figure_paths, section_blocks, to_markdown
from .common import MARKER, PackView, gate_table, headline, load_view, machine_line, signature_line, status_word
from .decision import decide
from .gpu_limits_md import limit_lines

__all__ = ["LONG_TABLE_ROWS", "VIEWS", "render_md", "report_blocks"]

# Stages whose report views (headline_md, report_md, figures) live in this package, not in the stage module:
# they draw on the timing code and the report blocks, and a stage module does not import the reporting layer.
VIEWS = {"bench": bench_sections}


def _views(stage: str):
    return VIEWS.get(stage) or stage_module(stage)


def _section(mod, hook: str, view: PackView, stage: str) -> str | Sequence[Block]:
    try:
        return getattr(mod, hook)(view.dir / stage, view.outcomes[stage])
    except Exception as exc:  # a broken section must not cost the whole report
        return f"(this section could not be rendered: {text(type(exc).__name__)}: {text(exc)})"


def _figures(mod, view: PackView, stage: str, placed: set[str]) -> list[Block]:
    """The stage's plots its section did not place itself: at the end of its section."""
    if not hasattr(mod, "figures") or not (view.dir / stage).is_dir():
        return []
    paths = [p for p in mod.figures(view.dir / stage) if p.is_file()]
    rels = [p.relative_to(view.dir).as_posix() for p in paths]
    return [Figure(r, r) for r in rels if r not in placed]


def _pack_facts(view: PackView) -> list[str]:
    pj, env, git = view.pack, view.env, view.pack.git
    lines = ["## Pack", "",
             f"- commit {code(git.commit)}{' (dirty)' if git.dirty else ''}; created {text(pj.created_utc)}",
             f"- {machine_line(env)}",
             *limit_lines(env, view.dir),
             "- toolchain: " + ", ".join(f"{text(k)} {text(v) if v else '-'}" for k, v in pj.toolchain.items()),
             f"- binary sha256: {code(pj.so_sha256 or '-')}"]
    signature = signature_line(pj)  # None for packs made before signed provenance: nothing claimed
    if signature:
        lines.append(signature)
    for w in pj.warnings or []:
        lines.append(f"- WARNING: {text(w)}")
    run = run_line(pj.timings)
    if run:
        lines.append(run)
    zd = pj.zero_delta
    if zd:
        lines.append(f"- zero-delta: {'same content as' if zd.same else 'differs from'} pack "
                     f"{code(zd.previous_pack)} of the same commit (timestamps excluded)")
    return lines


def _secs(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def run_line(timings) -> str | None:
    """'- run: 183 s wall (overlapped): build 0-48 s · sass 48-104 s · ...' (stages that ran, by start), or
    None for a pack made before timings.wall_s."""
    t = Timings.from_json(timings)
    if not isinstance(timings, dict) or not _secs(t.wall_s):
        return None
    stages = t.stages if isinstance(t.stages, dict) else {}
    spans = sorted((v.start_s, v.end_s, n) for n, v in ((n, StageTiming.from_json(v)) for n, v in stages.items())
                   if _secs(v.start_s) and _secs(v.end_s) and v.end_s - v.start_s >= 0.05)
    line = f"- run: {t.wall_s:.0f}\u00a0s wall"
    if t.mode in ("overlapped", "sequential"):
        line += f" ({t.mode})"
    if spans:
        line += ": " + " · ".join(f"{text(n)} {a:.0f}\u2013{b:.0f}\u00a0s" for a, b, n in spans)
    return line


def report_blocks(view: PackView) -> list[Block]:
    pj = view.pack
    perf = decide(view)
    out: list[Block] = [Md("\n".join([*headline(view), "", f"Performance: {perf.line}.", "",
                                      "## Gates", "", *gate_table(pj)]))]
    for s, outcome in view.outcomes.items():
        mod = _views(s)
        if hasattr(mod, "headline_md") and outcome.status != SKIPPED:
            out += section_blocks(_section(mod, "headline_md", view, s), title=s)
    out.append(Md("\n".join(_pack_facts(view))))
    rows = []
    for s, v in pj.stages.items():
        dur = v.duration_s
        rows.append([text(s), status_word(v.status), f"{dur:.1f}\u00a0s" if isinstance(dur, (int, float)) else "-",
                     text(v.reason)])
    out.append(Md("\n".join(["## Stages", "", *table(["stage", "status", "time", "reason"], rows)])))
    for s, outcome in view.outcomes.items():
        mod = _views(s)
        if outcome.status == SKIPPED or not hasattr(mod, "report_md"):
            continue
        section = section_blocks(_section(mod, "report_md", view, s), title=s)
        if section:
            out += [Md(f"## {text(s)}"), *section, *_figures(mod, view, s, figure_paths(section))]
    command = f"python -m evpack verify {pj.pack_id}"
    out.append(Md(f"Every result above is re-derivable: {code(command)}."))
    return out


def render_md(pack_dir: Path, view: PackView | None = None, blocks: Sequence[Block] | None = None) -> str:
    """report.md: the sticky-comment marker, then the blocks (report_blocks of the pack unless given)."""
    return f"{MARKER}\n{to_markdown(blocks if blocks is not None else report_blocks(view or load_view(pack_dir)))}\n"
