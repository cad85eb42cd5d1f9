"""What Nsight Compute profiles: one canonical call per kernel of a variant (every config x dtype x
head dim, non-causal and causal), writing the call manifest in launch order.

Every input is made before profiling starts; the profiled range (cudaProfilerStart/Stop, ncu
--profile-from-start off) then holds, per call, a marker kernel (torch.cuda._sleep, a
`spin_kernel`) followed by whatever the op launched. ncu profiles every kernel in the range with
no name filter, so a kernel the op launches from outside the extension (a library or torch op)
shows up between two markers.

    ncu --profile-from-start off --clock-control none --metrics ... --csv python oracles/tensor_target.py \
        --variant wmma --manifest calls.json
"""
from __future__ import annotations

import argparse

from common import make_qkv, torch, write_result

from evpack import registry
from evpack.api import _extension, run_kernel
from evpack.binary import loaded_binary
from evpack.parsers.ncu import MARKER_KERNEL, required_flops, tile_padded_flops

CANONICAL = dict(B=2, H=8, S=512)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", required=True)
    ap.add_argument("--manifest", required=True)
    args = ap.parse_args()
    var = registry.get(args.variant, include_canaries=True)
    calls, inputs = [], []
    b, h, s = CANONICAL["B"], CANONICAL["H"], CANONICAL["S"]
    for cfg in var.configs:
        for dtype in var.dtypes:
            for d in var.head_dims:
                for causal in (False, True):
                    inputs.append(make_qkv(b, h, s, d, dtype, seed=d))
                    calls.append(dict(variant=var.name, kind=var.kind, config=cfg.name, dtype=dtype, D=d, B=b, H=h,
                                      S=s, causal=causal, required_flops=required_flops(b, h, s, d, causal),
                                      tile_padded_flops=tile_padded_flops(b, h, s, d, causal, cfg.block_m,
                                                                          cfg.block_n)))
    torch.cuda._sleep(1)  # load the marker kernel before the profiled range
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for call, (q, k, v) in zip(calls, inputs, strict=True):
        torch.cuda._sleep(1)  # marker: the kernels after it, up to the next marker, are this call's
        run_kernel(q, k, v, causal=call["causal"], variant=var.name, config=call["config"])
        torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    write_result(args.manifest, {"calls": calls, "marker": MARKER_KERNEL,
                                 "binary": loaded_binary(_extension(var.name).__name__)})
    print(f"tensor target {var.name}: {len(calls)} calls")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
