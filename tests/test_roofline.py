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


# -- the attention floor (summary schema 2; docs/benchmark-physics.md) ----------------------------------------

def test_exp_floor_matches_design_anchor():
    # DESIGN.md: one exp2 per score on the SFU at 16/clk/SM, 132 SMs x 1.98 GHz = 4.18e12/s: 16 us canonical
    ph = rl.physics_of({"sm_count": 132, "capability": "9.0"}, 1980)
    assert ph.exp_per_s == pytest.approx(4.18e12, rel=1e-3)
    assert rl.shape_exps(CANON) == 16 * 16 * 512 ** 2 and rl.shape_flops(CANON) == 4 * 64 * rl.shape_exps(CANON)
    assert rl.shape_exps(Shape(16, 16, 512, 64, "fp16", True)) == rl.shape_exps(CANON) / 2
    fl = rl.attention_floors(CANON, "cold", 777e12, 4.24e12, ph)
    assert fl.exp_s * 1e6 == pytest.approx(16.05, abs=0.01)
    assert fl.mma_s * 1e6 == pytest.approx(22.11, abs=0.01) and fl.mem_s * 1e6 == pytest.approx(15.83, abs=0.01)
    assert fl.floor_s == fl.mma_s and fl.bound == "mma"
    # at the tensor cores' datasheet rate (989 TFLOP/s) MMA and exp are about equal at D=64 (17.4 vs 16.0 us)
    assert rl.attention_floors(CANON, "cold", 989e12, 4.24e12, ph).mma_s * 1e6 == pytest.approx(17.37, abs=0.01)


def test_floor_bound_by_mode_and_missing_physics():
    ph = rl.physics_of({"sm_count": 132, "capability": "9.0"}, 1980)
    small = Shape(64, 16, 128, 64)  # few FLOPs per byte: memory bound in cold mode
    cold = rl.attention_floors(small, "cold", 777e12, 4.24e12, ph)
    assert cold.bound == "memory" and cold.floor_s == cold.mem_s
    warm = rl.attention_floors(small, "warm", 777e12, 4.24e12, ph)  # inputs may sit in L2: no byte floor
    assert warm.bound in ("mma", "exp") and warm.floor_s == max(warm.mma_s, warm.exp_s) < cold.floor_s
    assert warm.mem_s == cold.mem_s  # recorded either way
    none = rl.attention_floors(CANON, "warm", 7e15, 4.24e12, None)  # no clock: no exp floor, never a guess
    assert none.exp_s is None and none.bound == "mma"
    assert rl.physics_of({"sm_count": 132, "capability": "12.0"}, 1980) is None  # a rate we do not know
    assert rl.physics_of({"sm_count": 132, "capability": "9.0"}, None) is None
    assert rl.physics_of(None, 1980) is None
    with pytest.raises(ValueError):
        rl.attention_floors(CANON, "cold", 0, 1, ph)


def test_the_exp_floor_clock_is_the_highest_recorded():
    from evpack.timing.clocks import highest_sm_mhz, judge

    a = {"source": "pynvml", "sm_mhz": 1755, "max_sm_mhz": 1980, "reasons_mask": 0}
    b = dict(a, sm_mhz=1965)
    assert highest_sm_mhz(judge(a, b)) == 1980  # a floor must hold at any clock the GPU could have run at
    assert highest_sm_mhz(judge({"source": "none", "error": "x"}, {"source": "none", "error": "x"})) is None


def test_vram_estimate_counts_a_snapshot_set():
    s = Shape(16, 16, 512, 64)
    t = s.numel * s.elem_bytes
    assert rl.vram_estimate(s, 3, 10) - rl.vram_estimate(s, 2, 10) == 3 * t
