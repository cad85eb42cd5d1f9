"""Stability oracle: N back-to-back launches with no sync between them give bitwise-identical
outputs and no CUDA error; then the same under CUDA-graph capture and replay.

This catches the "fails from the second launch on" class of bug (state left
behind by a launch, uninitialised shared memory, races that depend on timing).
Comparisons run on the device and accumulate a mismatch count; the host syncs
once at the end of each phase.

    python oracles/stability.py --variant wmma --out results.json [--launches 1000]
"""
from __future__ import annotations

import argparse
import os
import time

from common import cuda_error_text, make_qkv, torch, write_result

from evpack import registry
from evpack.api import _extension, run_kernel
from evpack.binary import loaded_binary

SHAPE = dict(B=2, H=4, S=257, D=64, dtype="fp16")  # a tail tile on purpose


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16)


def eager(var, cfg, causal: bool, launches: int) -> dict:
    q, k, v = make_qkv(SHAPE["B"], SHAPE["H"], SHAPE["S"], SHAPE["D"], SHAPE["dtype"], seed=7)
    first = run_kernel(q, k, v, causal=causal, variant=var.name, config=cfg.name)
    mismatched = torch.zeros((), dtype=torch.int64, device="cuda")
    bad_launches = torch.zeros((), dtype=torch.int64, device="cuda")
    for _ in range(launches - 1):
        out = run_kernel(q, k, v, causal=causal, variant=var.name, config=cfg.name)
        diff = (_bits(out) != _bits(first)).sum()
        mismatched += diff
        bad_launches += (diff > 0).to(torch.int64)
    torch.cuda.synchronize()
    return {"launches": launches, "mismatched_elements": int(mismatched.item()),
            "mismatched_launches": int(bad_launches.item())}


def graph(var, cfg, causal: bool, replays: int) -> dict:
    q, k, v = make_qkv(SHAPE["B"], SHAPE["H"], SHAPE["S"], SHAPE["D"], SHAPE["dtype"], seed=8)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside capture, as CUDA graphs require
        ref = run_kernel(q, k, v, causal=causal, variant=var.name, config=cfg.name)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    t0 = time.perf_counter()
    with torch.cuda.graph(g):
        out = run_kernel(q, k, v, causal=causal, variant=var.name, config=cfg.name)
    capture_s = time.perf_counter() - t0
    mismatched = torch.zeros((), dtype=torch.int64, device="cuda")
    bad = torch.zeros((), dtype=torch.int64, device="cuda")
    for _ in range(replays):
        g.replay()
        diff = (_bits(out) != _bits(ref)).sum()
        mismatched += diff
        bad += (diff > 0).to(torch.int64)
    torch.cuda.synchronize()
    return {"replays": replays, "mismatched_elements": int(mismatched.item()),
            "mismatched_replays": int(bad.item()), "capture_s": round(capture_s, 6)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--launches", type=int, default=1000)
    args = ap.parse_args()
    var = registry.get(args.variant, include_canaries=True)
    rows, first_error = [], None
    for cfg in var.configs:
        for causal in (False, True):
            row = {"variant": var.name, "config": cfg.name, "causal": causal, **SHAPE}
            try:
                row["eager"] = eager(var, cfg, causal, args.launches)
                row["graph"] = graph(var, cfg, causal, args.launches)
                row["error"] = None
            except Exception as exc:  # a CUDA error: recorded, and the context is likely gone
                row["error"] = cuda_error_text(exc)
                first_error = first_error or row["error"]
            row["passed"] = bool(row["error"] is None and row["eager"]["mismatched_elements"] == 0
                                 and row["graph"]["mismatched_elements"] == 0)
            rows.append(row)
            if row["error"]:
                break
        if first_error:
            break
    env = {k: os.environ.get(k) for k in ("CUDA_LAUNCH_BLOCKING", "TORCH_USE_CUDA_DSA")}
    binary = None
    try:
        binary = loaded_binary(_extension(var.name).__name__)
    except Exception as exc:
        first_error = first_error or cuda_error_text(exc)
    write_result(args.out, {"variant": var.name, "env": env, "rows": rows, "first_error": first_error,
                            "binary": binary})
    ok = sum(r["passed"] for r in rows)
    print(f"stability {var.name}: {ok}/{len(rows)} configs stable over {args.launches} launches"
          + (f"; first error: {first_error}" if first_error else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
