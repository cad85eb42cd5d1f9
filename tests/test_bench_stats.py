"""Statistics of timing samples: quantiles, spread, the order-statistic CI, the stopping rule."""
from __future__ import annotations

import math

import numpy as np
import pytest

from evpack.timing.stats import StopRule, median_ci_ranks, quantile, rel_iqr, spread, stop_reason


def test_quantile_matches_numpy_linear():
    rng = np.random.default_rng(1)
    xs = sorted(rng.gamma(2.0, 3.0, size=101).tolist())
    for q in (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0):
        assert quantile(xs, q) == pytest.approx(float(np.quantile(xs, q)), rel=1e-12)
    assert quantile([5.0], 0.5) == 5.0
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_spread_of_known_values():
    s = spread([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s.n, s.median, s.q1, s.q3, s.iqr, s.min, s.max) == (5, 3.0, 2.0, 4.0, 2.0, 1.0, 5.0)
    assert s.rel_iqr == pytest.approx(2.0 / 3.0)
    assert s.ci_lo <= s.median <= s.ci_hi


def test_median_ci_ranks_exact_binomial():
    # textbook: n=30 -> 10th and 21st order statistics (1-based), coverage 0.957
    lo, hi, cov = median_ci_ranks(30)
    assert (lo, hi) == (9, 20)
    assert cov == pytest.approx(0.9572, abs=1e-3)
    for n in (6, 10, 31, 100, 1000, 5000):
        lo, hi, cov = median_ci_ranks(n)
        assert cov >= 0.95 and lo + hi == n - 1
    lo, hi, cov = median_ci_ranks(5)  # too few for 95%: whole range, coverage reported
    assert (lo, hi) == (0, 4) and cov == pytest.approx(1 - 2 / 32)


def test_ci_covers_true_median_in_simulation():
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(400):
        s = spread(rng.exponential(1.0, size=40))
        hits += s.ci_lo <= math.log(2) <= s.ci_hi
    assert hits / 400 > 0.92


def test_stop_rule():
    rule = StopRule(min_samples=30, floor_samples=10, max_samples=100, time_cap_s=0.5, target_rel_iqr=0.01)
    assert stop_reason(29, 0.001, 0.0, rule) is None  # too few to judge
    assert stop_reason(30, 0.009, 0.0, rule) == "converged"
    assert stop_reason(30, 0.02, 0.1, rule) is None
    assert stop_reason(12, 0.02, 0.6, rule) == "time_cap"
    assert stop_reason(5, 0.02, 0.6, rule) is None  # below the floor: keep going
    assert stop_reason(3, 0.02, 0.5 * 20, rule) == "hard_cap"
    assert stop_reason(100, 0.5, 0.0, rule) == "max_samples"
    assert stop_reason(30, 0.02, 0.2, rule, time_cap_s=0.1) == "time_cap"


def test_min_time_delays_convergence():
    rule = StopRule(min_samples=30, time_cap_s=0.5, min_time_s=0.1)
    assert stop_reason(500, 0.001, 0.05, rule) is None  # quiet but too short a stretch of time
    assert stop_reason(500, 0.001, 0.1, rule) == "converged"
    assert stop_reason(500, 0.001, 0.04, rule, time_cap_s=0.04) == "converged"  # cap below min_time wins


def test_stop_rule_validation():
    with pytest.raises(ValueError):
        StopRule(min_samples=5, floor_samples=10)
    with pytest.raises(ValueError):
        StopRule(time_cap_s=0)
    with pytest.raises(ValueError):
        StopRule(graph_calls=True)


def test_rel_iqr_noise_levels():
    rng = np.random.default_rng(3)
    quiet = 50.0 + rng.normal(0, 0.05, size=200)
    noisy = 50.0 + rng.normal(0, 2.0, size=200)
    assert rel_iqr(quiet) < 0.01 < rel_iqr(noisy)
