"""A/B of two builds timed in one run: the verdict rule and `bench/ab.json` (standard library only).

`bench --baseline REF` times every row of ours twice in the same interleaved rounds: the
head (this checkout's extension) and the base (REF's extension, built from a git worktree),
with the same inputs, L2 handling and SDPA calls in between. This module turns the two
sides' raw samples into ab.json and is what `verify` re-runs, so it imports nothing but the
standard library and evpack.timing.stats (math only).

The rule (RULE below; ab.json carries it verbatim):
  ratio  = median(head) / median(base)          (> 1: the head takes longer)
  CI     = [lo_h / hi_b, hi_h / lo_b] where [lo, hi] is each side's distribution-free
           (order-statistic, exact binomial) CI of its median at 1 - (1 - conf) / 2, so the
           ratio's interval covers the true ratio with probability >= conf (Bonferroni).
  SLOWER   CI entirely above 1 and ratio > 1 + min_effect
  FASTER   CI entirely below 1 and ratio < 1 - min_effect
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
"""
from __future__ import annotations

from .stats import median_ci_ranks, quantile
from .summary import same_value

SCHEMA = 1
SAME, FASTER, SLOWER, UNSURE = "SAME", "FASTER", "SLOWER", "UNSURE"
VERDICTS = (SAME, FASTER, SLOWER, UNSURE)
OURS, BASE = "evpack", "base"  # impl of the head's rows / of the base's rows in the run
AB_FILE = "ab.json"
BASE_SAMPLES_FILE = "ab_samples.csv.gz"
RULE = {
    "name": "median-ratio-ci",
    "test": "ratio of medians head/base; distribution-free order-statistic CI of each median at "
            "1-(1-conf)/2, combined as [lo_h/hi_b, hi_h/lo_b] (joint coverage >= conf)",
    "conf": 0.99,
    "min_effect": 0.02,
    "min_n": 10,
    "slower": "CI lo > 1 and ratio > 1 + min_effect",
    "faster": "CI hi < 1 and ratio < 1 - min_effect",
    "same": "1 - min_effect <= CI lo and CI hi <= 1 + min_effect",
}
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


def verdict(head: list[float], base: list[float], rule: dict = RULE) -> tuple[str, str, dict]:
    """(verdict, reason, numbers) for two same-run sample lists of one row."""
    if len(head) < rule["min_n"] or len(base) < rule["min_n"]:
        return UNSURE, f"too few samples (head {len(head)}, base {len(base)}; need {rule['min_n']})", {}
    if min(head) <= 0 or min(base) <= 0:
        return UNSURE, "non-positive sample time", {}
    r, lo, hi = ratio_interval(head, base, rule["conf"])
    eff = rule["min_effect"]
    nums = {"ratio": r, "ci_lo": lo, "ci_hi": hi}
    if lo > 1.0 and r > 1.0 + eff:
        return SLOWER, f"head {r - 1:+.1%} (CI {lo - 1:+.1%}..{hi - 1:+.1%})", nums
    if hi < 1.0 and r < 1.0 - eff:
        return FASTER, f"head {r - 1:+.1%} (CI {lo - 1:+.1%}..{hi - 1:+.1%})", nums
    if lo >= 1.0 - eff and hi <= 1.0 + eff:
        return SAME, f"within {eff:.0%} (CI {lo - 1:+.1%}..{hi - 1:+.1%})", nums
    return UNSURE, f"CI {lo - 1:+.1%}..{hi - 1:+.1%} neither inside +-{eff:.0%} nor clear of 1", nums


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


def row_status(row: dict) -> str:
    """A row's status with the post-timing re-check re-derived from its recorded error and bound."""
    if row.get("status") not in ("ok", "fail"):
        return str(row.get("status"))
    err, bound = row.get("max_abs_err"), row.get("err_bound")
    return "ok" if err is not None and bound is not None and err <= bound else "fail"


def _not_timed(row: dict, times: list[float] | None) -> str:
    """Why one side cannot be compared ('' when it can)."""
    if row_status(row) != "ok":
        why = str(row.get("reason") or "")[:160]
        return row_status(row) + (f": {why}" if why else "")
    if not times:
        return "no samples"
    return ""


def compare_sides(head_rows: list[dict], head_samples: dict[str, list[float]], base_rows: list[dict],
                  base_samples: dict[str, list[float]], rule: dict = RULE) -> dict:
    """Join the head's rows of ours with the base's rows; one entry per row on both sides.

    Rows on one side only are listed under new (head only) / removed (base only), never compared.
    """
    heads = {r["key"]: r for r in head_rows if r["impl"] == OURS and r.get("status") != "unsupported"}
    bases = {head_key(r["key"]): r for r in base_rows}
    entries = []
    for key in sorted(set(heads) & set(bases)):
        h, b = heads[key], bases[key]
        hs, bs = head_samples.get(key), base_samples.get(base_key(key))
        e = {"key": key, "variant": h["variant"], "config": h["config"], "shape": h["shape"], "mode": h["mode"],
             "head": side_stats(hs if row_status(h) == "ok" else None),
             "base": side_stats(bs if row_status(b) == "ok" else None)}
        why = [f"{side} {w}" for side, w in (("head", _not_timed(h, hs)), ("base", _not_timed(b, bs))) if w]
        if why:
            e.update(ratio=None, ci_lo=None, ci_hi=None, verdict=UNSURE, reason="; ".join(why))
        else:
            v, reason, nums = verdict(hs, bs, rule)
            e.update(ratio=nums.get("ratio"), ci_lo=nums.get("ci_lo"), ci_hi=nums.get("ci_hi"), verdict=v,
                     reason=reason)
        entries.append(e)

    def listing(keys, rows):
        return [{"key": k, "variant": rows[k]["variant"], "config": rows[k]["config"], "shape": rows[k]["shape"],
                 "mode": rows[k]["mode"], "status": row_status(rows[k])} for k in sorted(keys)]

    counts = {v: sum(1 for e in entries if e["verdict"] == v) for v in VERDICTS}
    return {"rows": entries, "new": listing(set(heads) - set(bases), heads),
            "removed": listing(set(bases) - set(heads), bases), "counts": counts,
            "regressions": [e["key"] for e in entries if e["verdict"] == SLOWER]}


def build_ab(meta: dict, head_rows: list[dict], head_samples: dict[str, list[float]],
             base_records: list[dict], base_samples: dict[str, list[float]], rule: dict = RULE) -> dict:
    """ab.json: meta (commits, binaries, build) + the rule + the comparison (when the base was timed).

    meta["status"] is "pass" (both sides timed) or "error"/"skipped" with meta["reason"]; only
    "pass" carries rows. The derived fields are a pure function of the arguments.
    """
    out = {"schema": SCHEMA, **meta, "rule": dict(rule), "base_records": base_records}
    if meta.get("status") != "pass":
        out.update(rows=[], new=[], removed=[], counts={v: 0 for v in VERDICTS}, regressions=[])
        return out
    out.update(compare_sides(head_rows, head_samples, base_records, base_samples, rule))
    return out


DERIVED_KEYS = ("rows", "new", "removed", "counts", "regressions")


def merge(parts: list[dict]) -> dict:
    """One A/B over several GPUs' ab.json (a sharded benchmark: each shape measured whole on one GPU, both
    sides on the same GPU). Meta from the first part; `pass` only when every part passed; rows, new/removed
    rows, counts and regressions are the parts' together. One part: returned as it is."""
    if len(parts) == 1:
        return parts[0]
    out = dict(parts[0])
    failed = [p for p in parts if p.get("status") != "pass"]
    if failed:
        out.update(status=failed[0].get("status"), reason="; ".join(str(p.get("reason")) for p in failed))
    for key in ("rows", "new", "removed", "regressions", "base_records"):
        out[key] = [x for p in parts for x in p.get(key) or []]
    out["counts"] = {v: sum((p.get("counts") or {}).get(v, 0) for p in parts) for v in VERDICTS}
    return out


def differences(written: dict, recomputed: dict) -> list[str]:
    """Where a written ab.json disagrees with the one re-derived from the samples."""
    diffs = [k for k in ("rule",) if not same_value(written.get(k), recomputed.get(k))]
    w_rows = {e.get("key"): e for e in written.get("rows", []) if isinstance(e, dict)}
    for e in recomputed["rows"]:
        w = w_rows.pop(e["key"], None)
        if w is None:
            diffs.append(f"{e['key']}: missing from ab.json")
        elif not same_value(w, e):
            bad = sorted(k for k in set(w) | set(e) if not same_value(w.get(k), e.get(k)))
            diffs.append(f"{e['key']}: {', '.join(bad)}")
    diffs += [f"{k}: in ab.json but not derivable from the samples" for k in w_rows]
    diffs += [k for k in DERIVED_KEYS[1:] if not same_value(written.get(k), recomputed.get(k))]
    return diffs


def summary_line(ab: dict) -> str:
    """One line for the performance gate's reason."""
    base = (ab.get("base_commit") or "?")[:12]
    if ab.get("status") != "pass":
        return f"A/B vs {base}: {ab.get('status')} ({str(ab.get('reason', ''))[:160]})"
    c = ab["counts"]
    parts = [f"{c[v]} {v}" for v in VERDICTS if c.get(v)]
    extra = [f"{len(ab[k])} {k}" for k in ("new", "removed") if ab.get(k)]
    return f"A/B vs {base}: {len(ab['rows'])} rows, " + ", ".join(parts + extra)


def same_rate(ab: dict) -> float | None:
    """Share of compared rows judged SAME (the self-check's figure of merit)."""
    rows = ab.get("rows") or []
    return sum(1 for e in rows if e["verdict"] == SAME) / len(rows) if rows else None


# -- Markdown ---------------------------------------------------------------------------------
_ORDER = {SLOWER: 0, FASTER: 1, UNSURE: 2, SAME: 3}


def _us(side: dict) -> str:
    if side.get("median_us") is None:
        return "-"
    return f"{side['median_us']:.2f} ± {side['iqr_us']:.2f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x - 1:+.1%}"


def _row_md(e: dict) -> str:
    ci = "-" if e.get("ci_lo") is None else f"{_pct(e['ci_lo'])}..{_pct(e['ci_hi'])}"
    why = f" ({e['reason'].replace('|', '/')[:120]})" if e["verdict"] == UNSURE and e.get("reason") else ""
    return (f"| {e['variant']}/{e['config']} | {e['shape']} | {e['mode']} | {_us(e['base'])} | {_us(e['head'])} | "
            f"{_pct(e.get('ratio'))} | {ci} | **{e['verdict']}**{why} |")


def render_markdown(ab: dict, *, all_rows: bool = True) -> str:
    """The A/B section (report.md, PR comment): headline, rule, rows that are not SAME, new/removed.

    all_rows adds every compared row in a collapsed <details> block. Goes first among the
    benchmark sections: it is the only same-run comparison with the PR's base.
    """
    base = f"`{ab.get('base_ref')}` ({str(ab.get('base_commit'))[:12]})"
    head = f"{str(ab.get('head_commit'))[:12]}" + (" with uncommitted changes" if ab.get("head_dirty") else "")
    title = "self-check: HEAD against itself" if ab.get("self_check") else f"head {head} against base {base}"
    out = [f"### A/B in one run: {title}", ""]
    if ab.get("status") != "pass":
        out += [f"**A/B {ab.get('status')}**: {ab.get('reason')}. The head's benchmark above is unaffected; "
                "no row was compared.", ""]
        return "\n".join(out)
    r = ab["rule"]
    out += [summary_line(ab).split(": ", 1)[1] + (f"; SAME rate {same_rate(ab):.1%}" if ab["rows"] else "")
            + f". Binaries: base `{str(ab.get('base_so_sha256'))[:12]}`, head `{str(ab.get('head_so_sha256'))[:12]}`.",
            "",
            f"Rule: time ratio = median(head) / median(base), CI = order-statistic CIs of both medians "
            f"(joint >= {r['conf']:.0%}); SLOWER / FASTER when the CI excludes 1 and the ratio is beyond "
            f"±{r['min_effect']:.0%}, SAME when the CI lies inside ±{r['min_effect']:.0%}, else UNSURE "
            f"(or fewer than {r['min_n']} samples).", ""]
    head_md = ["| kernel | shape | mode | base µs (± IQR) | head µs (± IQR) | Δ time | CI | verdict |",
               "|---|---|---|---|---|---|---|---|"]
    notable = sorted((e for e in ab["rows"] if e["verdict"] != SAME), key=lambda e: (_ORDER[e["verdict"]], e["key"]))
    if notable:
        out += head_md + [_row_md(e) for e in notable] + [""]
    else:
        out += ["Every compared row is SAME.", ""]
    for what, label in (("new", "New on the head (not compared)"), ("removed", "Removed from the base (not compared)")):
        if ab.get(what):
            keys = sorted({f"{e['variant']}/{e['config']}" for e in ab[what]})
            out += [f"{label}, {len(ab[what])} rows: {', '.join(keys)}.", ""]
    if all_rows and ab["rows"]:
        out += ["<details><summary>All compared rows</summary>", ""] + head_md
        out += [_row_md(e) for e in sorted(ab["rows"], key=lambda e: e["key"])] + ["", "</details>", ""]
    return "\n".join(out)
