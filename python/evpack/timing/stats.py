"""Pure statistics of timing samples: median, IQR, a distribution-free CI, the stopping rule.

Timings are skewed (a floor plus a right tail of preemption, clock steps and launch
stalls), so every summary is order-based: median and quartiles, never mean and sd.
Quantiles use linear interpolation between order statistics (numpy's default,
Hyndman-Fan type 7) so numbers can be checked with numpy.

The CI of the median is the exact binomial (order-statistic) interval: for n iid
samples the number below the true median is Binomial(n, 1/2), so [x_(r), x_(n-r+1)]
covers the median with probability 1 - 2 P(X <= r-1). It assumes independent samples;
GPU timings drift (clocks, thermals), so treat it as a within-run interval, which is
why compare.py judges differences between runs on the IQR, not on this CI.
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class StopRule:
    """When to stop sampling one measurement (read from a suite's [sampling] table)."""

    warmup: int = 5  # untimed calls (graph mode: untimed replays) before sampling
    min_samples: int = 30  # never judge convergence on fewer samples
    floor_samples: int = 10  # fewest samples kept when the time cap ends a measurement
    max_samples: int = 2000
    time_cap_s: float = 0.5  # wall time of sampling for one measurement
    min_time_s: float = 0.0  # never converge before sampling this long (spans slow GPU states)
    hard_cap_factor: float = 20.0  # past factor x cap, stop even below floor_samples (>= 3 kept)
    target_rel_iqr: float = 0.01  # converged when IQR / median falls below this
    graph_calls: int = 20  # calls captured in one CUDA graph (at least the number of input sets)
    max_batch: int = 256  # calls enqueued between two host synchronizations
    # also converged when the CI_CONF CI of the median lies within +- this fraction of it (0: off). The IQR is the
    # spread of the call times and does not shrink with more samples; this is the precision of the median itself.
    target_rel_ci: float = 0.0
    # the same for each of an A/B's twins (head and base of one kernel), which stop together (0: target_rel_ci)
    target_rel_ci_pair: float = 0.0

    def __post_init__(self) -> None:
        ints = ("warmup", "min_samples", "floor_samples", "max_samples", "graph_calls", "max_batch")
        for name in ints:
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < (0 if name == "warmup" else 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        for name in ("time_cap_s", "hard_cap_factor", "target_rel_iqr", "min_time_s", "target_rel_ci",
                     "target_rel_ci_pair"):
            v = getattr(self, name)
            zero_ok = name in ("min_time_s", "target_rel_ci", "target_rel_ci_pair")
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 or (v == 0 and not zero_ok):
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        if not self.floor_samples <= self.min_samples <= self.max_samples:
            raise ValueError("need floor_samples <= min_samples <= max_samples")


@dataclass(frozen=True)
class Spread:
    n: int
    median: float
    q1: float
    q3: float
    iqr: float
    rel_iqr: float
    ci_lo: float
    ci_hi: float
    ci_conf: float  # achieved coverage of [ci_lo, ci_hi] (>= the requested one when n allows)
    min: float
    max: float

    def to_dict(self) -> dict:
        return asdict(self)


def quantile(sorted_values: list[float], q: float) -> float:
    """Type-7 quantile of already sorted values."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    h = (len(sorted_values) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (h - lo) * (sorted_values[hi] - sorted_values[lo])


def median(values) -> float:
    return quantile(sorted(values), 0.5)


def median_ci_ranks(n: int, conf: float = 0.95) -> tuple[int, int, float]:
    """0-based ranks (lo, hi) of the exact binomial CI of the median and its coverage.

    Largest r with P(Bin(n, 1/2) <= r-1) <= (1-conf)/2; bounds are x_(r), x_(n-r+1).
    With too few samples for the requested coverage, returns (min, max) and its coverage.
    """
    if n < 1:
        raise ValueError("median CI of no samples")
    tail = (1.0 - conf) / 2.0
    log_half_n = n * math.log(0.5)
    log_n_fact = math.lgamma(n + 1)
    cdf, r = 0.0, 1
    for i in range(n // 2 + 1):
        cdf += math.exp(log_n_fact - math.lgamma(i + 1) - math.lgamma(n - i + 1) + log_half_n)
        if cdf <= tail:
            r = i + 1
        else:
            break
    # coverage of [x_(r), x_(n-r+1)] = 1 - 2 P(X <= r-1)
    below = sum(math.exp(log_n_fact - math.lgamma(i + 1) - math.lgamma(n - i + 1) + log_half_n)
                for i in range(r))
    return r - 1, n - r, max(0.0, 1.0 - 2.0 * below)


def spread(values, conf: float = 0.95) -> Spread:
    xs = sorted(float(v) for v in values)
    if not xs:
        raise ValueError("spread of no samples")
    med = quantile(xs, 0.5)
    q1, q3 = quantile(xs, 0.25), quantile(xs, 0.75)
    lo, hi, cov = median_ci_ranks(len(xs), conf)
    rel = (q3 - q1) / med if med > 0 else math.inf
    return Spread(len(xs), med, q1, q3, q3 - q1, rel, xs[lo], xs[hi], cov, xs[0], xs[-1])


def rel_iqr(values) -> float:
    return _rel_iqr_sorted(sorted(values))


def _rel_iqr_sorted(xs: list[float]) -> float:
    med = quantile(xs, 0.5)
    return (quantile(xs, 0.75) - quantile(xs, 0.25)) / med if med > 0 else math.inf


CI_CONF = 0.95  # the coverage of the median's CI that target_rel_ci bounds


@functools.lru_cache(maxsize=8192)
def _ci_ranks(n: int) -> tuple[int, int, float]:
    return median_ci_ranks(n, CI_CONF)


def rel_ci_halfwidth(values) -> float:
    """Half the width of the CI_CONF CI of the median (median_ci_ranks), over the median (inf for a median <= 0)."""
    return _rel_ci_sorted(sorted(values))


def _rel_ci_sorted(xs: list[float]) -> float:
    if not xs:
        raise ValueError("CI of no samples")
    lo, hi, _ = _ci_ranks(len(xs))
    med = quantile(xs, 0.5)
    return (xs[hi] - xs[lo]) / 2.0 / med if med > 0 else math.inf


def noise(values, with_ci: bool) -> tuple[float, float | None]:
    """(rel_iqr, rel_ci_halfwidth or None) of the values, sorted once (the stopping rule asks both every round)."""
    xs = sorted(values)
    return _rel_iqr_sorted(xs), (_rel_ci_sorted(xs) if with_ci and xs else None)


def stop_reason(n: int, rel_iqr_now: float, elapsed_s: float, rule: StopRule,
                time_cap_s: float | None = None, *, rel_ci_now: float | None = None,
                own_s: float | None = None) -> str | None:
    """The noise-based stopping rule; None = keep sampling.

    converged    n >= min_samples, IQR/median < target_rel_iqr and sampled >= min(min_time_s, cap)
    median_ci    n >= min_samples, the median's CI half-width / median (rel_ci_now) < target_rel_ci (when > 0)
                 and sampled >= min(min_time_s, cap)
    max_samples  n reached max_samples
    time_cap     sampling time >= cap and n >= floor_samples
    hard_cap     sampling time >= hard_cap_factor x cap and n >= 3 (a call slower than the budget)
    `elapsed_s` is the wall time since sampling began (min_time_s is judged on it); the caps are judged on
    `own_s`, the time this implementation's own batches took, when given (else on elapsed_s).
    """
    cap = rule.time_cap_s if time_cap_s is None else time_cap_s
    if n >= rule.max_samples:
        return "max_samples"
    if n >= rule.min_samples and elapsed_s >= min(rule.min_time_s, cap):
        if rel_iqr_now < rule.target_rel_iqr:
            return "converged"
        if rule.target_rel_ci > 0 and rel_ci_now is not None and rel_ci_now < rule.target_rel_ci:
            return "median_ci"
    spent = elapsed_s if own_s is None else own_s
    if spent >= cap and n >= rule.floor_samples:
        return "time_cap"
    if spent >= rule.hard_cap_factor * cap and n >= 3:
        return "hard_cap"
    return None
