"""The performance decision a reviewer reads first, from the pack's benchmark files only.

The same-run A/B against the PR's base (bench/ab.json, one per shard) decides when the run had one; else the
comparison with an earlier pack (the bench outcome's previous-pack counts); else there is nothing to compare
with. The result is Markdown made with evpack.markdown: every pack value escaped.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..markdown import code, short, text
from ..records.bench import AbRecord, AbRow
from ..records.view import number
from ..stages.base import ERROR, SKIPPED
from ..timing import ab as ab_mod
from .common import PackView

REASON_CHARS = 300


@dataclass(frozen=True)
class PerfDecision:
    """line: one Markdown clause (no regression against ..., or the SLOWER count); slower/unsure: the rows
    of ab.json to name (a previous-pack regression: a row with its key only); notes: plain-text clauses
    that qualify the line (how it was timed, other tallies)."""

    line: str
    regressed: bool
    slower: tuple[AbRow, ...] = ()
    unsure: tuple[AbRow, ...] = ()
    notes: tuple[str, ...] = ()


def row_name(e: AbRow) -> str:
    """An A/B row for a reader: kernel, shape and mode, escaped (a row known by its key only: the key)."""
    if e.variant is None:
        return code(e.key)
    return f"{code(e.kernel)} {text(e.shape)} {text(e.mode)}"


def ratio_text(e: AbRow) -> str:
    r, lo, hi = e.ratio, e.ci_lo, e.ci_hi
    if not number(r):
        return "no ratio"
    ci = f", CI {lo - 1:+.1%}..{hi - 1:+.1%}" if number(lo) and number(hi) else ""
    return f"time {r - 1:+.1%}{ci}"


def base_name(ab: AbRecord) -> str:
    ref, commit = str(ab.base_ref or "?"), str(ab.base_commit or "?")
    if ab.self_check:
        return "itself (A/B self-check)"
    return code(ref) + ("" if commit.startswith(ref) else f" ({code(commit[:12])})")


def _from_ab(data: dict) -> PerfDecision:
    ab = AbRecord.from_json(data)
    against = base_name(ab)
    if not ab.passed:
        return PerfDecision(f"no performance decision: the A/B against {against} is {text(ab.status)} "
                            f"({text(short(ab.reason or '', REASON_CHARS))})", regressed=False)
    same, unsure, slower, faster = (ab.count(v) for v in (ab_mod.SAME, ab_mod.UNSURE, ab_mod.SLOWER, ab_mod.FASTER))
    tally = f"{same} SAME, {unsure} UNSURE, {slower} SLOWER"
    notes = ["timed in the same run on the same GPU"]
    notes += [f"{faster} FASTER"] if faster else []
    notes += [f"{len(rows)} {what} rows not compared" for what, rows in (("new", ab.new), ("removed", ab.removed))
              if rows]
    if slower:
        line = f"**{slower} row{'s' if slower != 1 else ''} SLOWER** than {against}: {tally}"
    else:
        line = f"no regression against {against}: {tally}"
    return PerfDecision(line, bool(slower), ab.with_verdict(ab_mod.SLOWER), ab.with_verdict(ab_mod.UNSURE),
                        tuple(notes))


def _from_previous(view: PackView, data: dict) -> PerfDecision:
    regs, counts = data.get("regressions"), data.get("compare_counts") or {}
    against = f"pack {code(data.get('previous_pack_id') or '?')}"
    tally = ", ".join(f"{n} {text(k)}" for k, n in counts.items() if n) or "no rows compared"
    ours = len(regs or [])
    if counts.get("SLOWER"):
        tally += f" ({ours} of ours)"
    notes = ("against an earlier run's benchmark, not a same-run A/B; the tally counts every row, SDPA's included",)
    if regs:
        return PerfDecision(f"**{ours} row{'s' if ours != 1 else ''} of ours SLOWER** than {against} beyond the "
                            f"measured noise: {tally}", True, tuple(AbRow(key=k) for k in regs), (), notes)
    return PerfDecision(f"no regression against {against}: {tally}", False, (), (), notes)


def decide(view: PackView) -> PerfDecision:
    """The performance decision of the pack (see the module's doc)."""
    from ..timing.ab_stage import load

    bench = view.outcomes.get("bench")
    if bench is None or bench.status == SKIPPED:
        why = f" ({text(short(bench.reason, REASON_CHARS))})" if bench else ""
        return PerfDecision(f"no performance decision: no benchmark in this pack{why}", False)
    if bench.status == ERROR:
        return PerfDecision(f"no performance decision: the benchmark could not be judged "
                            f"({text(short(bench.reason, REASON_CHARS))})", False)
    try:
        data = load(view.dir / "bench")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return PerfDecision(f"no performance decision: bench/ab.json could not be read ({text(type(exc).__name__)})",
                            False)
    if data is not None:
        return _from_ab(data)
    if bench.data.get("regressions") is not None:
        return _from_previous(view, bench.data)
    return PerfDecision("no performance decision: no base to compare with (no same-run A/B, `--baseline`, "
                        "and no earlier pack, `--previous-pack`)", False)
