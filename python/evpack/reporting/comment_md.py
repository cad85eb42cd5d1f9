"""comment.md: what a reviewer reads on the pull request, at most COMMENT_MAX_CHARS characters.

It starts with the decision: the label and the performance verdict against the base ("no regression
against <base>: N SAME, M UNSURE, 0 SLOWER", or the SLOWER rows named), then the UNSURE rows by name and
the link to the report (in CI: the run that holds the pack, from GitHub Actions' variables, checked; outside
CI: report.html beside this file in the pack). Then what failed, the gate table, the canonical-shape
leaderboard (top rows) and what was skipped. Every list is bounded, so the comment stays under the limit
whatever the pack holds; report.md and report.html in the pack hold everything. Every pack value is
escaped (evpack.markdown): no link, image or HTML comes from a pack.
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from ..markdown import code, short, text
from ..records.pack import Timings
from ..stages.base import ERROR, FAIL, SKIPPED
from .bench_sections import canonical_leaderboard
from .common import ICON, LABEL_MARK, MARKER, PackView, gate_table, labels_line, load_view, machine_line
from .decision import PerfDecision, decide, ratio_text, row_name

COMMENT_MAX_CHARS = 10_000
LEADERBOARD_ROWS = 8
REASON_CHARS = 300
MAX_LIST = 10
_HOST = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}"
                   r"[A-Za-z0-9])?)*$")
_REPOSITORY = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/(?!\.{1,2}$)[A-Za-z0-9._-]{1,100}$")
_COMMIT = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


def server_url(value: str) -> str | None:
    """GITHUB_SERVER_URL as https://host[:port], or None when it is anything else (a path, user info, a query)."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname or ""
    if (parts.scheme != "https" or not _HOST.match(host) or parts.username is not None or parts.password is not None
            or parts.path not in ("", "/") or parts.query or parts.fragment or "@" in parts.netloc):
        return None
    return f"https://{host.lower()}" + (f":{port}" if port not in (None, 443) else "")


def ci_links(environ: Mapping[str, str]) -> dict[str, str]:
    """{'run', 'artifacts', 'repo'} URLs from GitHub Actions variables, each checked ({} outside CI or when
    one does not check: an https server, owner/name, a numeric run id)."""
    server = server_url(environ.get("GITHUB_SERVER_URL", ""))
    repo, run = environ.get("GITHUB_REPOSITORY", "").strip(), environ.get("GITHUB_RUN_ID", "").strip()
    if not (server and _REPOSITORY.match(repo) and run.isascii() and run.isdigit()):
        return {}
    base = f"{server}/{repo}"
    attempt = environ.get("GITHUB_RUN_ATTEMPT", "").strip()
    run_url = f"{base}/actions/runs/{run}" + (
        f"/attempts/{attempt}" if attempt.isascii() and attempt.isdigit() and attempt != "1" else "")
    return {"run": run_url, "artifacts": f"{base}/actions/runs/{run}#artifacts", "repo": base}


def _decision(view: PackView, perf: PerfDecision) -> list[str]:
    """The heading (label and performance verdict), the rows it rests on by name, and how it was timed."""
    mark = LABEL_MARK.get(view.label, "")
    lines = [f"# {mark + ' ' if mark else ''}**{text(view.label)}** · {perf.line}", ""]
    if perf.notes:
        notes = text(short("; ".join(perf.notes), REASON_CHARS))
        lines += [f"{notes[:1].upper()}{notes[1:]}.", ""]
    for what, rows in (("SLOWER", perf.slower), ("UNSURE", perf.unsure)):
        if not rows:
            continue
        why = " (the A/B could not tell: its CI crosses the band of SAME, or too few samples)" if what == "UNSURE" else ""
        lines += [f"**{what}** ({len(rows)}){why}:", ""]
        lines += [f"- {row_name(e)}" + (f": {ratio_text(e)}" if "ratio" in e.raw else "") for e in rows[:MAX_LIST]]
        if len(rows) > MAX_LIST:
            lines.append(f"- … and {len(rows) - MAX_LIST} more (report.md lists them)")
        lines.append("")
    return lines


def _facts(view: PackView, links: dict[str, str]) -> list[str]:
    git, pj = view.pack.git, view.pack
    commit = str(git.commit)
    shown = f"{code(commit[:12])}{' (dirty)' if git.dirty else ''}"
    if links and not git.dirty and _COMMIT.match(commit):
        shown = f"[{shown}]({links['repo']}/commit/{commit})"
    if links:
        report = (f"Report: `report.html` in the pack {code(view.pack_id)}, an artifact of "
                  f"[CI run {links['run'].rsplit('/runs/', 1)[1]}]({links['run']}) ([artifacts]({links['artifacts']}))")
    else:
        report = f"Report: [report.html](report.html) in the pack {code(view.pack_id)} (beside this file)"
    timings = Timings.from_json(pj.timings)
    total = timings.wall_s if timings.holds("wall_s") else timings.total_s  # wall_s: start to pack (schema 3 on)
    line = f"Commit {shown} · {machine_line(view.env)} · created {text(pj.created_utc)}"
    if isinstance(total, (int, float)):
        line += f" in {total:.0f} s"
    out = [report, "", labels_line(pj), "", line]
    for w in (pj.warnings or [])[:3]:
        out += ["", f"**Warning:** {text(short(w, REASON_CHARS))}"]
    return out


def _skipped(view: PackView) -> list[str]:
    groups: dict[str, list[str]] = {}
    for s, out in view.outcomes.items():
        if out.status == SKIPPED:
            groups.setdefault(out.reason, []).append(s)
    lines = [f"- {', '.join(text(s) for s in stages)}: {text(short(reason, REASON_CHARS))}"
             for reason, stages in groups.items()]
    lines = lines[:MAX_LIST]
    gates = [g for g, v in view.pack.gates.items() if v.status == SKIPPED]
    if gates:
        lines.append(f"- gates not run (never a pass): {', '.join(text(g) for g in gates)}")
    bench = view.outcomes.get("bench")
    if bench is not None and bench.status != SKIPPED:
        d = bench.data
        parts = [f"{text(d[f'rows_{k}'])} {k}" for k in ("skipped", "unsupported", "error") if d.get(f"rows_{k}")]
        if parts:
            lines.append(f"- benchmark rows not timed: {', '.join(parts)} of {text(d.get('rows'))} "
                         "(report.md lists them)")
    return lines or ["Nothing was skipped: every stage ran."]


def _problems(view: PackView) -> list[str]:
    bad = [(s, o) for s, o in view.outcomes.items() if o.status in (FAIL, ERROR)]
    return [f"- **{text(s)}** {ICON[o.status]}: {text(short(o.reason, REASON_CHARS))}" for s, o in bad[:MAX_LIST]]


def render_comment(pack_dir: Path, view: PackView | None = None, environ: Mapping[str, str] | None = None) -> str:
    view = view or load_view(pack_dir)
    links = ci_links(os.environ if environ is None else environ)
    lines = [MARKER, *_decision(view, decide(view)), *_facts(view, links)]
    problems = _problems(view)
    if problems:
        lines += ["", "## What failed", "", *problems]
    lines += ["", "## Gates", "", *gate_table(view.pack, reason_limit=REASON_CHARS)]
    bench = view.outcomes.get("bench")
    if bench is not None and bench.status in ("pass", "fail"):
        board = canonical_leaderboard(pack_dir / "bench", max_rows=LEADERBOARD_ROWS)
        if board:
            lines += ["", *board]
    lines += ["", "## Skipped", "", *_skipped(view)]
    command = f"python -m evpack verify {view.pack_id}"
    lines += ["", f"Check it offline: {code(command)}.", ""]
    return fit(lines)


def fit(lines: list[str], limit: int = COMMENT_MAX_CHARS) -> str:
    """Join lines; when over the limit, cut at a line boundary and say so (the lists above are bounded,
    so this only fires on packs with pathological reasons)."""
    text_ = "\n".join(lines)
    if len(text_) <= limit:
        return text_
    note = "\n\n*(cut at the comment limit: report.md in the pack has everything)*\n"
    head = text_[: limit - len(note)]
    return head[: head.rfind("\n")] + note
