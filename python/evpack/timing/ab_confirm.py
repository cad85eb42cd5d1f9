"""The A/B's confirmation round in the benchmark process (rule version 2 on, timing/ab.py).

After the suite, the rows that the first round would call SLOWER, or from rule version 3 FASTER (per-row rule
and Benjamini-Hochberg: ab.candidates), are timed again, before any verdict: per shape, fresh inputs
(ShapeRunner.confirm), every candidate's head and base interleaved in the same rounds, in the row's mode. A row
that the time budget (BUDGET_FRACTION of the A/B's measuring budget) leaves unconfirmed reads UNSURE, never
SLOWER or FASTER. GPU only.
"""
from __future__ import annotations

import logging
import time

from . import ab
from .ab_stage import split

log = logging.getLogger(__name__)

BUDGET_FRACTION = 0.5  # of the runner's measuring budget: quick with an A/B 48 s, full 320 s (inside TIMEOUT_S)


def run(runner, suite, records: list[dict], samples: dict[str, list[float]]) -> tuple[list[dict], dict]:
    """(records, samples) of the confirmation round (empty when no row is a candidate)."""
    head, base, head_samples, base_samples = split(records, samples)
    keys = ab.candidates(head, head_samples, base, base_samples)
    if not keys or runner.base is None:
        return [], {}
    by_key = {r["key"]: r for r in head}
    wanted: dict[str, list[tuple[str, str, str]]] = {}
    for k in keys:
        r = by_key[k]
        wanted.setdefault(r["shape"], []).append((r["variant"], r["config"], r["mode"]))
    budget = BUDGET_FRACTION * runner.budget_s
    t0 = time.perf_counter()
    out_records, out_samples = [], {}
    log.info("A/B: %d rows to confirm over %d shapes", len(keys), len(wanted))
    for ss in suite.shapes:
        pairs = wanted.get(ss.shape.key)
        if not pairs:
            continue
        if time.perf_counter() - t0 > budget:
            log.warning("A/B: confirmation budget %.0f s spent; %s left unconfirmed", budget, ss.shape.key)
            continue
        recs, smp = runner.confirm(ss, pairs, runner.rule.time_cap_s)
        out_records += recs
        out_samples.update(smp)
    log.info("A/B: confirmation round took %.1f s", time.perf_counter() - t0)
    return out_records, out_samples
