"""comment.md: what a reviewer reads on the pull request, at most COMMENT_MAX_CHARS characters.

Verdict and labels first, then the gate table, the canonical-shape leaderboard (top rows), the
regressions against the benchmark baseline, what was skipped and why, and links to the CI run and
its pack artifact when GitHub Actions variables say where the pack was made. Every list is bounded,
so the comment stays under the limit whatever the pack holds; report.md and report.html in the pack
hold everything.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ..stages.base import ERROR, FAIL, SKIPPED
from .bench_sections import canonical_leaderboard
from .common import ICON, MARKER, PackView, gate_table, headline, load_view, machine_line

COMMENT_MAX_CHARS = 10_000
LEADERBOARD_ROWS = 8
REASON_CHARS = 300
MAX_LIST = 10


def ci_links(environ: Mapping[str, str]) -> dict[str, str]:
    """{'run': url, 'artifacts': url, 'commit_base': url} from GitHub Actions variables ({} outside CI)."""
    server, repo, run = (environ.get(k, "").strip() for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY",
                                                              "GITHUB_RUN_ID"))
    if not (server and repo and run.isdigit()):
        return {}
    base = f"{server.rstrip('/')}/{repo}"
    attempt = environ.get("GITHUB_RUN_ATTEMPT", "").strip()
    run_url = f"{base}/actions/runs/{run}" + (f"/attempts/{attempt}" if attempt.isdigit() and attempt != "1" else "")
    return {"run": run_url, "artifacts": f"{base}/actions/runs/{run}#artifacts", "repo": base}


def _short(text: str, limit: int) -> str:
    t = " ".join(str(text).split())
    return t if len(t) <= limit else t[: limit - 1].rstrip() + "…"


def _facts(view: PackView, links: dict[str, str]) -> list[str]:
    git, pj = view.pack["git"], view.pack
    commit = f"`{git['commit'][:12]}`{' (dirty)' if git['dirty'] else ''}"
    if links and not git["dirty"]:
        commit = f"[{commit}]({links['repo']}/commit/{git['commit']})"
    total = (pj.get("timings") or {}).get("total_s")
    line = f"Commit {commit} · {machine_line(view.env)} · created {pj['created_utc']}"
    if total is not None:
        line += f" in {total:.0f} s"
    out = [line]
    if links:
        out.append(f"CI run: [{links['run']}]({links['run']}) · the whole pack: artifact of "
                   f"[this run]({links['artifacts']}) (`{view.pack_id}`)")
    for w in pj.get("warnings", [])[:3]:
        out.append(f"**Warning:** {_short(w, REASON_CHARS)}")
    return out


def _regressions(view: PackView) -> list[str]:
    bench = view.outcomes.get("bench")
    if bench is None or bench.status == SKIPPED:
        return ["No benchmark in this pack" + (f" ({_short(bench.reason, REASON_CHARS)})." if bench else ".")]
    if bench.status == ERROR:
        return [f"The benchmark could not be judged: {_short(bench.reason, REASON_CHARS)}"]
    data = bench.data
    ab_lines = _ab(view)
    if ab_lines:  # the same-run A/B against the base decides perf-regression: it comes first
        return ab_lines
    regs, counts = data.get("regressions"), data.get("compare_counts")
    if regs is None:
        return ["No baseline to compare with: this pack holds no earlier benchmark (`--previous-pack`)."]
    against = f"pack `{data.get('previous_pack_id') or '?'}`"
    tally = ", ".join(f"{n} {k}" for k, n in (counts or {}).items() if n)
    tally = f"all rows, SDPA's included: {tally}" if tally else "no rows compared"
    if not regs:
        return [f"No row of ours is slower than {against} beyond its measured noise ({tally})."]
    lines = [f"**{len(regs)} rows of ours are SLOWER** than {against} beyond the measured noise ({tally}):", ""]
    lines += [f"- `{_short(k, 160)}`" for k in regs[:MAX_LIST]]
    if len(regs) > MAX_LIST:
        lines.append(f"- … and {len(regs) - MAX_LIST} more (report.md in the pack lists them)")
    return lines


def _ab(view: PackView) -> list[str]:
    """The A/B against the base commit (bench/ab.json): its tally and the rows of ours that are SLOWER."""
    from ..timing import ab
    from ..timing.ab_stage import load

    try:
        data = load(view.dir / "bench")
        if data is None:
            return []
        lines = [f"{ab.summary_line(data)} (same run, same GPU; rule in report.md)."]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"bench/ab.json could not be read: {exc}"]
    slower = [e for e in data.get("rows") or [] if e.get("verdict") == "SLOWER"]
    if slower:
        lines += ["", f"**{len(slower)} rows of ours are SLOWER than the base:**", ""]
        lines += [f"- `{_short(e['key'], 160)}`: ratio {e.get('ratio', float('nan')):.3f}" for e in slower[:MAX_LIST]]
        if len(slower) > MAX_LIST:
            lines.append(f"- … and {len(slower) - MAX_LIST} more (report.md lists them)")
    return lines


def _skipped(view: PackView) -> list[str]:
    groups: dict[str, list[str]] = {}
    for s, out in view.outcomes.items():
        if out.status == SKIPPED:
            groups.setdefault(out.reason, []).append(s)
    lines = [f"- {', '.join(stages)}: {_short(reason, REASON_CHARS)}" for reason, stages in groups.items()]
    lines = lines[:MAX_LIST]
    gates = [g for g, v in view.pack["gates"].items() if v["status"] == SKIPPED]
    if gates:
        lines.append(f"- gates not run (never a pass): {', '.join(gates)}")
    bench = view.outcomes.get("bench")
    if bench is not None and bench.status != SKIPPED:
        d = bench.data
        parts = [f"{d[f'rows_{k}']} {k}" for k in ("skipped", "unsupported", "error") if d.get(f"rows_{k}")]
        if parts:
            lines.append(f"- benchmark rows not timed: {', '.join(parts)} of {d.get('rows')} (report.md lists them)")
    return lines or ["Nothing was skipped: every stage ran."]


def _problems(view: PackView) -> list[str]:
    bad = [(s, o) for s, o in view.outcomes.items() if o.status in (FAIL, ERROR)]
    return [f"- **{s}** {ICON[o.status]}: {_short(o.reason, REASON_CHARS)}" for s, o in bad[:MAX_LIST]]


def render_comment(pack_dir: Path, view: PackView | None = None, environ: Mapping[str, str] | None = None) -> str:
    view = view or load_view(pack_dir)
    links = ci_links(os.environ if environ is None else environ)
    lines = [MARKER, *headline(view), "", *_facts(view, links), "", "## Gates", "",
             *gate_table(view.pack, reason_limit=REASON_CHARS)]
    problems = _problems(view)
    if problems:
        lines += ["", "## What failed", "", *problems]
    bench = view.outcomes.get("bench")
    if bench is not None and bench.status in ("pass", "fail"):
        board = canonical_leaderboard(pack_dir / "bench", max_rows=LEADERBOARD_ROWS)
        if board:
            lines += ["", *board]
    lines += ["", "## Regressions", "", *_regressions(view)]
    lines += ["", "## Skipped", "", *_skipped(view)]
    lines += ["", f"Full report: `report.html` (plots) and `report.md` in the pack. Check it offline: "
                  f"`python -m evpack verify {view.pack_id}`.", ""]
    return fit(lines)


def fit(lines: list[str], limit: int = COMMENT_MAX_CHARS) -> str:
    """Join lines; when over the limit, cut at a line boundary and say so (the lists above are bounded,
    so this only fires on packs with pathological reasons)."""
    text = "\n".join(lines)
    if len(text) <= limit:
        return text
    note = "\n\n*(cut at the comment limit: report.md in the pack has everything)*\n"
    head = text[: limit - len(note)]
    return head[: head.rfind("\n")] + note
