"""The A/B's confirmation round in the benchmark process (rule version 2 on, timing/ab.py).

After the suite, the rows that the first round would call SLOWER, or from rule version 3 FASTER (per-row rule
and Benjamini-Hochberg: ab.candidate_verdicts), are timed again, before any verdict: per shape, fresh inputs
(ShapeRunner.confirm), every candidate's head and base interleaved in the same rounds, in the row's mode. A row
that the time budget (BUDGET_FRACTION of the A/B's measuring budget) leaves unconfirmed reads UNSURE, never
SLOWER or FASTER. The SLOWER candidates of every shape are timed first and the FASTER ones after them, each on
inputs of its own (round_no), so no number of rows made faster, or noisy in that direction, can spend the budget
that confirms a regression. GPU only.
"""
from __future__ import annotations

import logging
import time

from . import ab
from .ab_stage import split

log = logging.getLogger(__name__)

BUDGET_FRACTION = 0.5  # of the runner's measuring budget: quick with an A/B 48 s, full 320 s (inside TIMEOUT_S)
ORDER = (ab.SLOWER, ab.FASTER)  # regressions first: they set the label


def wanted_by_shape(verdicts: dict[str, str], by_key: dict[str, dict], want: str) -> dict[str, list[tuple]]:
    """{shape key: [(variant, config, mode), ...]} of the candidates whose first round read `want`."""
    wanted: dict[str, list[tuple[str, str, str]]] = {}
    for k in sorted(verdicts):
        if verdicts[k] == want:
            r = by_key[k]
            wanted.setdefault(r["shape"], []).append((r["variant"], r["config"], r["mode"]))
    return wanted


def run(runner, suite, records: list[dict], samples: dict[str, list[float]]) -> tuple[list[dict], dict]:
    """(records, samples) of the confirmation round (empty when no row is a candidate)."""
    head, base, head_samples, base_samples = split(records, samples)
    verdicts = ab.candidate_verdicts(head, head_samples, base, base_samples)
    if not verdicts or runner.base is None:
        return [], {}
    by_key = {r["key"]: r for r in head}
    budget = BUDGET_FRACTION * runner.budget_s
    t0 = time.perf_counter()
    out_records, out_samples = [], {}
    for round_no, want in enumerate(ORDER):
        wanted = wanted_by_shape(verdicts, by_key, want)
        if not wanted:
            continue
        log.info("A/B: %d %s rows to confirm over %d shapes", sum(map(len, wanted.values())), want, len(wanted))
        for ss in suite.shapes:
            pairs = wanted.get(ss.shape.key)
            if not pairs:
                continue
            if time.perf_counter() - t0 > budget:
                log.warning("A/B: confirmation budget %.0f s spent; %s rows of %s left unconfirmed", budget, want,
                            ss.shape.key)
                continue
            recs, smp = runner.confirm(ss, pairs, runner.rule.time_cap_s, round_no=round_no)
            out_records += recs
            out_samples.update(smp)
    log.info("A/B: confirmation round took %.1f s", time.perf_counter() - t0)
    return out_records, out_samples
