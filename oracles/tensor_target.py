"""What Nsight Compute profiles: one canonical call per kernel of a variant (every config x dtype x
head dim, non-causal and causal), writing the call manifest in launch order.

    ncu --clock-control none --metrics ... --csv -k regex:fwd_kernel python oracles/tensor_target.py \
        --variant wmma --manifest calls.json
"""
from __future__ import annotations

import argparse

from common import make_qkv, torch, write_result

from evpack import registry
from evpack.api import _extension, run_kernel
from evpack.binary import loaded_binary
from evpack.parsers.ncu import required_flops, tile_padded_flops

CANONICAL = dict(B=2, H=8, S=512)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", required=True)
    ap.add_argument("--manifest", required=True)
    args = ap.parse_args()
    var = registry.get(args.variant, include_canaries=True)
    calls = []
    b, h, s = CANONICAL["B"], CANONICAL["H"], CANONICAL["S"]
    for cfg in var.configs:
        for dtype in var.dtypes:
            for d in var.head_dims:
                for causal in (False, True):
                    q, k, v = make_qkv(b, h, s, d, dtype, seed=d)
                    run_kernel(q, k, v, causal=causal, variant=var.name, config=cfg.name)
                    torch.cuda.synchronize()
                    calls.append(dict(variant=var.name, kind=var.kind, config=cfg.name, dtype=dtype, D=d, B=b, H=h,
                                      S=s, causal=causal, required_flops=required_flops(b, h, s, d, causal),
                                      tile_padded_flops=tile_padded_flops(b, h, s, d, causal, cfg.block_m,
                                                                          cfg.block_n)))
    write_result(args.manifest, {"calls": calls, "binary": loaded_binary(_extension(var.name).__name__)})
    print(f"tensor target {var.name}: {len(calls)} calls")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
