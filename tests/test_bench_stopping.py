"""When sampling stops: the median's CI as a second way to converge, and the time cap on each implementation's own
sampling time (an implementation left alone in an interleaved group stops after its own cap, not the group's)."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evpack.timing import harness
from evpack.timing.stats import StopRule, rel_ci_halfwidth, rel_iqr, spread, stop_reason

RULE = StopRule(min_samples=30, floor_samples=10, max_samples=2000, time_cap_s=0.3, min_time_s=0.1,
                target_rel_iqr=0.01, target_rel_ci=0.005, target_rel_ci_pair=0.0025)


@given(st.lists(st.floats(min_value=1.0, max_value=1e4, allow_nan=False), min_size=1, max_size=400))
@settings(max_examples=200, deadline=None)
def test_rel_ci_is_the_recorded_ci_of_the_median(xs):
    s = spread(xs)
    assert rel_ci_halfwidth(xs) == pytest.approx((s.ci_hi - s.ci_lo) / 2 / s.median, rel=1e-12, abs=1e-15)


def test_rel_ci_shrinks_with_n_where_the_iqr_does_not():
    """The reason for the rule: for noisy call times (rel IQR ~4%) the IQR stays, the CI of the median narrows."""
    rng = np.random.default_rng(3)
    xs = (10.0 * (1 + 0.03 * rng.standard_normal(4000))).tolist()
    assert rel_iqr(xs[:100]) > 0.03 and rel_iqr(xs) > 0.03
    assert rel_ci_halfwidth(xs[:100]) > 0.005 > rel_ci_halfwidth(xs)


def test_median_ci_converges_only_when_asked_and_after_the_minimums():
    assert stop_reason(30, 0.04, 0.2, RULE, rel_ci_now=0.004) == "median_ci"
    assert stop_reason(30, 0.04, 0.2, RULE, rel_ci_now=0.006) is None
    assert stop_reason(29, 0.04, 0.2, RULE, rel_ci_now=0.001) is None  # too few samples to judge
    assert stop_reason(300, 0.04, 0.05, RULE, rel_ci_now=0.001) is None  # too short a stretch of time
    off = StopRule(min_samples=30, floor_samples=10, time_cap_s=0.3, target_rel_iqr=0.01)
    assert off.target_rel_ci == 0
    assert stop_reason(300, 0.04, 0.2, off, rel_ci_now=0.0) is None  # 0: the rule is off (older suites)
    assert stop_reason(300, 0.004, 0.2, RULE, rel_ci_now=0.001) == "converged"  # the IQR rule is reported first


def test_the_cap_is_judged_on_the_implementations_own_time():
    assert stop_reason(40, 0.04, 5.0, RULE, own_s=0.1) is None  # the group ran long, this one did not
    assert stop_reason(40, 0.04, 5.0, RULE, own_s=0.31) == "time_cap"
    assert stop_reason(5, 0.04, 5.0, RULE, own_s=0.31) is None  # below the floor
    assert stop_reason(3, 0.04, 9.0, RULE, own_s=0.3 * 20) == "hard_cap"
    assert stop_reason(40, 0.04, 0.31, RULE) == "time_cap"  # without own_s: the elapsed time, as before


@pytest.mark.parametrize("bad", [-0.1, True, "0.005"])
def test_target_rel_ci_is_validated(bad):
    with pytest.raises(ValueError, match="target_rel_ci"):
        StopRule(target_rel_ci=bad)


class FakeTimer:
    """What sample_interleaved uses of a harness.Timer: sample() adds a batch of samples and its own time."""

    def __init__(self, name: str, rel_noise: float, batch_s: float, per_batch: int, clock: list[float]) -> None:
        self.name, self.noise, self.batch_s, self.per_batch, self.clock = name, rel_noise, batch_s, per_batch, clock
        self.rng = random.Random(name)
        self.times_ms: list[float] = []
        self.sampled_s, self.stop, self.error, self.stream = 0.0, None, "", None
        self.twin = None

    def sample(self, slice_s: float, cycles_per_s: float) -> None:
        self.times_ms += [1.0 + self.noise * self.rng.gauss(0, 1) for _ in range(self.per_batch)]
        self.clock[0] += self.batch_s
        self.sampled_s += self.batch_s


def _group(monkeypatch, timers, clock):
    monkeypatch.setattr(harness, "sleep_cycles_per_s", lambda stream: 1.0)
    monkeypatch.setattr(harness.time, "perf_counter", lambda: clock[0])
    return harness.sample_interleaved(timers, RULE)


def test_a_noisy_implementation_alone_stops_after_its_own_cap(monkeypatch):
    """24 quiet implementations leave early; the one whose median stays uncertain stops after its own 0.3 s of
    batches, not after 0.3 s x 25 of the group (what the cap counted before, 7.5 s)."""
    clock = [0.0]
    quiet = [FakeTimer(f"q{i}", 0.001, 0.003, 40, clock) for i in range(24)]
    noisy = FakeTimer("noisy", 2.0, 0.003, 1, clock)  # a median that no 0.3 s of samples pins down
    wall = _group(monkeypatch, quiet + [noisy], clock)
    assert all(t.stop == "converged" for t in quiet)
    assert noisy.stop == "time_cap" and 0.3 <= noisy.sampled_s < 0.31
    assert wall < 0.3 + 0.15 + 0.01  # its own cap, the quiet ones' time up to min_time_s, and a round
    assert wall < 0.1 * 0.3 * 25


def test_noise_that_averages_out_stops_on_the_median_ci(monkeypatch):
    """Call times with a 4% IQR never meet the 1% IQR rule; their median is known to 0.5% long before 2,000."""
    clock = [0.0]
    t = FakeTimer("cold", 0.03, 0.003, 8, clock)
    _group(monkeypatch, [t], clock)
    assert t.stop == "median_ci" and rel_iqr(t.times_ms) > 0.03
    assert len(t.times_ms) < 600 and rel_ci_halfwidth(t.times_ms) < 0.005
    assert math.isfinite(t.sampled_s)


def test_twins_stop_together_and_span_the_same_time(monkeypatch):
    """An A/B's head is quiet, its base noisy: the head waits for its twin (the same rounds, the same stretch of
    time), while a quiet implementation without a twin leaves as soon as it converges."""
    clock = [0.0]
    head, base = FakeTimer("head", 0.001, 0.003, 8, clock), FakeTimer("base", 0.03, 0.003, 8, clock)
    alone = FakeTimer("alone", 0.001, 0.003, 8, clock)
    harness.pair_twins(head, base)
    _group(monkeypatch, [head, base, alone], clock)
    assert head.stop == "converged" and base.stop == "median_ci"
    assert head.sampled_s == pytest.approx(base.sampled_s) and len(head.times_ms) == len(base.times_ms)
    assert alone.sampled_s < head.sampled_s / 3
    assert rel_ci_halfwidth(base.times_ms) < 0.0025  # the twins' target, not the 0.5% of a row without one


def test_twins_are_held_to_the_pair_target_and_the_pair_cap(monkeypatch):
    clock = [0.0]
    single = FakeTimer("single", 0.03, 0.003, 8, clock)
    _group(monkeypatch, [single], clock)
    clock = [0.0]
    a, b = FakeTimer("single", 0.03, 0.003, 8, clock), FakeTimer("other", 0.03, 0.003, 8, clock)
    harness.pair_twins(a, b)
    _group(monkeypatch, [a, b], clock)
    assert single.stop == a.stop == b.stop == "median_ci"
    assert len(a.times_ms) > 2 * len(single.times_ms)  # same noise: the pair samples to +-0.25%, not +-0.5%
    clock = [0.0]
    c, d = FakeTimer("c", 2.0, 0.003, 1, clock), FakeTimer("d", 2.0, 0.003, 1, clock)
    harness.pair_twins(c, d)
    _group(monkeypatch, [c, d], clock)
    cap = RULE.time_cap_s * harness.PAIR_CAP_FACTOR
    assert c.stop == d.stop == "time_cap" and cap <= c.sampled_s < cap + 0.01


def test_a_twin_that_fails_does_not_hold_the_other(monkeypatch):
    clock = [0.0]
    a, b = FakeTimer("a", 0.001, 0.003, 8, clock), FakeTimer("b", 0.001, 0.003, 8, clock)
    harness.pair_twins(a, b)

    def broken(slice_s, cycles_per_s):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    b.sample = broken
    b.stream = type("Stream", (), {"synchronize": lambda self: None})()
    _group(monkeypatch, [a, b], clock)
    assert a.stop == "converged" and b.error.startswith("RuntimeError") and b.stop is None
