"""A/B of two builds timed in one run: the verdict rule and `bench/ab.json` (standard library only).

`bench --baseline REF` times every row of ours twice in the same interleaved rounds: the
head (this checkout's extension) and the base (REF's extension, built from a git worktree),
with the same inputs, L2 handling and SDPA calls in between. This module turns the two
sides' raw samples into ab.json and is what `verify` re-runs, so it imports nothing but the
standard library, evpack.timing.stats (math only) and its records (ab_rule.py, ab_rows.py, records/bench.py).

The rule (RULE in timing/ab_rule.py, rule_version 3; ab.json carries both verbatim; an ab.json without a
rule_version was made with RULE_V1, the same without the FDR control and the confirmation rounds, and one of
rule_version 2 with RULE_V2, which decided FASTER in one round):
  ratio  = median(head) / median(base)          (> 1: the head takes longer)
  CI     = [lo_h / hi_b, hi_h / lo_b] where [lo, hi] is each side's distribution-free
           (order-statistic, exact binomial) CI of its median at 1 - (1 - conf) / 2, so the
           ratio's interval covers the true ratio with probability >= conf (Bonferroni).
  p      = one-sided rank-sum (Mann-Whitney, normal approximation with tie and continuity corrections)
           p-value that head is slower than base x (1 + min_effect) (FASTER: faster than x (1 - min_effect))
  SLOWER   CI entirely above 1, ratio > 1 + min_effect, p significant under Benjamini-Hochberg at fdr_q
           over the run's compared rows, and then confirmed: the row timed again after the suite (head
           and base interleaved, fresh inputs: ab.json's `confirm` samples) gives CI above 1, ratio > 1 +
           min_effect and p <= confirm_alpha / (rows re-timed). Not confirmed: UNSURE, never SLOWER.
  FASTER   CI entirely below 1, ratio < 1 - min_effect, p significant under Benjamini-Hochberg, and then
           confirmed as a SLOWER row is (CI below 1, ratio < 1 - min_effect, p <= confirm_alpha / (rows
           re-timed) in the second round). Not confirmed: UNSURE, never FASTER.
  SAME     CI inside [1 - min_effect, 1 + min_effect] (an equivalence test: any change is
           smaller than min_effect with confidence conf)
  UNSURE   none of these (a CI too wide to decide), fewer than min_n samples on a side, or
           a side that was not timed / not correct (the reason says which)

Why an interval of the medians and not the per-sample spread (compare.py's rule between two
packs): both sides are sampled in the same rounds, so slow GPU states hit both alike and the
run-to-run shifts compare.py must absorb are not there. The order-statistic CI assumes
independent samples; consecutive launches are correlated, which makes the CI too narrow,
and min_effect is the margin that keeps that from becoming a verdict: a shift smaller than
min_effect is never FASTER or SLOWER. The false-positive rate of the whole rule is measured
by the A/B of a commit against itself (`--self-check`; tests/test_ab.py on synthetic and on
the reference packs' real samples).

Why version 2 (issue 25): with ~200 rows per run a per-row rule flags some rows by chance; a quick-suite
self-check of one commit read 5 SLOWER of 192. min_effect stays 2%: the same-run self-check spread of the
committed full-suite packs (784 rows, two runs) is at most 1.42% (99th percentile 0.7%), while two runs of
one commit 7 minutes apart differ by up to 2.6%, which is why a row is confirmed in a second, same-run
round rather than trusted from one. Benjamini-Hochberg keeps the expected share of false SLOWER rows at
fdr_q; the confirmation round is what makes an identical commit read 0 SLOWER in practice
(tests/test_ab.py replays the two packs' real samples through it).

Why version 3: version 2 decided FASTER in one round, and the full-suite self-checks of two packs of one
commit against itself each read one false FASTER (cold rows of 10.9 and 13.0 µs, -2.0% and -3.2%). A FASTER
row is a claim a change's author can quote, so it is held to the same second round as a SLOWER one.
"""
from __future__ import annotations

import math
from dataclasses import replace

from ..records.bench import AbRecord, BenchRow
from ..records.view import obj
from .ab_rows import Confirm, ConfirmSamples, Entry, FirstRound, Ratio
from .ab_rule import RULE, RULE_V1, Rule
from .ab_rule import RULE_VERSION as RULE_VERSION
from .ab_rule import RULES as RULES
from .stats import median_ci_ranks, quantile
from .summary import same_value
from .uniqueness import timed_content_unique

SCHEMA = 1
SAME, FASTER, SLOWER, UNSURE = "SAME", "FASTER", "SLOWER", "UNSURE"
VERDICTS = (SAME, FASTER, SLOWER, UNSURE)
OURS, BASE = "evpack", "base"  # impl of the head's rows / of the base's rows in the run
AB_FILE = "ab.json"
BASE_SAMPLES = "ab_samples.csv"  # a samples member (summary.samples_file finds .xz, or older packs' .gz)
BASE_SAMPLES_FILE = f"{BASE_SAMPLES}.xz"  # the name a writer gives it
AB_STATUSES = ("pass", "error", "skipped")  # pass: both sides timed and compared (verdicts say the rest)


def median_interval(times: list[float], conf: float) -> tuple[float, float, float]:
    """(median, lo, hi): the median and its order-statistic CI at coverage >= conf (when n allows)."""
    xs = sorted(times)
    lo, hi, _cov = median_ci_ranks(len(xs), conf)
    return quantile(xs, 0.5), xs[lo], xs[hi]


def ratio_interval(head: list[float], base: list[float], conf: float) -> tuple[float, float, float]:
    """(ratio, lo, hi) of median(head) / median(base), joint coverage >= conf."""
    each = 1.0 - (1.0 - conf) / 2.0
    mh, lh, hh = median_interval(head, each)
    mb, lb, hb = median_interval(base, each)
    return mh / mb, lh / hb, hh / lb


def verdict(head: list[float], base: list[float], rule: Rule = RULE_V1) -> tuple[str, str, Ratio | None]:
    """(verdict, reason, numbers) for two same-run sample lists of one row: the per-row rule of version 1 (and
    the first step of version 2, which adds the FDR control and the confirmation round)."""
    if len(head) < rule.min_n or len(base) < rule.min_n:
        return UNSURE, f"too few samples (head {len(head)}, base {len(base)}; need {rule.min_n})", None
    if min(head) <= 0 or min(base) <= 0:
        return UNSURE, "non-positive sample time", None
    r, lo, hi = ratio_interval(head, base, rule.conf)
    eff = rule.min_effect
    nums = Ratio(r, lo, hi)
    if lo > 1.0 and r > 1.0 + eff:
        return SLOWER, f"head {r - 1:+.1%} (CI {lo - 1:+.1%}..{hi - 1:+.1%})", nums
    if hi < 1.0 and r < 1.0 - eff:
        return FASTER, f"head {r - 1:+.1%} (CI {lo - 1:+.1%}..{hi - 1:+.1%})", nums
    if lo >= 1.0 - eff and hi <= 1.0 + eff:
        return SAME, f"within {eff:.0%} (CI {lo - 1:+.1%}..{hi - 1:+.1%})", nums
    return UNSURE, f"CI {lo - 1:+.1%}..{hi - 1:+.1%} neither inside +-{eff:.0%} nor clear of 1", nums


def rank_sum_p(x: list[float], y: list[float]) -> float:
    """One-sided p-value that x is stochastically larger than y: the Mann-Whitney U test, normal approximation
    with the tie correction of the variance and a continuity correction (1.0 when every value is tied)."""
    n1, n2 = len(x), len(y)
    n = n1 + n2
    values = sorted([(v, 0) for v in x] + [(v, 1) for v in y])
    rank_sum_x, ties, i = 0.0, 0.0, 0
    while i < n:
        j = i
        while j + 1 < n and values[j + 1][0] == values[i][0]:
            j += 1
        rank = (i + j) / 2 + 1  # average rank of the tied run i..j
        rank_sum_x += rank * sum(1 for k in range(i, j + 1) if values[k][1] == 0)
        t = j - i + 1
        ties += t ** 3 - t
        i = j + 1
    u = rank_sum_x - n1 * (n1 + 1) / 2
    var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (u - n1 * n2 / 2 - 0.5) / math.sqrt(var)
    return 0.5 * math.erfc(z / math.sqrt(2))


def benjamini_hochberg(pvalues: dict[str, float], q: float) -> set[str]:
    """Keys rejected by the Benjamini-Hochberg step-up procedure at false discovery rate q: with the m p-values
    sorted, the k smallest where k is the largest rank with p_(k) <= k q / m (ties broken by key)."""
    ranked = sorted(pvalues.items(), key=lambda kv: (kv[1], kv[0]))
    m, k = len(ranked), 0
    for i, (_, p) in enumerate(ranked, 1):
        if p <= i * q / m:
            k = i
    return {key for key, _ in ranked[:k]}


def _first_round(head: list[float], base: list[float], rule: Rule) -> FirstRound:
    """Round-1 numbers of a comparable row: the v1 verdict and the two one-sided p-values."""
    v, reason, nums = verdict(head, base, rule)
    if nums is None:
        return FirstRound(v, reason, None)
    eff = rule.min_effect
    return FirstRound(v, reason, nums, p_slower=rank_sum_p(head, [t * (1 + eff) for t in base]),
                      p_faster=rank_sum_p([t * (1 - eff) for t in base], head))


def _confirmation(head: list[float] | None, base: list[float] | None, rule: Rule,
                  m: int, want: str = SLOWER) -> tuple[bool, str, Confirm | None]:
    """(confirmed, why, numbers) of a candidate row's second round (m = rows re-timed; want: SLOWER or
    FASTER, the first round's verdict)."""
    if not head or not base:
        return False, "no confirmation round (the row was not re-timed)", None
    v, _, nums = verdict(head, base, rule)
    if nums is None:
        return False, f"confirmation round: too few samples (head {len(head)}, base {len(base)})", None
    eff = rule.min_effect
    p = (rank_sum_p(head, [t * (1 + eff) for t in base]) if want == SLOWER
         else rank_sum_p([t * (1 - eff) for t in base], head))
    limit = rule.confirm_alpha / max(1, m)
    ok = v == want and p <= limit
    side = "above" if want == SLOWER else "below"
    ci = f"CI {nums.ci_lo - 1:+.1%}..{nums.ci_hi - 1:+.1%}"
    why = (f"confirmed: head {nums.ratio - 1:+.1%} ({ci}, p {p:.2g} <= {limit:.2g})" if ok else
           f"not confirmed: round 2 head {nums.ratio - 1:+.1%} ({ci}, p {p:.2g}, needs CI {side} 1, beyond "
           f"{eff:.0%} and p <= {limit:.2g})")
    return ok, why, Confirm(nums, p, side_stats(head), side_stats(base))


def side_stats(times: list[float] | None) -> dict:
    """Median and spread of one side (None fields when it was not timed)."""
    if not times:
        return {"n": 0, "median_us": None, "q1_us": None, "q3_us": None, "iqr_us": None, "rel_iqr": None}
    xs = sorted(times)
    med, q1, q3 = quantile(xs, 0.5), quantile(xs, 0.25), quantile(xs, 0.75)
    return {"n": len(xs), "median_us": med, "q1_us": q1, "q3_us": q3, "iqr_us": q3 - q1,
            "rel_iqr": (q3 - q1) / med if med > 0 else None}


def base_key(head_key: str) -> str:
    """The base row's key for a head row's key (impl field replaced)."""
    impl, rest = head_key.split("|", 1)
    if impl != OURS:
        raise ValueError(f"not a row of ours: {head_key}")
    return f"{BASE}|{rest}"


def head_key(base_row_key: str) -> str:
    impl, rest = base_row_key.split("|", 1)
    if impl != BASE:
        raise ValueError(f"not a base row: {base_row_key}")
    return f"{OURS}|{rest}"


def row_status(row: BenchRow) -> str:
    """A row's status with the post-timing re-check re-derived from its recorded error and bound."""
    if row.status not in ("ok", "fail"):
        return str(row.status)
    err, bound = row.max_abs_err, row.err_bound
    return "ok" if err is not None and bound is not None and err <= bound else "fail"


def _not_timed(row: BenchRow, times: list[float] | None, unique: bool = False) -> str:
    """Why one side cannot be compared ('' when it can). With `unique` (rule version 2), a row that records how
    its content was made unique (rows written since issue 25) must have had new content on every timed call."""
    if row_status(row) != "ok":
        why = str(row.reason or "")[:160]
        return row_status(row) + (f": {why}" if why else "")
    if not times:
        return "no samples"
    if unique and "content_uniqueness" in row.raw and not timed_content_unique(row.raw, len(times)):
        return f"timed content not unique ({row.unique_calls} of {len(times)} samples' calls)"
    return ""


def _join(head_rows: list[dict], head_samples: dict[str, list[float]], base_rows: list[dict],
          base_samples: dict[str, list[float]], unique: bool = False):
    """(entries without verdicts, comparable keys with their samples, heads, bases). `unique`: rule version 2."""
    heads = {r.key: r for r in map(BenchRow.from_json, head_rows) if r.impl == OURS and r.status != "unsupported"}
    bases = {head_key(r.key): r for r in map(BenchRow.from_json, base_rows)}
    entries, comparable = [], {}
    for key in sorted(set(heads) & set(bases)):
        h, b = heads[key], bases[key]
        hs, bs = head_samples.get(key), base_samples.get(base_key(key))
        why = [f"{side} {w}" for side, w in (("head", _not_timed(h, hs, unique)), ("base", _not_timed(b, bs, unique)))
               if w]
        e = Entry(key, h.variant, h.config, h.shape, h.mode, head=side_stats(hs if row_status(h) == "ok" else None),
                  base=side_stats(bs if row_status(b) == "ok" else None), compared=not why, v2=unique)
        if why:
            e = replace(e, verdict=UNSURE, reason="; ".join(why))
        else:
            comparable[key] = (hs, bs)
        entries.append(e)
    return entries, comparable, heads, bases


def _verdicts_v1(entries: list[Entry], comparable: dict, rule: Rule) -> list[Entry]:
    out = []
    for e in entries:
        if e.key in comparable:
            v, reason, nums = verdict(*comparable[e.key], rule)
            e = replace(e, nums=nums, verdict=v, reason=reason)
        out.append(e)
    return out


def first_round(comparable: dict, rule: Rule = RULE) -> tuple[dict[str, FirstRound], list[str], set[str]]:
    """Rule version 2 on, before any confirmation: every comparable row's round-1 numbers, the rows that need a
    confirmation round (sorted: SLOWER by the per-row rule and significant after Benjamini-Hochberg; from
    version 3 FASTER ones too) and the rows whose FASTER p-value is significant after Benjamini-Hochberg."""
    rounds = {k: _first_round(h, b, rule) for k, (h, b) in comparable.items()}
    slow = benjamini_hochberg({k: r.p_slower for k, r in rounds.items() if r.p_slower is not None}, rule.fdr_q)
    fast = benjamini_hochberg({k: r.p_faster for k, r in rounds.items() if r.p_faster is not None}, rule.fdr_q)
    cands = [k for k in slow if rounds[k].v1 == SLOWER]
    if rule.rule_version >= 3:
        cands += [k for k in fast if rounds[k].v1 == FASTER]
    return rounds, sorted(cands), fast


def candidate_verdicts(head_rows: list[dict], head_samples: dict[str, list[float]], base_rows: list[dict],
                       base_samples: dict[str, list[float]], rule: Rule = RULE) -> dict[str, str]:
    """{key: SLOWER or FASTER}: the head's rows that the rule re-times before it may call them SLOWER (and, from
    version 3, FASTER), each with the verdict its confirmation round has to show again."""
    _, comparable, _, _ = _join(head_rows, head_samples, base_rows, base_samples, unique=True)
    rounds, cands, _ = first_round(comparable, rule)
    return {k: rounds[k].v1 for k in cands}


def _verdicts_v2(entries: list[Entry], comparable: dict, rule: Rule,
                 confirm: ConfirmSamples | None) -> tuple[list[Entry], list[str]]:
    """Rule version 2 or 3 (module docstring): the decided entries and the keys that were candidates for a
    confirmation round."""
    rounds, cands, fast = first_round(comparable, rule)
    again = confirm or ConfirmSamples()
    out = []
    for e in entries:
        r = rounds.get(e.key)
        out.append(e if r is None else _decide(e, r, rule, cands, fast, again))
    return out, cands


def _decide(e: Entry, r: FirstRound, rule: Rule, cands: list[str], fast: set[str], again: ConfirmSamples) -> Entry:
    """A compared entry under rule version 2 or 3: its round-1 verdict, kept only when significant after the FDR
    control and, for SLOWER (version 3: and FASTER), when its confirmation round confirms it."""
    e = replace(e, nums=r.nums, p_slower=r.p_slower, p_faster=r.p_faster, verdict=r.v1, reason=r.reason)
    if r.v1 == SLOWER and e.key not in cands:
        return replace(e, verdict=UNSURE, reason=f"{r.reason}; not significant after FDR control (p "
                                                 f"{r.p_slower:.2g}, Benjamini-Hochberg at {rule.fdr_q})")
    if r.v1 == SLOWER:
        ok, why, nums = _confirmation(again.head.get(e.key), again.base.get(base_key(e.key)), rule, len(cands))
        return replace(e, confirm=nums, verdict=SLOWER if ok else UNSURE, reason=f"{r.reason}; {why}")
    if r.v1 == FASTER and e.key not in fast:
        return replace(e, verdict=UNSURE, reason=f"{r.reason}; not significant after FDR control (p "
                                                 f"{r.p_faster:.2g}, Benjamini-Hochberg at {rule.fdr_q})")
    if r.v1 == FASTER and rule.rule_version >= 3:
        ok, why, nums = _confirmation(again.head.get(e.key), again.base.get(base_key(e.key)), rule, len(cands),
                                      want=FASTER)
        return replace(e, confirm=nums, verdict=FASTER if ok else UNSURE, reason=f"{r.reason}; {why}")
    return e


def compare_sides(head_rows: list[dict], head_samples: dict[str, list[float]], base_rows: list[dict],
                  base_samples: dict[str, list[float]], rule: Rule = RULE,
                  confirm: ConfirmSamples | None = None) -> dict:
    """Join the head's rows of ours with the base's rows; one entry per row on both sides.

    Rows on one side only are listed under new (head only) / removed (base only), never compared. The rule's
    version picks the decision (an ab.json is always re-derived with the rule it was made with); `confirm`
    holds the confirmation-round samples (version 2 on) (head keys' and base keys' times).
    """
    v2 = rule.rule_version >= 2
    entries, comparable, heads, bases = _join(head_rows, head_samples, base_rows, base_samples, unique=v2)
    extra = {}
    if v2:
        entries, cands = _verdicts_v2(entries, comparable, rule, confirm)
        extra = {"confirm_keys": cands}
    else:
        entries = _verdicts_v1(entries, comparable, rule)

    def listing(keys, rows):
        return [{"key": k, "variant": rows[k].variant, "config": rows[k].config, "shape": rows[k].shape,
                 "mode": rows[k].mode, "status": row_status(rows[k])} for k in sorted(keys)]

    counts = {v: sum(1 for e in entries if e.verdict == v) for v in VERDICTS}
    return {"rows": [e.to_json() for e in entries], "new": listing(set(heads) - set(bases), heads),
            "removed": listing(set(bases) - set(heads), bases), "counts": counts,
            "regressions": [e.key for e in entries if e.verdict == SLOWER], **extra}


def build_ab(meta: dict, head_rows: list[dict], head_samples: dict[str, list[float]],
             base_records: list[dict], base_samples: dict[str, list[float]], rule: Rule = RULE,
             confirm: ConfirmSamples | None = None) -> dict:
    """ab.json: meta (commits, binaries, build) + the rule + the comparison (when the base was timed).

    meta's status is "pass" (both sides timed) or "error"/"skipped" with meta's reason; only
    "pass" carries rows. The derived fields are a pure function of the arguments.
    """
    v2 = rule.rule_version >= 2
    out = {"schema": SCHEMA, **meta, "rule": rule.to_json(), "base_records": base_records,
           **({"rule_version": rule.version} if v2 else {})}
    if AbRecord.from_json(meta).status != "pass":
        return {**out, "rows": [], "new": [], "removed": [], "counts": {v: 0 for v in VERDICTS}, "regressions": [],
                **({"confirm_keys": []} if v2 else {})}
    return {**out, **compare_sides(head_rows, head_samples, base_records, base_samples, rule, confirm)}


DERIVED_KEYS = ("rows", "new", "removed", "counts", "regressions", "confirm_keys")


def merge(parts: list[dict]) -> dict:
    """One A/B over several GPUs' ab.json (a sharded benchmark: each shape measured whole on one GPU, both
    sides on the same GPU). Meta from the first part; `pass` only when every part passed; rows, new/removed
    rows, counts and regressions are the parts' together. One part: returned as it is."""
    if len(parts) == 1:
        return parts[0]
    out = dict(parts[0])
    views = [AbRecord.from_json(p) for p in parts]
    failed = [p for p in views if p.status != "pass"]
    if failed:
        out.update(status=failed[0].status, reason="; ".join(str(p.reason) for p in failed))
    for key in ("rows", "new", "removed", "regressions", "base_records", "confirm_keys"):
        if any(key in p for p in parts):
            out[key] = [x for p in parts for x in p.get(key) or []]
    out.update(counts={v: sum(obj(p.counts).get(v, 0) for p in views) for v in VERDICTS})
    return out


def differences(written: dict, recomputed: dict) -> list[str]:
    """Where a written ab.json disagrees with the one re-derived from the samples."""
    diffs = [k for k in ("rule", "rule_version") if not same_value(written.get(k), recomputed.get(k))]
    w_rows = {e.key: e.raw for e in AbRecord.from_json(written).rows}
    for row in AbRecord.from_json(recomputed).rows:
        w, e = w_rows.pop(row.key, None), row.raw
        if w is None:
            diffs.append(f"{row.key}: missing from ab.json")
        elif not same_value(w, e):
            bad = sorted(k for k in set(w) | set(e) if not same_value(w.get(k), e.get(k)))
            diffs.append(f"{row.key}: {', '.join(bad)}")
    diffs += [f"{k}: in ab.json but not derivable from the samples" for k in w_rows]
    diffs += [k for k in DERIVED_KEYS[1:] if not same_value(written.get(k), recomputed.get(k))]
    return diffs


def summary_line(ab: dict) -> str:
    """One line for the performance gate's reason."""
    a = AbRecord.from_json(ab)
    base = (a.base_commit or "?")[:12]
    if a.status != "pass":
        return f"A/B vs {base}: {a.status} ({str(a.reason if 'reason' in a.raw else '')[:160]})"
    c = a.counts
    parts = [f"{c[v]} {v}" for v in VERDICTS if c.get(v)]
    extra = [f"{len(rows)} {k}" for k, rows in (("new", a.new), ("removed", a.removed)) if rows]
    return f"A/B vs {base}: {len(a.rows)} rows, " + ", ".join(parts + extra)


def same_rate(ab: dict) -> float | None:
    """Share of compared rows judged SAME (the self-check's figure of merit)."""
    rows = AbRecord.from_json(ab).rows
    return sum(1 for e in rows if e.verdict == SAME) / len(rows) if rows else None
