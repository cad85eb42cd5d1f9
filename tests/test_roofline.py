"""Roofline arithmetic, checked against the numbers in DESIGN.md's anchors table."""
from __future__ import annotations

import pytest

from evpack.timing import roofline as rl
from evpack.timing.suites import Shape

CANON = Shape(16, 16, 512, 64, "fp16", False)


def test_flops_and_bytes_canonical():
    assert rl.shape_flops(CANON) == 4 * 16 * 16 * 512 ** 2 * 64 == 17_179_869_184
    assert rl.shape_flops(Shape(16, 16, 512, 64, "fp16", True)) == 17_179_869_184 / 2
    assert rl.shape_bytes(CANON) == 4 * 16 * 16 * 512 * 64 * 2 == 67_108_864


def test_floor_matches_design_anchor():
    # DESIGN.md: at B=16,H=16 the floor is ~22 us compute (790 TFLOP/s) vs ~16 us memory (4.2 TB/s)
    r = rl.roofline(rl.shape_flops(CANON), rl.shape_bytes(CANON), 790e12, 4.2e12)
    assert r.compute_s * 1e6 == pytest.approx(21.75, abs=0.01)
    assert r.memory_s * 1e6 == pytest.approx(15.98, abs=0.01)
    assert r.floor_s == r.compute_s and r.bound == "compute"
    # cuDNN's 50.2 us sits at ~43% of the floor; 342 TFLOP/s
    assert rl.pct_of_floor(r.floor_s, 50.2e-6) == pytest.approx(43.3, abs=0.1)
    assert rl.tflops(r.flops, 50.2e-6) == pytest.approx(342.2, abs=0.1)
    assert rl.gbps(r.bytes, 50.2e-6) == pytest.approx(1336.8, abs=0.1)


def test_memory_bound_when_bandwidth_is_low():
    r = rl.roofline(1e9, 1e9, 1e15, 1e11)
    assert r.bound == "memory" and r.floor_s == pytest.approx(1e-2)
    with pytest.raises(ValueError):
        rl.roofline(1, 1, 0, 1)


def test_rotation_sets_exceed_twice_l2():
    l2 = 50 * 2 ** 20
    for B, H in ((2, 8), (4, 16), (16, 16), (32, 32)):
        set_bytes = 3 * Shape(B, H, 512, 64).numel * 2
        n = rl.rotation_sets(set_bytes, l2)
        assert n >= 2 and n * set_bytes > 2 * l2
    assert rl.rotation_sets(10 * l2, l2) == 2


def test_vram_estimate_grows_with_sets_and_scores():
    s = Shape(2, 16, 4096, 64)
    assert rl.vram_estimate(s, 4, 20) > rl.vram_estimate(s, 2, 20)
    assert rl.vram_estimate(s, 2, 20) > 2 * 16 * 4096 ** 2 * 4  # at least one fp32 score matrix
