"""What Nsight Compute profiles: one canonical call per kernel of a variant (every config x dtype x
head dim, non-causal and causal), writing the call manifest in launch order.

Every input is made before profiling starts; the profiled range (cudaProfilerStart/Stop, ncu
--profile-from-start off) then holds, per call, a marker kernel (torch.cuda._sleep, a
`spin_kernel`) followed by whatever the op launched. ncu profiles every kernel in the range with
no name filter, so a kernel the op launches from outside the extension (a library or torch op)
shows up between two markers.

One variant per process (the older form, and the fallback when a batch fails):

    ncu --profile-from-start off --clock-control none --metrics ... --csv python oracles/tensor_target.py \
        --variant wmma --manifest calls.json

Several variants in one process (one ncu start-up for all of them; stages/tensor_proof.py splits ncu's
output into each variant's share at the markers, in the order given, and derive checks that split):

    ncu ... python oracles/tensor_target.py --batch scalar,wmma,canary_decoy_hmma --manifest-dir DIR

writes DIR/<variant>.manifest.json for each, after the one profiled range that holds all their calls.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from common import make_qkv, torch, write_result

from evpack import registry
from evpack.api import _extension, run_kernel
from evpack.binary import loaded_binary
from evpack.parsers.ncu import MARKER_KERNEL, required_flops, tile_padded_flops

CANONICAL = dict(B=2, H=8, S=512)


def planned_calls(name: str) -> tuple[list[dict], list[tuple]]:
    """The variant's calls (manifest entries, in launch order) and their inputs, made now (before profiling)."""
    var = registry.get(name, include_canaries=True)
    calls, inputs = [], []
    b, h, s = CANONICAL["B"], CANONICAL["H"], CANONICAL["S"]
    for cfg in var.configs:
        for dtype in var.dtypes:
            for d in var.head_dims_for(cfg):
                for causal in (False, True):
                    inputs.append(make_qkv(b, h, s, d, dtype, seed=d))
                    calls.append(dict(variant=var.name, kind=var.kind, config=cfg.name, dtype=dtype, D=d, B=b, H=h,
                                      S=s, causal=causal, required_flops=required_flops(b, h, s, d, causal),
                                      tile_padded_flops=tile_padded_flops(b, h, s, d, causal, cfg.block_m,
                                                                          cfg.block_n)))
    return calls, inputs


def main() -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--variant", help="one variant or canary (with --manifest)")
    ap.add_argument("--manifest", help="the manifest file of --variant")
    ap.add_argument("--batch", help="variants and canaries, comma-separated, profiled in this order")
    ap.add_argument("--manifest-dir", help="where --batch writes <variant>.manifest.json")
    args = ap.parse_args()
    if bool(args.batch) == bool(args.variant) or bool(args.batch) != bool(args.manifest_dir) \
            or bool(args.variant) != bool(args.manifest):
        ap.error("give --variant with --manifest, or --batch with --manifest-dir")
    names = args.batch.split(",") if args.batch else [args.variant]
    plans = [(name, *planned_calls(name)) for name in names]
    torch.cuda._sleep(1)  # load the marker kernel before the profiled range
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for name, calls, inputs in plans:
        for call, (q, k, v) in zip(calls, inputs, strict=True):
            torch.cuda._sleep(1)  # marker: the kernels after it, up to the next marker, are this call's
            run_kernel(q, k, v, causal=call["causal"], variant=name, config=call["config"])
            torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    for name, calls, _ in plans:
        path = Path(args.manifest_dir) / f"{name}.manifest.json" if args.batch else Path(args.manifest)
        write_result(str(path), {"calls": calls, "marker": MARKER_KERNEL,
                                 "binary": loaded_binary(_extension(name).__name__)})
        print(f"tensor target {name}: {len(calls)} calls")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
