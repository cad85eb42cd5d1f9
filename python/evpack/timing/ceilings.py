"""Same-run ceilings for the roofline: device-to-device copy bandwidth and large-matmul rates.

Measured through the same harness (warm mode) at the start of the bench stage. The raw
per-call times go into ceilings.json, and `rates()` recomputes the rates from them, so
derive() can re-check every roofline number in the pack.

copy    dst.copy_(src) of COPY_BYTES (~20x the H200's L2): bandwidth counts bytes read +
        bytes written, the same convention as the attention byte count (Q, K, V read, O written).
matmul  8192^3 a @ b in fp16 and bf16 on torch.randn data (zeros would let the tensor
        cores idle on power and clock, inflating the rate); 2*N^3 FLOPs.
"""
from __future__ import annotations

import logging

from .stats import StopRule, spread

log = logging.getLogger(__name__)

SCHEMA = 1
COPY_BYTES = 1 << 30  # size of the source buffer
MATMUL_N = 8192
RULE = StopRule(warmup=3, min_samples=15, floor_samples=10, max_samples=200, time_cap_s=0.5,
                target_rel_iqr=0.01)


def rates(ceilings: dict) -> dict[str, float]:
    """{'bandwidth': bytes/s, 'matmul_fp16': FLOP/s, 'matmul_bf16': FLOP/s} from the medians of the raw times."""
    out = {}
    for name, entry in ceilings["measurements"].items():
        med_s = spread(entry["times_us"]).median / 1e6
        out[name] = entry["work"] / med_s
    return out


def matmul_rate_for(rates_: dict[str, float], dtype: str) -> float:
    return rates_[f"matmul_{dtype}"]


def measure(stream, rule: StopRule = RULE) -> dict:
    """Run the ceiling measurements on the current device; returns the ceilings.json object."""
    import torch

    from . import harness

    out: dict = {"schema": SCHEMA, "measurements": {}}
    n = COPY_BYTES // 4
    src = torch.randn(n, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    m = harness.measure(dst.copy_, [(src,)], "warm", rule, stream=stream)
    out["measurements"]["bandwidth"] = {"what": f"device-to-device copy of {n * 4} bytes (read + write)",
                                        "work": 2.0 * n * 4, "unit": "bytes", "times_us": m.times_us,
                                        "stop": m.stop}
    del src, dst
    for dtype, tdt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        a = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=tdt)
        b = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=tdt)
        m = harness.measure(torch.mm, [(a, b)], "warm", rule, stream=stream)
        out["measurements"][f"matmul_{dtype}"] = {"what": f"{MATMUL_N}^3 {dtype} matmul, randn inputs",
                                                  "work": 2.0 * MATMUL_N ** 3, "unit": "flops",
                                                  "times_us": m.times_us, "stop": m.stop}
        del a, b
    torch.cuda.empty_cache()
    r = rates(out)
    log.info("ceilings: copy %.0f GB/s, matmul fp16 %.0f TFLOP/s, bf16 %.0f TFLOP/s",
             r["bandwidth"] / 1e9, r["matmul_fp16"] / 1e12, r["matmul_bf16"] / 1e12)
    return out


def busy(seconds: float = 0.05) -> None:
    """Enqueue about `seconds` of copy traffic (asynchronously) so clocks can be read under load."""
    import torch

    n = (256 << 20) // 4
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    reps = max(1, int(seconds / (2 * n * 4 / 3e12)))
    for _ in range(reps):
        dst.copy_(src)
