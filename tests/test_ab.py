"""A/B against a base commit (--baseline REF): the verdict rule, its false-positive rate, ab.json,
REF validation, the worktree + build of a base, loading two copies of an extension, CLI errors."""
from __future__ import annotations

import itertools
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import reference
from conftest import REPO, TESTS, run_cli

from evpack.reporting import ab_section
from evpack.reporting.blocks import to_markdown
from evpack.stages import bench as bench_stage
from evpack.timing import ab, ab_stage, baseline_build
from evpack.timing.summary import read_samples, read_summary, records_of, samples_file

# the full-suite reference packs: the real per-call samples the rule is checked on
REF_PACKS = [p.path for p in reference.ALL if p.suite == "full"]
SHAPE = "B=16,H=16,S=512,D=64,dtype=fp16,causal=0"


# -- the rule ---------------------------------------------------------------------------------
def _timings(rng: random.Random, n: int, median: float, rel_sd: float, shift: float = 0.0) -> list[float]:
    """GPU-like times: a normal body, a 3% right tail (stalls), quantized to the events' 32 ns."""
    out = []
    for _ in range(n):
        t = median * (1 + shift) * (1 + rel_sd * rng.gauss(0, 1))
        if rng.random() < 0.03:
            t += median * rng.uniform(0, 0.1)
        out.append(max(0.032, round(t / 0.032) * 0.032))
    return out


def _synthetic_suite(seed: int, shift: float = 0.0, rows: int = 672):
    rng = random.Random(seed)
    pairs = []
    for _ in range(rows):
        n = rng.choice((30, 37, 120, 600, 2000))
        med = rng.choice((8.7, 11.0, 49.0, 67.0, 125.0, 925.0))
        sd = rng.choice((0.002, 0.004, 0.007))
        pairs.append((_timings(rng, n, med, sd, shift), _timings(rng, n, med, sd)))
    return pairs


def _tally(pairs) -> dict[str, int]:
    counts = dict.fromkeys(ab.VERDICTS, 0)
    for h, b in pairs:
        counts[ab.verdict(h, b)[0]] += 1
    return counts


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_self_ab_on_synthetic_same_distribution_samples(seed):
    counts = _tally(_synthetic_suite(seed))
    assert counts[ab.SLOWER] == 0 and counts[ab.FASTER] == 0, counts
    assert counts[ab.SAME] / 672 >= 0.95, counts


def test_rule_detects_a_real_shift_and_ignores_a_small_one():
    slower = _tally(_synthetic_suite(7, shift=0.05, rows=200))
    assert slower[ab.SLOWER] >= 190 and slower[ab.FASTER] == 0 and slower[ab.SAME] == 0, slower
    faster = _tally(_synthetic_suite(8, shift=-0.05, rows=200))
    assert faster[ab.FASTER] >= 190 and faster[ab.SLOWER] == 0, faster
    small = _tally(_synthetic_suite(9, shift=0.01, rows=200))  # below min_effect: never a verdict
    assert small[ab.SLOWER] == 0 and small[ab.FASTER] == 0, small


def test_verdict_edges():
    base = [100.0 + 0.1 * (i % 7) for i in range(50)]
    v, why, nums = ab.verdict([t * 1.10 for t in base], base)
    assert v == ab.SLOWER and nums.ci_lo > 1 and nums.ratio == pytest.approx(1.10) and "+10.0%" in why
    v, _, nums = ab.verdict([t * 0.90 for t in base], base)
    assert v == ab.FASTER and nums.ci_hi < 1
    assert ab.verdict(list(base), base)[0] == ab.SAME
    assert ab.verdict(base[:5], base)[0] == ab.UNSURE  # fewer than min_n
    wide = [50.0, 150.0] * 10  # CI far wider than +-2%
    assert ab.verdict(wide, wide)[0] == ab.UNSURE
    # the interval covers the point estimate and is the Bonferroni combination of the two medians
    r, lo, hi = ab.ratio_interval(base, base, 0.99)
    assert lo <= r <= hi and r == 1.0


def _chunks(xs: list[float], k: int) -> tuple[list[float], list[float]]:
    """Alternate blocks of k consecutive samples: a same-run A/B of one build against itself."""
    a, b = [], []
    for i in range(0, len(xs), k):
        (a if (i // k) % 2 == 0 else b).extend(xs[i:i + k])
    return a, b


@pytest.mark.skipif(not REF_PACKS, reason="no committed reference pack")
@pytest.mark.parametrize("pack", REF_PACKS, ids=lambda p: p.name)
def test_self_ab_on_real_samples_of_the_reference_packs(pack):
    """Real per-call timings (H200, full suite): each row's samples, split into alternating blocks of 8
    consecutive calls (batches interleave like that), are two same-run samples of one binary.

    Each half has half the samples a real A/B side has: most rows stop at 30-38 samples, so their
    halves hold 15-19 and their CIs are wider than a real side's. Measured when written: 638 and
    648 of 672 SAME (94.9%, 96.4%), 0 FASTER/SLOWER; on the rows whose halves hold >= 30 samples
    (a real side's minimum) 253/260 and 252/259 (97.3%).

    No row may read FASTER or SLOWER. SAME is counted on the rows whose halves both hold a real side's
    minimum of 30 samples: the halves of rows stopped early by the median-CI rule are narrower than any
    real side, and over the whole suite they drift with the session (all rows: 91.5%, 90.4%, 89.8% SAME in
    the full packs of cf8515a, 27d59b6 and 363ed1b; rows with halves >= 30: 91.2%, 92.6%, 92.7%)."""
    from evpack.timing.shards import shard_dirs

    samples = {}
    for folder in shard_dirs(pack / "bench"):  # a benchmark sharded over GPUs keeps samples per shard
        samples.update(read_samples(samples_file(folder)))  # .csv.gz or .csv.xz, as the pack stores it
    timed = sum(1 for r in read_summary(pack / "bench")["rows"] if r["median_us"])
    assert len(samples) == timed >= 672
    halves = [_chunks(v, 8) for v in samples.values()]
    counts = _tally(halves)
    assert counts[ab.SLOWER] == 0 and counts[ab.FASTER] == 0, counts
    full = _tally(h for h in halves if min(len(h[0]), len(h[1])) >= 30)  # halves as large as a real side
    n_full = sum(full.values())
    assert n_full >= 250 and full[ab.SAME] / n_full >= 0.90, full
    rows = read_summary(pack / "bench")["rows"]
    if any(r.get("stop") == "median_ci" for r in rows):
        # rows stopped once their median was known to +-0.5% (target_rel_ci): a half of one is wider than an A/B
        # side, which the bench samples to +-0.25% (target_rel_ci_pair). The pack's own self-check holds real
        # sides, each head row and its base twin timed in the same rounds, judged by the whole rule (FDR and the
        # confirmation round; verify re-derives it: test_reference_packs)
        data = ab_stage.load(pack / "bench")
        assert data["self_check"], "a full-suite pack of the median-CI rule without its self-check"
        counts, n = data["counts"], sum(data["counts"].values())
        # SLOWER (what sets perf-regression) must be confirmed by a second round: never on one commit. FASTER is
        # decided in one round (rule version 2) and sets no label: pack 20261125T121501Z-cf8515ad4e06 read 1 of
        # 560 (triton m64n64w4s3, B=2 H=8 S=512 causal cold, 10.9 us at the 2000-sample cap: -2.0%, CI -2.6%..-1.2%)
        assert n >= 500 and counts[ab.SLOWER] == 0 and counts[ab.FASTER] <= 1, counts
        assert counts[ab.SAME] / n >= 0.95, counts
    else:
        big = [v for v in samples.values() if len(v) >= 60]
        counts = _tally(_chunks(v, 8) for v in big)
        assert counts[ab.SLOWER] == 0 and counts[ab.SAME] / len(big) >= 0.95, counts
    # resampled with replacement at full size (seeded): the idealised independent case
    rng = random.Random(0)
    full = _tally(([rng.choice(v) for _ in v], [rng.choice(v) for _ in v]) for v in samples.values())
    assert full[ab.SLOWER] == 0 and full[ab.SAME] / len(samples) >= 0.98, full


# -- rule version 2 on real same-commit A/B samples --------------------------------------------------
def _ab_pairs(pack: Path) -> dict[str, tuple[list[float], list[float]]]:
    """{head key: (head samples, base samples)} of a pack's A/B: real same-run H200 samples of one binary (the
    first schema-2 pack is a --self-check; the second's base, 342053f, has the same scalar/wmma/mma code)."""
    from evpack.timing.shards import shard_dirs

    out = {}
    for folder in shard_dirs(pack / "bench"):
        heads, bases = read_samples(folder / "samples.csv.gz"), read_samples(samples_file(folder, ab.BASE_SAMPLES))
        for e in json.loads((folder / ab.AB_FILE).read_text())["rows"]:
            out[e["key"]] = (heads[e["key"]], bases[ab.base_key(e["key"])])
    return out


def _decide(first: dict, second: dict, slow_variant: str | None = None, factor: float = 1.05,
            rule: ab.Rule = ab.RULE) -> dict:
    """The rule (default: the current one) over real samples: `first` is the run's round, `second` supplies the
    confirmation round of the rows it asks for (a later same-run measurement of the same rows); rows of
    `slow_variant` get their head side scaled by `factor` in both rounds (a planted change of that variant)."""
    def plant(pairs):
        return {k: ([t * factor for t in h] if k.split("|")[1] == slow_variant else h, b)
                for k, (h, b) in pairs.items()}

    first, second = plant(first), plant(second)
    rows = [_rec("evpack", k.split("|")[1], k.split("|")[2], mode=k.split("|")[4], shape=k.split("|")[3])
            for k in first]
    heads = {k: h for k, (h, _) in first.items()}
    bases = {ab.base_key(k): b for k, (_, b) in first.items()}
    base_rows = [dict(r, impl=ab.BASE, key=ab.base_key(r["key"])) for r in rows]
    keys = sorted(ab.candidate_verdicts(rows, heads, base_rows, bases, rule))
    confirm = ab.ConfirmSamples(head={k: second[k][0] for k in keys}, base={ab.base_key(k): second[k][1] for k in keys})
    return ab.build_ab(_meta(), rows, heads, base_rows, bases, rule=rule, confirm=confirm)


def _planted_slowdown_reads_slower(a: dict, b: dict, variant: str) -> None:
    """Every row of `variant`, head side x 1.05 in both rounds, is SLOWER; no row of another variant is."""
    out = _decide(a, b, slow_variant=variant)
    mine = [e for e in out["rows"] if e["variant"] == variant]
    assert mine and all(e["verdict"] == ab.SLOWER for e in mine), \
        [(e["key"], e["reason"]) for e in mine if e["verdict"] != ab.SLOWER][:3]
    assert all(e["verdict"] != ab.SLOWER for e in out["rows"] if e["variant"] != variant)
    assert sorted(out["regressions"]) == sorted(e["key"] for e in mine)


# Three quick-suite --self-check packs of one commit, made one after the other on one H200 (2026-11-24): each
# row's head and base samples and the pack's ab.json rows (tests/fixtures/ab_selfcheck, extract.py there).
SELFCHECK = sorted((TESTS / "fixtures" / "ab_selfcheck").glob("*.json.xz"))


def _selfcheck(path: Path) -> dict:
    import lzma

    data = json.loads(lzma.decompress(path.read_bytes()))

    def times(deltas: list[int]) -> list[float]:
        out, acc = [], 0
        for d in deltas:
            acc += d
            out.append(acc / data["scale"])
        return out

    data["pairs"] = {k: (times(s["head"]), times(s["base"])) for k, s in data["samples"].items()}
    return data


@pytest.fixture(scope="module")
def selfcheck() -> list[dict]:
    assert len(SELFCHECK) == 3, f"tests/fixtures/ab_selfcheck holds {len(SELFCHECK)} packs' samples, not 3"
    return [_selfcheck(p) for p in SELFCHECK]


def test_selfcheck_fixture_re_derives_each_packs_ab_json(selfcheck):
    """The fixture is what the packs measured: rule version 2 over its samples gives back every ab.json row as
    the pack wrote it (statistics, intervals, p-values, verdicts, reasons), and its counts."""
    for pack in selfcheck:
        assert pack["ab"]["self_check"] is True and pack["ab"]["rule_version"] == 2 and pack["ab"]["confirm_keys"] == []
        out = _decide(pack["pairs"], pack["pairs"], rule=ab.RULES[2])
        assert out["rows"] == pack["rows"], pack["source_pack"]
        assert out["counts"] == pack["ab"]["counts"] and out["confirm_keys"] == []
        assert {e["variant"] for e in out["rows"]} == {"scalar", "wmma", "mma", "wgmma"}


def _selfcheck_variants(selfcheck: list[dict]) -> list[str]:
    return sorted({k.split("|")[1] for pack in selfcheck for k in pack["pairs"]})


def test_identical_commit_is_never_a_regression_on_real_selfcheck_samples(selfcheck):
    """Each pack's round, confirmed (where rule version 2 asks) by another pack's measurement of the same rows:
    0 SLOWER, 0 FASTER in all six (round, confirmation) pairs; then head and base from different runs."""
    keys = set(selfcheck[0]["pairs"])
    assert all(set(p["pairs"]) == keys for p in selfcheck) and len(keys) == 192
    for first, second in itertools.permutations(selfcheck, 2):
        out = _decide(first["pairs"], second["pairs"])
        assert out["counts"][ab.SLOWER] == 0 and out["counts"][ab.FASTER] == 0, out["counts"]
        assert out["counts"][ab.SAME] >= 0.98 * len(keys) and out["confirm_keys"] == [], out["counts"]
    # head of one run, base of another, confirmed by the third: the run-to-run shift is never a regression, and
    # (rule version 3) never a speedup; version 2, which took FASTER from one round, read one false FASTER here
    faster_v2 = 0
    for x, y, z in itertools.permutations(selfcheck, 3):
        cross = {k: (x["pairs"][k][0], y["pairs"][k][1]) for k in keys}
        out = _decide(cross, z["pairs"])
        assert out["counts"][ab.SLOWER] == 0 and out["counts"][ab.FASTER] == 0, \
            (x["source_pack"], y["source_pack"], out["counts"])
        faster_v2 += _decide(cross, z["pairs"], rule=ab.RULES[2])["counts"][ab.FASTER]
    assert faster_v2 == 1


@pytest.mark.parametrize("variant", ["scalar", "wgmma"])
def test_a_planted_5_percent_speedup_reads_faster_on_real_selfcheck_samples(selfcheck, variant):
    """Rule version 3 confirms a FASTER row as it does a SLOWER one; a real 5% speedup (head x 0.95 in both
    rounds) still reads FASTER on every row of its variant, and on no row of another."""
    for first, second in itertools.permutations(selfcheck, 2):
        out = _decide(first["pairs"], second["pairs"], slow_variant=variant, factor=0.95)
        mine = [e for e in out["rows"] if e["variant"] == variant]
        assert mine and all(e["verdict"] == ab.FASTER and "confirmed" in e["reason"] for e in mine), \
            [(e["key"], e["reason"]) for e in mine if e["verdict"] != ab.FASTER][:3]
        assert all(e["verdict"] != ab.FASTER for e in out["rows"] if e["variant"] != variant)
        assert {e["key"] for e in mine} <= set(out["confirm_keys"])  # each one confirmed in a second round


@pytest.mark.parametrize("variant", ["scalar", "wmma", "mma", "wgmma"])
def test_a_planted_5_percent_slowdown_reads_slower_on_real_selfcheck_samples(selfcheck, variant):
    assert variant in _selfcheck_variants(selfcheck)
    for first, second in itertools.permutations(selfcheck, 2):
        _planted_slowdown_reads_slower(first["pairs"], second["pairs"], variant)
    # every row of every variant, head side x 1.05 (the "B side scaled by 1.05")
    a, b = selfcheck[0]["pairs"], selfcheck[1]["pairs"]
    slow = {k: ([t * 1.05 for t in h], s) for k, (h, s) in a.items()}
    again = {k: ([t * 1.05 for t in h], s) for k, (h, s) in b.items()}
    assert _decide(slow, again)["counts"][ab.SLOWER] == len(a)


def test_every_variant_of_the_selfcheck_fixture_is_planted(selfcheck):
    """The planted-slowdown test above names every evpack variant the fixture holds."""
    assert _selfcheck_variants(selfcheck) == ["mma", "scalar", "wgmma", "wmma"]


# the same on the two schema-2 packs of one commit (kept while they are in the tree)
AB_PACKS = reference.SAME_COMMIT_AB
_NO_AB_PACKS = "needs two reference packs of one commit with an A/B over the same rows (the schema-2 packs)"


@pytest.mark.skipif(len(AB_PACKS) < 2, reason=_NO_AB_PACKS)
def test_identical_commit_is_never_a_regression_on_real_samples():
    a, b = (_ab_pairs(p) for p in AB_PACKS[:2])
    assert len(a) == len(b) == 392 and set(a) == set(b)
    for first, second in ((a, b), (b, a)):
        out = _decide(first, second)
        assert out["counts"][ab.SLOWER] == 0 and out["counts"][ab.FASTER] == 0, out["counts"]
        assert out["counts"][ab.SAME] >= 0.98 * 392 and out["confirm_keys"] == []
    # the hard case: head and base from runs 40 minutes apart (run-to-run shifts up to 2.6%, which the
    # per-row rule calls SLOWER on 7 rows); a same-run confirmation round calls none of them SLOWER
    cross = {k: (a[k][0], b[k][1]) for k in a}
    assert sum(ab.verdict(h, s)[0] == ab.SLOWER for h, s in cross.values()) == 7
    out = _decide(cross, a)
    assert out["counts"][ab.SLOWER] == 0 and len(out["confirm_keys"]) == 2, out["counts"]
    assert all("not confirmed" in e["reason"] for e in out["rows"] if e["key"] in out["confirm_keys"])


@pytest.mark.skipif(len(AB_PACKS) < 2, reason=_NO_AB_PACKS)
@pytest.mark.parametrize("variant", ["mma", "wmma", "scalar"])
def test_a_planted_5_percent_slowdown_reads_slower_on_every_row_of_its_variant(variant):
    a, b = (_ab_pairs(p) for p in AB_PACKS[:2])
    for first, second in ((a, b), (b, a)):
        _planted_slowdown_reads_slower(first, second, variant)
    # every row of every variant, head side x 1.05 (the "B side scaled by 1.05")
    out = _decide(a, b, slow_variant=None)
    assert out["counts"][ab.SLOWER] == 0
    everything = {k: ([t * 1.05 for t in h], s) for k, (h, s) in a.items()}
    again = {k: ([t * 1.05 for t in h], s) for k, (h, s) in b.items()}
    assert _decide(everything, again)["counts"][ab.SLOWER] == 392


# -- ab.json ------------------------------------------------------------------------------------
def _rec(impl, variant, config, mode="cold", status="ok", err=1e-3, bound=2e-3, shape=SHAPE):
    key = f"{impl}|{variant}|{config}|{shape}|{mode}"
    return {"key": key, "impl": impl, "variant": variant, "config": config, "shape": shape, "mode": mode,
            "status": status, "reason": "" if status == "ok" else f"{status} reason", "max_abs_err": err,
            "err_bound": bound, "must_run": True}


def _meta(status="pass"):
    return {"status": status, "reason": "" if status == "pass" else "base build exited 1: boom",
            "base_ref": "origin/main", "base_commit": "b" * 40, "head_commit": "h" * 40, "head_dirty": False,
            "self_check": False, "base_so_sha256": "1" * 64, "head_so_sha256": "2" * 64, "base_build": None}


def _standin():
    """Head rows, base records and samples: same, slower, wrong-after-timing, new, removed, SDPA."""
    rng = random.Random(5)
    heads = [_rec("evpack", "mma", "same"), _rec("evpack", "mma", "slow"), _rec("evpack", "mma", "wrong"),
             _rec("evpack", "mma", "newcfg"), _rec("sdpa", "default", ""),
             _rec("evpack", "wmma", "unsup", status="unsupported")]
    bases = [_rec("base", "mma", "same"), _rec("base", "mma", "slow"),
             _rec("base", "mma", "wrong", err=5e-3),  # recorded ok, but its error is above the bound: fail
             _rec("base", "mma", "gone")]
    hs = {r["key"]: _timings(rng, 100, 60.0, 0.004) for r in heads if r["status"] == "ok"}
    hs["evpack|mma|slow|" + SHAPE + "|cold"] = _timings(rng, 100, 60.0, 0.004, shift=0.08)
    bs = {r["key"]: _timings(rng, 100, 60.0, 0.004) for r in bases}
    return heads, hs, bases, bs


SLOW_KEY = "evpack|mma|slow|" + SHAPE + "|cold"


def _confirm_of(keys, shift=0.08, seed=6):
    """A confirmation round for `keys`: fresh samples, the head `shift` slower (as in the first round)."""
    rng = random.Random(seed)
    return ab.ConfirmSamples(head={k: _timings(rng, 100, 60.0, 0.004, shift=shift) for k in keys},
                             base={ab.base_key(k): _timings(rng, 100, 60.0, 0.004) for k in keys})


def test_build_ab_joins_rows_and_lists_one_sided_ones():
    heads, hs, bases, bs = _standin()
    assert sorted(ab.candidate_verdicts(heads, hs, bases, bs)) == [SLOW_KEY]  # the one row a confirmation round re-times
    out = ab.build_ab(_meta(), heads, hs, bases, bs, confirm=_confirm_of([SLOW_KEY]))
    by = {e["config"]: e for e in out["rows"]}
    assert set(by) == {"same", "slow", "wrong"}  # SDPA rows and unsupported rows are never compared
    assert by["same"]["verdict"] == ab.SAME and by["slow"]["verdict"] == ab.SLOWER
    assert by["slow"]["confirm"]["ratio"] > 1.05 and "confirmed" in by["slow"]["reason"]
    assert by["slow"]["p_slower"] < 1e-10 and by["same"]["p_slower"] > 0.5
    assert by["wrong"]["verdict"] == ab.UNSURE and by["wrong"]["reason"].startswith("base fail")
    assert by["wrong"]["base"]["median_us"] is None and by["wrong"]["head"]["n"] == 100
    assert [e["config"] for e in out["new"]] == ["newcfg"] and [e["config"] for e in out["removed"]] == ["gone"]
    assert out["regressions"] == [SLOW_KEY] and out["confirm_keys"] == [SLOW_KEY]
    assert out["counts"] == {"SAME": 1, "FASTER": 0, "SLOWER": 1, "UNSURE": 1}
    assert out["rule"] == ab.RULE.to_json() and out["rule_version"] == ab.RULE_VERSION == 3
    assert out["base_commit"] == "b" * 40
    json.dumps(out)  # JSON-serialisable as written
    md = to_markdown(ab_section.ab_blocks(out))
    assert md.index("SLOWER") < md.index("UNSURE") and "mma/newcfg" in md and "mma/gone" in md
    assert "| UNSURE | base fail" in md and "| `mma/slow` |" in md and "+8." in md
    assert "Benjamini-Hochberg" in md and "1 re-timed" in md
    assert "3 rows, 1 SAME, 1 SLOWER, 1 UNSURE, 1 new, 1 removed" in ab.summary_line(out)


def test_a_slower_row_needs_its_confirmation_round():
    heads, hs, bases, bs = _standin()
    none = {e["config"]: e for e in ab.build_ab(_meta(), heads, hs, bases, bs)["rows"]}
    assert none["slow"]["verdict"] == ab.UNSURE and "no confirmation round" in none["slow"]["reason"]
    # the second round does not show the slowdown (a slow GPU state during the first): never SLOWER
    gone = ab.build_ab(_meta(), heads, hs, bases, bs, confirm=_confirm_of([SLOW_KEY], shift=0.0))
    e = next(e for e in gone["rows"] if e["config"] == "slow")
    assert e["verdict"] == ab.UNSURE and "not confirmed" in e["reason"] and gone["regressions"] == []
    # a second round that is too short confirms nothing either
    short = ab.ConfirmSamples(head={SLOW_KEY: [61.0] * 5}, base={ab.base_key(SLOW_KEY): [60.0] * 5})
    e = next(e for e in ab.build_ab(_meta(), heads, hs, bases, bs, confirm=short)["rows"] if e["config"] == "slow")
    assert e["verdict"] == ab.UNSURE and "too few samples" in e["reason"]


FAST_KEY = "evpack|mma|fast|" + SHAPE + "|cold"


def _standin_fast():
    """_standin with one more row of ours that the head runs 8% faster than the base."""
    heads, hs, bases, bs = _standin()
    rng = random.Random(8)
    heads, bases = heads + [_rec("evpack", "mma", "fast")], bases + [_rec("base", "mma", "fast")]
    hs[FAST_KEY] = _timings(rng, 100, 60.0, 0.004, shift=-0.08)
    bs[ab.base_key(FAST_KEY)] = _timings(rng, 100, 60.0, 0.004)
    return heads, hs, bases, bs


def test_a_faster_row_needs_its_confirmation_round():
    """Rule version 3: a FASTER row is re-timed and confirmed as a SLOWER one is; without a round that shows the
    speedup again it reads UNSURE, never FASTER."""
    heads, hs, bases, bs = _standin_fast()
    assert sorted(ab.candidate_verdicts(heads, hs, bases, bs)) == sorted([FAST_KEY, SLOW_KEY])
    assert sorted(ab.candidate_verdicts(heads, hs, bases, bs, ab.RULES[2])) == [SLOW_KEY]  # version 2 re-timed SLOWER rows only

    def fast_row(confirm):
        out = ab.build_ab(_meta(), heads, hs, bases, bs, confirm=confirm)
        return next(e for e in out["rows"] if e["key"] == FAST_KEY), out

    e, out = fast_row(None)
    assert e["verdict"] == ab.UNSURE and "no confirmation round" in e["reason"] and out["counts"][ab.FASTER] == 0
    rng = random.Random(9)
    gone = ab.ConfirmSamples(head={FAST_KEY: _timings(rng, 100, 60.0, 0.004)},
                             base={ab.base_key(FAST_KEY): _timings(rng, 100, 60.0, 0.004)})
    e, _ = fast_row(gone)
    assert e["verdict"] == ab.UNSURE and "not confirmed" in e["reason"] and "needs CI below 1" in e["reason"]
    again = ab.ConfirmSamples(head={FAST_KEY: _timings(rng, 100, 60.0, 0.004, shift=-0.08)},
                              base={ab.base_key(FAST_KEY): _timings(rng, 100, 60.0, 0.004)})
    e, out = fast_row(again)
    assert e["verdict"] == ab.FASTER
    assert "confirmed: head -" in e["reason"] and e["confirm"]["ratio"] < 0.95 and e["confirm"]["p"] < 1e-10
    assert out["counts"][ab.FASTER] == 1 and out["regressions"] == []
    # a slowdown shown in the round a FASTER row asked for is still no FASTER
    wrong_way = ab.ConfirmSamples(head={FAST_KEY: _timings(rng, 100, 60.0, 0.004, shift=0.08)},
                                  base={ab.base_key(FAST_KEY): _timings(rng, 100, 60.0, 0.004)})
    e, out = fast_row(wrong_way)
    assert e["verdict"] == ab.UNSURE and out["counts"][ab.FASTER] == 0 and out["regressions"] == []


def test_the_confirmation_round_times_every_slower_candidate_before_any_faster_one(monkeypatch):
    """ab_confirm: a change that makes many rows faster (or noisy that way) cannot spend the confirmation budget
    that a regression needs: every shape's SLOWER candidates are timed first, the FASTER ones after them on
    inputs of their own (round_no 1), and a budget spent on the regressions leaves the speedups unconfirmed."""
    from types import SimpleNamespace

    from evpack.timing import ab_confirm

    rng = random.Random(11)
    shapes = [f"B=1,H=1,S={s},D=64,dtype=fp16,causal=0" for s in (64, 128, 256, 512)]
    records, samples = [], {}
    for i, shape in enumerate(shapes):  # the regression is in the last shape; the speedups in every shape
        for config, shift in [("fast", -0.08), ("fast2", -0.08)] + ([("slow", 0.08)] if i == 3 else []):
            h, b = _rec("evpack", "mma", config, shape=shape), _rec("base", "mma", config, shape=shape)
            records += [h, b]
            samples[h["key"]] = _timings(rng, 100, 60.0, 0.004, shift=shift)
            samples[b["key"]] = _timings(rng, 100, 60.0, 0.004)
    calls, clock = [], [0.0]
    monkeypatch.setattr(ab_confirm.time, "perf_counter", lambda: clock[0])

    class Runner:
        base, budget_s, rule = object(), 1e9, SimpleNamespace(time_cap_s=0.1)

        def confirm(self, ss, pairs, cap_s, round_no=0):
            calls.append((ss.shape.key, tuple(c for _, c, _ in pairs), round_no))
            clock[0] += 1.5  # each shape's round takes 1.5 s
            return [], {}

    suite = SimpleNamespace(shapes=[SimpleNamespace(shape=SimpleNamespace(key=k)) for k in shapes])
    ab_confirm.run(Runner(), suite, records, samples)
    assert calls[0] == (shapes[3], ("slow",), 0)  # the regression first, though its shape comes last
    assert [(k, sorted(c), r) for k, c, r in calls[1:]] == [(k, ["fast", "fast2"], 1) for k in shapes]
    # a budget (half of budget_s) that the first shape's round spends: the regression is still confirmed, the
    # speedups are not
    calls.clear()
    Runner.budget_s = 2.0
    ab_confirm.run(Runner(), suite, records, samples)
    assert calls == [(shapes[3], ("slow",), 0)]


def test_version_2_ab_json_keeps_its_one_round_faster(tmp_path):
    """An ab.json made under rule version 2 decided FASTER in one round; it is re-derived that way, so a pack of
    that time keeps verifying, and a file that claims version 3 over version 2's decisions is refused."""
    from evpack.timing.summary import write_samples

    heads, hs, bases, bs = _standin_fast()
    again = _confirm_of([SLOW_KEY])
    old = ab.build_ab(_meta(), heads, hs, bases, bs, rule=ab.RULES[2], confirm=again)
    assert old["rule_version"] == 2 and old["confirm_keys"] == [SLOW_KEY]
    assert next(e for e in old["rows"] if e["key"] == FAST_KEY)["verdict"] == ab.FASTER
    (tmp_path / ab.AB_FILE).write_text(json.dumps(old))
    write_samples(tmp_path / ab.BASE_SAMPLES_FILE, bases, bs)
    write_samples(tmp_path / ab_stage.CONFIRM_SAMPLES_FILE, heads + bases, {**again.head, **again.base})
    derived, problem = ab_stage.derive(tmp_path, heads, hs, "b" * 40)
    assert problem == "" and derived["rows"] == old["rows"] and derived["counts"] == old["counts"]
    for claim in (dict(old, rule_version=3), dict(old, rule_version=3, rule=ab.RULE.to_json())):
        (tmp_path / ab.AB_FILE).write_text(json.dumps(claim))
        _, problem = ab_stage.derive(tmp_path, heads, hs, "b" * 40)
        assert problem, claim["rule_version"]


def test_a_side_whose_timed_content_repeated_is_never_compared():
    """Rows written since issue 25 record how their content was made unique; a side whose calls did not all see
    new content (the A/B base side included) is UNSURE, never a verdict."""
    heads, hs, bases, bs = _standin()
    fields = {"content_uniqueness": "per-call", "calls_per_sample": 1}
    heads = [dict(r, **fields, unique_calls=100) for r in heads]
    bases = [dict(r, **fields, unique_calls=100 if r["config"] != "slow" else 60) for r in bases]
    out = ab.build_ab(_meta(), heads, hs, bases, bs, confirm=_confirm_of([SLOW_KEY]))
    by = {e["config"]: e for e in out["rows"]}
    assert by["same"]["verdict"] == ab.SAME
    assert by["slow"]["verdict"] == ab.UNSURE and "base timed content not unique" in by["slow"]["reason"]
    assert out["regressions"] == [] and out["confirm_keys"] == []
    assert sorted(ab.candidate_verdicts(heads, hs, bases, bs)) == []


def test_version_1_rule_is_kept_for_older_ab_json(tmp_path):
    """An ab.json without rule_version was decided by the per-row rule alone; it is re-derived that way."""
    heads, hs, bases, bs = _standin()
    old = ab.build_ab(_meta(), heads, hs, bases, bs, rule=ab.RULE_V1)
    assert "rule_version" not in old and "confirm_keys" not in old and old["regressions"] == [SLOW_KEY]
    (tmp_path / ab.AB_FILE).write_text(json.dumps(old))
    from evpack.timing.summary import write_samples

    write_samples(tmp_path / ab.BASE_SAMPLES_FILE, bases, bs)
    again, problem = ab_stage.derive(tmp_path, heads, hs, "b" * 40)
    assert problem == "" and again["regressions"] == [SLOW_KEY] and again["rows"] == old["rows"]
    # a file claiming version 1 with version 2's rule, or an edited rule, is refused
    for rule_version, rule in ((None, ab.RULE.to_json()), (2, ab.RULE_V1.to_json()),
                               (2, dict(ab.RULE.to_json(), min_effect=0.5)), (7, ab.RULE.to_json())):
        bad = dict(old, rule=rule) if rule_version is None else dict(old, rule=rule, rule_version=rule_version)
        (tmp_path / ab.AB_FILE).write_text(json.dumps(bad))
        _, problem = ab_stage.derive(tmp_path, heads, hs, "b" * 40)
        assert "rule" in problem, (rule_version, problem)


def test_rank_sum_p_matches_the_exact_distribution_and_bh_the_published_example():
    import itertools
    import math

    # exact one-sided p-value of U for n1 = n2 = 6 (all 924 splits equally likely) vs the normal approximation
    x, y = [5.1, 6.3, 7.2, 8.8, 9.0, 9.4], [4.0, 4.4, 5.0, 6.0, 6.1, 7.7]
    u_obs = sum((a > b) + 0.5 * (a == b) for a in x for b in y)
    pool = x + y
    count = 0
    for pick in itertools.combinations(range(12), 6):
        xs = [pool[i] for i in pick]
        ys = [pool[i] for i in range(12) if i not in pick]
        count += sum((a > b) + 0.5 * (a == b) for a in xs for b in ys) >= u_obs
    exact = count / math.comb(12, 6)
    assert ab.rank_sum_p(x, y) == pytest.approx(exact, abs=0.01)
    assert ab.rank_sum_p(y, x) > 0.95 and ab.rank_sum_p([1.0] * 10, [1.0] * 10) == 1.0
    # Benjamini & Hochberg (1995), section 4: 15 p-values, q = 0.05 rejects the four smallest
    ps = [0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344, 0.0459, 0.3240, 0.4262, 0.5719,
          0.6528, 0.7590, 1.000]
    assert ab.benjamini_hochberg({f"h{i:02d}": p for i, p in enumerate(ps)}, 0.05) == {"h00", "h01", "h02", "h03"}
    assert ab.benjamini_hochberg({}, 0.05) == set()


def test_base_that_never_ran_is_an_ab_error(tmp_path):
    heads, hs, bases, _ = _standin()
    broken = [dict(r, status="error", reason="RuntimeError: forward() got 8 arguments") for r in bases]
    out = ab_stage.write(tmp_path, _meta(), heads, hs, broken, {})
    assert out["status"] == "error" and out["rows"] == [] and "forward() got 8 arguments" in out["reason"]
    assert ab_stage.derive(tmp_path, heads, hs, "b" * 40) == (out, "")


def test_build_ab_error_has_no_rows_and_says_why():
    heads, hs, _, _ = _standin()
    out = ab.build_ab(_meta("error"), heads, hs, [], {})
    assert out["rows"] == [] and out["regressions"] == [] and out["status"] == "error"
    assert "error (base build exited 1: boom)" in ab.summary_line(out)
    assert "A/B error" in to_markdown(ab_section.ab_blocks(out))


def test_ab_files_round_trip_and_tampering_is_found(tmp_path):
    heads, hs, bases, bs = _standin()
    confirm = _confirm_of([SLOW_KEY])
    records = [dict(_rec(impl, "mma", "slow"), key=k) for impl, side in (("evpack", confirm.head), ("base", confirm.base))
               for k in side]
    samples = {**confirm.head, **confirm.base}
    written = ab_stage.write(tmp_path, _meta(), heads, hs, bases, bs, records, samples)
    assert (tmp_path / ab_stage.CONFIRM_SAMPLES_FILE).is_file() and written["regressions"] == [SLOW_KEY]
    again, problem = ab_stage.derive(tmp_path, heads, hs, "b" * 40)
    assert problem == "" and again["rows"] == written["rows"]
    assert to_markdown(ab_section.section(tmp_path)).startswith("### A/B in one run: head `hhhhhhhhhhhh` against base")
    # a verdict edited by hand
    data = json.loads((tmp_path / ab.AB_FILE).read_text())
    data["rows"][1]["verdict"] = ab.SAME
    (tmp_path / ab.AB_FILE).write_text(json.dumps(data))
    _, problem = ab_stage.derive(tmp_path, heads, hs, "b" * 40)
    assert "disagrees with the samples" in problem and "verdict" in problem
    # samples that no longer give the written medians
    ab_stage.write(tmp_path, _meta(), heads, hs, bases, bs, records, samples)
    bs2 = {k: [t * 1.2 for t in v] for k, v in bs.items()}
    from evpack.timing.summary import write_samples

    write_samples(tmp_path / ab.BASE_SAMPLES_FILE, bases, bs2)
    assert "disagrees" in ab_stage.derive(tmp_path, heads, hs, "b" * 40)[1]
    # the confirmation round deleted: the SLOWER row can no longer be derived
    ab_stage.write(tmp_path, _meta(), heads, hs, bases, bs, records, samples)
    (tmp_path / ab_stage.CONFIRM_SAMPLES_FILE).unlink()
    problem = ab_stage.derive(tmp_path, heads, hs, "b" * 40)[1]
    assert "disagrees" in problem and "verdict" in problem
    # confirmation samples for a row that was no candidate
    same_key = "evpack|mma|same|" + SHAPE + "|cold"
    write_samples(tmp_path / ab_stage.CONFIRM_SAMPLES_FILE, records + [dict(_rec("evpack", "mma", "same"))],
                  dict(samples, **{same_key: [60.0] * 30}))
    assert "no candidate" in ab_stage.derive(tmp_path, heads, hs, "b" * 40)[1]
    # a run with a baseline and no ab.json, or ab.json of another base
    (tmp_path / ab.AB_FILE).unlink()
    assert "no ab.json" in ab_stage.derive(tmp_path, heads, hs, "b" * 40)[1]
    assert ab_stage.derive(tmp_path, heads, hs, None) == (None, "")


@pytest.mark.skipif(len(reference.SAME_COMMIT_V1) < 2,
                    reason="needs two schema-1 reference packs of one commit without an A/B")
@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_bench_derive_reads_ab_json(tmp_path, order):
    """The bench stage's derive on a real stage folder: one reference pack is the head, the other's
    rows of ours stand in for the base (two runs of one commit 7 minutes apart, not a same-run A/B:
    the two wmma warm rows that moved between them come out FASTER one way and SLOWER the other by the
    per-row rule; Benjamini-Hochberg keeps one of them as a candidate and, with no confirmation round,
    rule version 2 calls neither SLOWER)."""
    head_pack, base_pack = reference.SAME_COMMIT_V1[order[0]], reference.SAME_COMMIT_V1[order[1]]
    stage = tmp_path / "bench"
    shutil.copytree(head_pack / "bench", stage)
    plain = bench_stage.derive(stage, tmp_path)
    other = json.loads((base_pack / "bench" / "summary.json").read_text())
    base_records = [dict(r, impl=ab.BASE, key=ab.base_key(r["key"])) for r in records_of(other)
                    if r["impl"] == "evpack" and r["status"] != "unsupported"]
    other_samples = read_samples(base_pack / "bench" / "samples.csv.gz")
    base_samples = {ab.base_key(k): v for k, v in other_samples.items() if k.startswith("evpack|")}
    head_rows = json.loads((stage / "summary.json").read_text())["rows"]
    head_samples = read_samples(stage / "samples.csv.gz")
    written = ab_stage.write(stage, _meta(), head_rows, head_samples, base_records, base_samples)
    run = json.loads((stage / "run.json").read_text())
    (stage / "run.json").write_text(json.dumps(dict(run, baseline_commit="b" * 40)))
    out = bench_stage.derive(stage, tmp_path)
    assert out.status == plain.status == "pass"
    assert out.reason == plain.reason + "; " + ab.summary_line(written)
    assert "A/B vs bbbbbbbbbbbb: 392 rows" in out.reason and not written["new"] and not written["removed"]
    assert out.data["ab"]["counts"] == written["counts"] and out.data["ab"]["same_rate"] >= 0.95
    slower = [e["key"] for e in written["rows"] if e["verdict"] == ab.SLOWER]
    assert out.data["regressions"] == slower == written["regressions"] == []
    assert len(written["confirm_keys"]) == (1 if order == (1, 0) else 0), written["counts"]
    assert all("no confirmation round" in e["reason"] for e in written["rows"] if e["key"] in written["confirm_keys"])
    # an A/B that errored leaves the head's outcome alone and sets no regression
    ab_stage.write(stage, _meta("error"), head_rows, head_samples, [], {})
    err = bench_stage.derive(stage, tmp_path)
    assert err.status == "pass" and err.data["ab"]["status"] == "error" and not err.data["regressions"]
    assert "A/B vs bbbbbbbbbbbb: error (base build exited 1: boom)" in err.reason
    # ab.json deleted from a run that had a baseline: the stage cannot be derived
    (stage / ab.AB_FILE).unlink()
    assert bench_stage.derive(stage, tmp_path).status == "error"


# -- REF validation, worktree, build, two copies of an extension ---------------------------------
TINY_C = r"""#include <Python.h>
static PyObject* kernels(PyObject* self, PyObject* args) {
  return Py_BuildValue("[(sssiii)]", "mma", "%s", "fp16", 64, 0, 128);
}
static PyMethodDef methods[] = {{"kernels", kernels, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_C", NULL, -1, methods};
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&mod); }
"""
TINY_SETUP = """from setuptools import Extension, setup
setup(name="tiny", package_dir={"": "python"}, packages=["evpack"],
      ext_modules=[Extension("evpack._C", ["python/evpack/_C.c"])])
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def tiny_repo(tmp_path):
    """A git repo with two commits of a tiny `evpack._C` extension (config c1, then c2)."""
    repo = tmp_path / "repo"
    (repo / "python" / "evpack").mkdir(parents=True)
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    (repo / ".gitignore").write_text("build/\n*.so\n*.egg-info/\n")
    (repo / "setup.py").write_text(TINY_SETUP)
    (repo / "python" / "evpack" / "__init__.py").write_text("")
    for cfg in ("c1", "c2"):
        (repo / "python" / "evpack" / "_C.c").write_text(TINY_C % cfg)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", cfg)
    _git(repo, "tag", "v1", "HEAD~1")
    return repo


def test_validate_ref(tiny_repo, tmp_path):
    head, first = _git(tiny_repo, "rev-parse", "HEAD"), _git(tiny_repo, "rev-parse", "HEAD~1")
    assert baseline_build.validate(tiny_repo, None, False) is None
    spec = baseline_build.validate(tiny_repo, "v1", False)
    assert (spec.ref, spec.commit, spec.head_commit, spec.self_check) == ("v1", first, head, False)
    assert baseline_build.validate(tiny_repo, None, True).commit == head  # --self-check alone: HEAD
    assert baseline_build.validate(tiny_repo, "HEAD", True).commit == head
    for ref, self_check, needle in (("nope", False, "unknown revision"), ("HEAD", False, "needs --self-check"),
                                    (head[:10], False, "needs --self-check"), ("v1", True, "give one or the other"),
                                    ("--all", False, "not a git revision"), ("HEAD~5", False, "unknown revision")):
        with pytest.raises(baseline_build.BaselineError, match=needle):
            baseline_build.validate(tiny_repo, ref, self_check)
    (tmp_path / "plain").mkdir()
    with pytest.raises(baseline_build.BaselineError, match="not one"):
        baseline_build.validate(tmp_path / "plain", "HEAD", False)


def test_worktree_that_cannot_be_created(tiny_repo, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(baseline_build.BaselineError, match="cannot create a worktree folder"):
        baseline_build.create_worktree(tiny_repo, _git(tiny_repo, "rev-parse", "HEAD"), parent=blocker / "sub")
    with pytest.raises(baseline_build.BaselineError, match="cannot create a git worktree"):
        baseline_build.create_worktree(tiny_repo, "0" * 40, parent=tmp_path / "wt")
    assert list((tmp_path / "wt").iterdir()) == []  # nothing left behind


def test_base_archs():
    assert baseline_build.base_archs(None, "90") == "90;90a"  # the Hopper-only variant is compared too
    assert baseline_build.base_archs("80;89;90a", "90") == "90a"
    assert baseline_build.base_archs("80,89", "90") == "80,89"  # not in the head's list: the head's list
    assert baseline_build.base_archs(None, None) == "80;89;90;90a"


def test_worktree_build_and_two_copies_of_the_extension(tiny_repo, tmp_path, monkeypatch):
    """Build the base (c1) in a worktree while the head (c2) is built in the checkout; load both."""
    pytest.importorskip("torch")
    from evpack.timing import ab_runner

    monkeypatch.setenv("EVPACK_AB_DIR", str(tmp_path / "cache"))
    subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tiny_repo, check=True,
                   capture_output=True)
    head_so = next((tiny_repo / "python" / "evpack").glob("_C*.so"))
    spec = baseline_build.validate(tiny_repo, "v1", False)
    with baseline_build.prepared_baseline(tiny_repo, spec, build_now=True, progress=lambda *a: None) as opt:
        wt = Path(opt["worktree"])
        assert wt.is_dir() and tmp_path / "cache" in wt.parents
        assert _git(wt, "rev-parse", "HEAD") == spec.commit
        result = json.loads((Path(opt["build_output"]) / "result.json").read_text())
        assert result["returncode"] == 0 and result["error"] == "" and result["so_path"].startswith(str(wt))
        head = ab_runner.load_extension(head_so, "tiny_head._C")
        stage = tmp_path / "bench"
        side, meta = ab_stage.prepare({"baseline": opt}, stage, "h" * 64, False)
        assert meta["status"] == "pass", meta
        assert side.pairs == [("mma", "c1")] and head.kernels() == [("mma", "c2", "fp16", 64, 0, 128)]
        assert side.sha256 == result["so_sha256"] == meta["base_so_sha256"]
        assert (stage / "ab_build" / "build.log").is_file() and (stage / ab_stage.BINARY_FILE).is_file()
    assert not wt.exists() and str(wt) not in _git(tiny_repo, "worktree", "list")


def test_failed_base_build_is_an_ab_error_with_its_log(tiny_repo, tmp_path):
    (tiny_repo / "python" / "evpack" / "_C.c").write_text("this is not C\n")
    _git(tiny_repo, "commit", "-qam", "broken")
    spec = baseline_build.BaselineSpec("HEAD", _git(tiny_repo, "rev-parse", "HEAD"), "x" * 40, False)
    with baseline_build.prepared_baseline(tiny_repo, spec, build_now=True, progress=lambda *a: None) as opt:
        res = json.loads((Path(opt["build_output"]) / "result.json").read_text())
        assert res["returncode"] not in (0, None) and res["error"].startswith("base build exited")
        side, meta = ab_stage.prepare({"baseline": opt}, tmp_path / "bench", "h" * 64, False)
    assert side is None and meta["status"] == "error" and "bench/ab_build/build.log" in meta["reason"]
    assert "error" in (tmp_path / "bench" / "ab_build" / "build.log").read_text().lower()


def test_a_background_base_build_is_waited_for_by_the_bench(tiny_repo, tmp_path, monkeypatch):
    """background=True: the body runs while the base builds (at low priority); prepare() waits for its end."""
    pytest.importorskip("torch")
    monkeypatch.setenv("EVPACK_AB_DIR", str(tmp_path / "cache"))
    spec = baseline_build.validate(tiny_repo, "v1", False)
    lines = []
    with baseline_build.prepared_baseline(tiny_repo, spec, build_now=True, progress=lines.append,
                                          background=True) as opt:
        ready = Path(opt["ready_file"])
        assert not ready.exists()  # the worktree's build is still running: the body did not wait for it
        side, meta = ab_stage.prepare({"baseline": opt}, tmp_path / "bench", "h" * 64, False)
        assert ready.is_file() and meta["status"] == "pass", meta
        assert side.pairs == [("mma", "c1")]
        log = (Path(opt["build_output"]) / "build.log").read_text()
    assert "in the background" in lines[0] and lines[-1].startswith("baseline build: ok")
    assert log.startswith("# ") and f"nice -n {baseline_build.NICE}" in log.splitlines()[0]


def test_a_background_base_build_still_running_when_the_run_ends_is_stopped(tiny_repo, tmp_path, monkeypatch):
    (tiny_repo / "setup.py").write_text("import time\ntime.sleep(120)\n")  # a build that would outlive the run
    _git(tiny_repo, "commit", "-qam", "slow build")
    monkeypatch.setenv("EVPACK_AB_DIR", str(tmp_path / "cache"))
    spec = baseline_build.BaselineSpec("HEAD", _git(tiny_repo, "rev-parse", "HEAD"), "x" * 40, True)
    t0, lines = time.monotonic(), []
    with baseline_build.prepared_baseline(tiny_repo, spec, build_now=True, progress=lines.append,
                                          background=True) as opt:
        time.sleep(1.0)
    assert time.monotonic() - t0 < 60  # stopped, not waited for
    assert lines[-1].startswith("baseline build: base build stopped: the run ended first"), lines
    assert len(lines) == 2  # no second attempt for the plain archs after a stop
    assert not Path(opt["worktree"]).exists()
    # a bench that had waited for it reads an error, never a half-built base
    assert baseline_build.wait_ready(str(tmp_path / "never"), timeout_s=0.6,
                                     say=lambda *a: None).startswith("the base build did not end")


# -- CLI: bad input is exit 2 before any stage runs ------------------------------------------------
def _cli_error(tmp_path, *args, needle):
    packs = tmp_path / "packs"
    proc = run_cli(*args, "--packs-dir", str(packs))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0], proc.stderr
    assert not packs.exists() or not any(packs.iterdir())  # nothing ran, nothing written


def test_cli_unknown_ref(tmp_path):
    _cli_error(tmp_path, "bench", "--baseline", "no-such-branch-xyz", needle="unknown revision")


def test_cli_ref_equal_to_head(tmp_path):
    _cli_error(tmp_path, "bench", "--baseline", "HEAD", needle="needs --self-check")
    _cli_error(tmp_path, "evidence", "--baseline", "HEAD", needle="needs --self-check")


def test_cli_baseline_without_bench(tmp_path):
    _cli_error(tmp_path, "sass", "--self-check", needle="need the bench stage")


def test_cli_self_check_creates_and_removes_the_worktree(tmp_path, fake_env):
    """On stand-in stages: the CLI validates, creates REF's worktree before the stages, passes the
    baseline to the bench stage's options, and removes the worktree after the run (no GPU: no build)."""
    env = fake_env({})
    env["EVPACK_AB_DIR"] = str(tmp_path / "ab")
    proc = run_cli("bench", "--self-check", "--packs-dir", str(tmp_path / "packs"), "--no-verify", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pack = next(p for p in (tmp_path / "packs").iterdir() if p.is_dir() and not p.is_symlink())
    opt = json.loads((pack / "pack.json").read_text())["options"]["baseline"]
    head = _git(REPO, "rev-parse", "HEAD")
    assert opt["commit"] == opt["head_commit"] == head and opt["self_check"] is True and opt["ref"] == "HEAD"
    assert Path(opt["worktree"]).parent.parent == tmp_path / "ab"
    assert list((tmp_path / "ab").iterdir()) == []
    assert opt["worktree"] not in _git(REPO, "worktree", "list")
