"""The bench stage's outcome data, shared by its one-GPU derive (bench.py) and the sharded one
(bench_shards.py): the summary's numbers, the previous-pack comparison and the A/B's part.
Standard library only (verify)."""
from __future__ import annotations

from pathlib import Path

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
    if written.get("suite") != run_info.get("suite"):
        return f"summary.json's suite {written.get('suite')!r} is not run.json's {run_info.get('suite')!r}"
    said = (written.get("canonical"), written.get("primary_mode"))
    if "canonical" in run_info or "primary_mode" in run_info:
        expected, where = (run_info.get("canonical"), run_info.get("primary_mode")), "run.json's"
    else:
        expected, where = SUITE_HEADLINE_BEFORE_RUN_JSON.get(run_info.get("suite")), f"suite {written.get('suite')}'s"
    if expected is not None and said != expected:
        return (f"summary.json's canonical shape and primary mode {said} are not {where} {expected}: the headline "
                "speedup is taken where the suite says")
    return ""


def summary_data(summary: dict, *, throttled: bool, run_info: dict, so_sha256: str | None) -> dict:
    """data of a bench outcome from its (re-derived) summary: row counts, canonical speedup, cost, binary."""
    rows = summary["rows"]
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in sm.ROW_STATUSES}
    return {"suite": summary["suite"], "rows": len(rows), **{f"rows_{s}": n for s, n in counts.items()},
            "canonical_shape": summary["canonical"], "primary_mode": summary["primary_mode"],
            "canonical_speedup": summary["canonical_speedup"], "canonical_best": summary["canonical_best"],
            "canonical_speedup_vs": summary["canonical_speedup_vs"], "throttled": throttled,
            "gpu_seconds": run_info.get("gpu_seconds"), "cost_usd": run_info.get("cost_usd"),
            "so_sha256": so_sha256, "regressions": None, "compare_counts": None}


def canonical_note(summary: dict) -> str:
    """The reason's canonical-speedup clause ('' without a timed variant of ours at the canonical shape)."""
    if summary["canonical_speedup"] is None:
        return ""
    return (f"; canonical {summary['canonical_best']} {summary['canonical_speedup']:.2f}x "
            f"SDPA default ({summary['primary_mode']})")


def add_previous(stage_dir: Path, rows: list[dict], run_info: dict, data: dict) -> str | None:
    """The comparison with the previous pack (previous_summary.json, when the run had one) into data:
    its regressions and counts. Returns a problem (a corrupt file) or None."""
    from ..timing import summary as sm
    from ..timing.compare import compare_rows, regressions, row_problem

    if not sm.has_summary(stage_dir, sm.PREVIOUS_FILE):
        return None
    try:
        previous = sm.read_summary(stage_dir, sm.PREVIOUS_FILE)["rows"]
        problem = next(filter(None, map(row_problem, previous)), None)
        if problem:
            return f"corrupt previous_summary.json: {problem}"
        diff = compare_rows(previous, rows)
    except (ValueError, KeyError, TypeError) as exc:
        return f"corrupt previous_summary.json: {exc}"
    data["regressions"] = [f"{e.impl}|{e.variant}|{e.config}|{e.shape}|{e.mode}" for e in regressions(diff)]
    data["compare_counts"] = diff.counts
    data["previous_pack_id"] = run_info.get("previous_pack_id")
    return None


def add_ab(data: dict, ab_data: dict) -> str:
    """The A/B (re-derived ab.json) into data; a passed A/B decides perf-regression, not the previous pack.
    Returns the clause for the reason."""
    data["ab"] = outcome_data(ab_data)
    if ab_data["status"] == "pass":
        data["previous_regressions"] = data["regressions"]
        data["regressions"] = list(ab_data["regressions"])
    return "; " + ab.summary_line(ab_data)
