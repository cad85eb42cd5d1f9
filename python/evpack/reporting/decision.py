"""The performance decision a reviewer reads first, from the pack's benchmark files only.

The same-run A/B against the PR's base (bench/ab.json, one per shard) decides when the run had one; else the
comparison with an earlier pack (the bench outcome's previous-pack counts); else there is nothing to compare
with. The result is Markdown made with evpack.markdown: every pack value escaped.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..markdown import code, short, text
from ..stages.base import ERROR, SKIPPED
from ..timing import ab as ab_mod
from .common import PackView

REASON_CHARS = 300


@dataclass(frozen=True)
class PerfDecision:
    """line: one Markdown clause (no regression against ..., or the SLOWER count); slower/unsure: the rows
    (dicts of ab.json; a previous-pack regression has its key only) to name; notes: plain-text clauses
    that qualify the line (how it was timed, other tallies)."""

    line: str
    regressed: bool
    slower: tuple[dict, ...] = ()
    unsure: tuple[dict, ...] = ()
    notes: tuple[str, ...] = ()


def row_name(e: dict) -> str:
    """An A/B row for a reader: kernel, shape and mode, escaped (a row known by its key only: the key)."""
    if "variant" not in e:
        return code(e.get("key"))
    kernel = f"{e.get('variant')}/{e.get('config')}"
    return f"{code(kernel)} {text(e.get('shape'))} {text(e.get('mode'))}"


def ratio_text(e: dict) -> str:
    r, lo, hi = e.get("ratio"), e.get("ci_lo"), e.get("ci_hi")
    if not isinstance(r, (int, float)):
        return "no ratio"
    ci = f", CI {lo - 1:+.1%}..{hi - 1:+.1%}" if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else ""
    return f"time {r - 1:+.1%}{ci}"


def base_name(data: dict) -> str:
    ref, commit = str(data.get("base_ref") or "?"), str(data.get("base_commit") or "?")
    if data.get("self_check"):
        return "itself (A/B self-check)"
    return code(ref) + ("" if commit.startswith(ref) else f" ({code(commit[:12])})")


def _from_ab(data: dict) -> PerfDecision:
    against = base_name(data)
    if data.get("status") != "pass":
        return PerfDecision(f"no performance decision: the A/B against {against} is {text(data.get('status'))} "
                            f"({text(short(data.get('reason') or '', REASON_CHARS))})", regressed=False)
    rows = [e for e in data.get("rows") or [] if isinstance(e, dict)]
    counts = {v: sum(1 for e in rows if e.get("verdict") == v) for v in ab_mod.VERDICTS}
    slower = tuple(sorted((e for e in rows if e.get("verdict") == ab_mod.SLOWER), key=lambda e: str(e.get("key"))))
    unsure = tuple(sorted((e for e in rows if e.get("verdict") == ab_mod.UNSURE), key=lambda e: str(e.get("key"))))
    tally = f"{counts['SAME']} SAME, {counts['UNSURE']} UNSURE, {counts['SLOWER']} SLOWER"
    notes = ["timed in the same run on the same GPU"]
    notes += [f"{counts['FASTER']} FASTER"] if counts["FASTER"] else []
    notes += [f"{len(data[k])} {k} rows not compared" for k in ("new", "removed") if data.get(k)]
    if slower:
        line = f"**{len(slower)} row{'s' if len(slower) != 1 else ''} SLOWER** than {against}: {tally}"
    else:
        line = f"no regression against {against}: {tally}"
    return PerfDecision(line, bool(slower), slower, unsure, tuple(notes))


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
                            f"measured noise: {tally}", True, tuple({"key": k} for k in regs), (), notes)
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
