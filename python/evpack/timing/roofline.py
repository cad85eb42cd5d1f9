"""Pure roofline arithmetic for attention forward, against same-run measured ceilings.

FLOPs    = 4*B*H*S^2*D (Q.K^T and P.V, 2 FLOPs per multiply-add), half of it when causal
           (the convention of FlashAttention's benchmarks; softmax FLOPs not counted).
Bytes    = the minimum traffic: read Q, K, V once and write O once = 4*B*H*S*D*elem.
Floor    = max(FLOPs / matmul rate, bytes / copy bandwidth), with the matmul rate and the
           device-to-device copy bandwidth (bytes read + written per second) measured in
           the same run (ceilings.py). "% of floor" = floor time / measured time x 100:
           100% means the kernel runs at the better of the two measured ceilings.

The attention floor (attention_floors, summary.json schema 2; docs/benchmark-physics.md derives it):
  mma     FLOPs at the same-run matmul ceiling (as above);
  exp     one exp2 per score, B*H*S^2 (half when causal), on the special-function units: Physics.exp_per_s
          = EXP2_PER_CLK_PER_SM x SMs x the SM clock the run recorded;
  memory  Q, K, V read and O written once at the same-run copy bandwidth (not in warm mode: inputs that sit
          in L2 are read faster than the HBM copy bandwidth);
  floor   the largest of these; a measured time below it is impossible.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .suites import Shape


def attention_flops(B: int, H: int, S: int, D: int, causal: bool) -> float:
    flops = 4.0 * B * H * S * S * D
    return flops / 2.0 if causal else flops


def attention_min_bytes(B: int, H: int, S: int, D: int, elem_bytes: int) -> float:
    return 4.0 * B * H * S * D * elem_bytes


def shape_flops(shape: Shape) -> float:
    return attention_flops(shape.B, shape.H, shape.S, shape.D, shape.causal)


def shape_bytes(shape: Shape) -> float:
    return attention_min_bytes(shape.B, shape.H, shape.S, shape.D, shape.elem_bytes)


def attention_exps(B: int, H: int, S: int, causal: bool) -> float:
    """Exponentials of one forward: one per score, half of them when causal (the FLOP convention)."""
    exps = float(B) * H * S * S
    return exps / 2.0 if causal else exps


def shape_exps(shape: Shape) -> float:
    return attention_exps(shape.B, shape.H, shape.S, shape.causal)


# MUFU.EX2 results per clock per SM: 16 on compute capability 7.x to 9.0 (the CUDA C++ Programming Guide's
# arithmetic-instruction throughput table, row "base-2 exponential"). Keyed by the capability device_info
# records; a device not listed gets no exp floor rather than a guessed one.
EXP2_PER_CLK_PER_SM = {"7.0": 16, "7.5": 16, "8.0": 16, "8.6": 16, "8.7": 16, "8.9": 16, "9.0": 16}


@dataclass(frozen=True)
class Physics:
    """What bounds the exponentials: SMs, their clock and the special-function rate per SM and clock."""

    sm_count: int
    sm_clock_hz: float
    exp2_per_clk_per_sm: int

    @property
    def exp_per_s(self) -> float:
        return float(self.exp2_per_clk_per_sm) * self.sm_count * self.sm_clock_hz

    def to_json(self) -> dict:
        return {"sm_count": self.sm_count, "sm_clock_hz": self.sm_clock_hz,
                "exp2_per_clk_per_sm": self.exp2_per_clk_per_sm, "exp_per_s": self.exp_per_s}


def physics_of(device: dict | None, sm_clock_mhz: float | None) -> Physics | None:
    """Physics of a run from run.json's device (sm_count, capability) and the SM clock it recorded (clocks.json);
    None when any of them is missing (the row then has no exp floor)."""
    device = device or {}
    rate = EXP2_PER_CLK_PER_SM.get(str(device.get("capability")))
    sms = device.get("sm_count")
    if rate is None or not isinstance(sms, int) or sms <= 0 or not sm_clock_mhz or sm_clock_mhz <= 0:
        return None
    return Physics(sms, float(sm_clock_mhz) * 1e6, rate)


@dataclass(frozen=True)
class Floors:
    """The speed-of-light times of one row (seconds); exp_s is None without Physics."""

    mma_s: float
    exp_s: float | None
    mem_s: float
    floor_s: float
    bound: str  # "mma", "exp" or "memory"


def attention_floors(shape: Shape, mode: str, matmul_flops_per_s: float, bandwidth_bytes_per_s: float,
                     physics: Physics | None) -> Floors:
    """The three floors of a row and the largest of those that bound its mode (warm: mma and exp only)."""
    if matmul_flops_per_s <= 0 or bandwidth_bytes_per_s <= 0:
        raise ValueError("ceilings must be positive")
    mma = shape_flops(shape) / matmul_flops_per_s
    exp = shape_exps(shape) / physics.exp_per_s if physics is not None else None
    mem = shape_bytes(shape) / bandwidth_bytes_per_s
    bounding = {"mma": mma, "exp": exp, "memory": None if mode == "warm" else mem}
    bound = max((k for k, v in bounding.items() if v is not None), key=lambda k: bounding[k])
    return Floors(mma, exp, mem, bounding[bound], bound)


@dataclass(frozen=True)
class Roofline:
    flops: float
    bytes: float
    compute_s: float  # flops / matmul rate
    memory_s: float  # bytes / bandwidth
    floor_s: float
    bound: str  # "compute" or "memory"


def roofline(flops: float, nbytes: float, matmul_flops_per_s: float, bandwidth_bytes_per_s: float) -> Roofline:
    if matmul_flops_per_s <= 0 or bandwidth_bytes_per_s <= 0:
        raise ValueError("ceilings must be positive")
    c, m = flops / matmul_flops_per_s, nbytes / bandwidth_bytes_per_s
    return Roofline(flops, nbytes, c, m, max(c, m), "compute" if c >= m else "memory")


def tflops(flops: float, seconds: float) -> float:
    return flops / seconds / 1e12 if seconds > 0 else math.nan


def gbps(nbytes: float, seconds: float) -> float:
    return nbytes / seconds / 1e9 if seconds > 0 else math.nan


def pct_of_floor(floor_s: float, seconds: float) -> float:
    return 100.0 * floor_s / seconds if seconds > 0 else math.nan


def vram_estimate(shape: Shape, n_sets: int, n_impls: int) -> int:
    """Peak bytes one shape may need: the input sets and one copy of a set (the inputs of a checked timed
    call); per implementation a CUDA-graph pool (output and slack, all alive while they are sampled
    interleaved); SDPA-math's S x S scores (input dtype + fp32 softmax) held in its graph pool; and,
    transiently, the larger of another such score buffer and the fp32 reference (fp32 Q, K, V, O, two S x S)."""
    t = shape.numel * shape.elem_bytes
    scores = shape.B * shape.H * shape.S * shape.S
    math_backend = scores * (2 * shape.elem_bytes + 4)
    reference = 4 * shape.numel * 4 + 2 * scores * 4
    return int(3 * t * (n_sets + 1) + 3 * t * n_impls + math_backend + max(math_backend, reference))


def rotation_sets(set_bytes: int, l2_bytes: int) -> int:
    """Input sets to rotate so that their total exceeds 2x L2 (at least 2)."""
    if set_bytes <= 0:
        raise ValueError("set_bytes must be positive")
    return max(2, (2 * l2_bytes) // set_bytes + 1)
