"""The bench stage's outcome data, shared by its one-GPU derive (bench.py) and the sharded one
(bench_shards.py): the summary's numbers, the previous-pack comparison and the A/B's part.
Standard library only (verify)."""
from __future__ import annotations

from pathlib import Path

from ..records.bench import AbRecord, BenchRun, BenchSummary
from ..timing import ab
from ..timing import summary as sm
from ..timing.ab_stage import outcome_data

META_KEYS = ("suite", "canonical", "primary_mode")  # summary.json's run-level fields
# The canonical shape and primary mode of the project's suites as the packs written before run.json recorded
# them (every pack of schema 1 to 3 up to that change) took them: history, never edited. The headline speedup
# is taken where the suite says, never where a summary.json says.
SUITE_HEADLINE_BEFORE_RUN_JSON = {
    "quick": ("B=16,H=16,S=512,D=64,dtype=fp16,causal=0", "cold"),
    "full": ("B=16,H=16,S=512,D=64,dtype=fp16,causal=0", "cold"),
}


def meta_problem(written: dict, run_info: dict) -> str:
    """Why summary.json's suite, canonical shape or primary mode are not the run's ('' when they are): the
    suite is run.json's, the other two run.json's (newer packs) or the named suite's (older packs)."""
    w, run = BenchSummary.from_json(written), BenchRun.from_json(run_info)
    if w.suite != run.suite:
        return f"summary.json's suite {w.suite!r} is not run.json's {run.suite!r}"
    said = (w.canonical, w.primary_mode)
    if "canonical" in run.raw or "primary_mode" in run.raw:
        expected, where = (run.canonical, run.primary_mode), "run.json's"
    else:
        expected, where = SUITE_HEADLINE_BEFORE_RUN_JSON.get(run.suite), f"suite {w.suite}'s"
    if expected is not None and said != expected:
        return (f"summary.json's canonical shape and primary mode {said} are not {where} {expected}: the headline "
                "speedup is taken where the suite says")
    return ""


def summary_data(summary: dict, *, throttled: bool, run_info: dict, so_sha256: str | None) -> dict:
    """data of a bench outcome from its (re-derived) summary: row counts, canonical speedup, cost, binary."""
    s, run = BenchSummary.from_json(summary), BenchRun.from_json(run_info)
    counts = {st: sum(1 for r in s.rows if r.status == st) for st in sm.ROW_STATUSES}
    return {"suite": s.suite, "rows": len(s.rows), **{f"rows_{st}": n for st, n in counts.items()},
            "canonical_shape": s.canonical, "primary_mode": s.primary_mode,
            "canonical_speedup": s.canonical_speedup, "canonical_best": s.canonical_best,
            "canonical_speedup_vs": s.canonical_speedup_vs, "throttled": throttled,
            "gpu_seconds": run.gpu_seconds, "cost_usd": run.cost_usd,
            "so_sha256": so_sha256, "regressions": None, "compare_counts": None}


def canonical_note(summary: dict) -> str:
    """The reason's canonical-speedup clause ('' without a timed variant of ours at the canonical shape)."""
    s = BenchSummary.from_json(summary)
    if s.canonical_speedup is None:
        return ""
    return f"; canonical {s.canonical_best} {s.canonical_speedup:.2f}x SDPA default ({s.primary_mode})"


def add_previous(stage_dir: Path, rows: list[dict], run_info: dict, data: dict) -> str | None:
    """The comparison with the previous pack (previous_summary.json, when the run had one) into data:
    its regressions and counts. Returns a problem (a corrupt file) or None."""
    from ..timing import summary as sm
    from ..timing.compare import compare_rows, recorded_rule, regressions, row_problem

    if not sm.has_summary(stage_dir, sm.PREVIOUS_FILE):
        return None
    recorded = BenchRun.from_json(run_info).compare_rule
    rule = recorded_rule(recorded)
    if rule is None:
        return f"run.json names an unknown compare rule {recorded!r}"
    try:
        previous = sm.read_summary(stage_dir, sm.PREVIOUS_FILE)["rows"]
        problem = next(filter(None, map(row_problem, previous)), None)
        if problem:
            return f"corrupt previous_summary.json: {problem}"
        diff = compare_rows(previous, rows, rule=rule)
    except (ValueError, KeyError, TypeError) as exc:
        return f"corrupt previous_summary.json: {exc}"
    data.update(regressions=[f"{e.impl}|{e.variant}|{e.config}|{e.shape}|{e.mode}" for e in regressions(diff)],
                compare_counts=diff.counts, previous_pack_id=BenchRun.from_json(run_info).previous_pack_id)
    return None


def add_ab(data: dict, ab_data: dict) -> str:
    """The A/B (re-derived ab.json) into data; a passed A/B decides perf-regression, not the previous pack.
    Returns the clause for the reason."""
    record = AbRecord.from_json(ab_data)
    data.update(ab=outcome_data(ab_data))
    if record.passed:
        data.update(previous_regressions=data["regressions"], regressions=list(record.regressions))
    return "; " + ab.summary_line(ab_data)
