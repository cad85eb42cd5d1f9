"""Pure roofline arithmetic for attention forward, against same-run measured ceilings.

FLOPs    = 4*B*H*S^2*D (Q.K^T and P.V, 2 FLOPs per multiply-add), half of it when causal
           (the convention of FlashAttention's benchmarks; softmax FLOPs not counted).
Bytes    = the minimum traffic: read Q, K, V once and write O once = 4*B*H*S*D*elem.
Floor    = max(FLOPs / matmul rate, bytes / copy bandwidth), with the matmul rate and the
           device-to-device copy bandwidth (bytes read + written per second) measured in
           the same run (ceilings.py). "% of floor" = floor time / measured time x 100:
           100% means the kernel runs at the better of the two measured ceilings.
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
    """Peak bytes one shape may need: the rotated input sets; per implementation a CUDA-graph
    pool (output and slack, all alive while they are sampled interleaved); SDPA-math's
    S x S scores (input dtype + fp32 softmax) held in its graph pool; and, transiently, the
    larger of another such score buffer and the fp32 reference (fp32 Q, K, V, O, two S x S)."""
    t = shape.numel * shape.elem_bytes
    scores = shape.B * shape.H * shape.S * shape.S
    math_backend = scores * (2 * shape.elem_bytes + 4)
    reference = 4 * shape.numel * 4 + 2 * scores * 4
    return int(3 * t * n_sets + 3 * t * n_impls + math_backend + max(math_backend, reference))


def rotation_sets(set_bytes: int, l2_bytes: int) -> int:
    """Input sets to rotate so that their total exceeds 2x L2 (at least 2)."""
    if set_bytes <= 0:
        raise ValueError("set_bytes must be positive")
    return max(2, (2 * l2_bytes) // set_bytes + 1)
