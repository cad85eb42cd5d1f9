"""What compute-sanitizer runs: one variant x config over small shapes that still cover tails.

S = 17 and 65 are not multiples of any tile; both dtypes, both head dims, causal
and not. B1 H136 S17 has more query tiles than an H200 has SMs, so a persistent CTA
runs a second work item after its first (the rings and the Q buffers carry over).
For a config that splits the last round (registry tail_split: wgmma's, without the
causal mask) B1 H2 S700 adds six 128-key tiles in few work items: its pieces, their
partial results in global memory and the merge run. Only there: with it run by every
config (and B1 H136 S17), the scalar control's racecheck cell took 50 s on an H200
instead of 16. Outputs are checked for NaN so a silent fault is visible in the log
too. Run with PYTORCH_NO_CUDA_MEMORY_CACHING=1 so every tensor is its own allocation
and out-of-bounds accesses cannot land in cached memory.

The sanitizer only instruments our kernels (--kernel-name kns=fwd_kernel), so a
buffer written by one of torch's kernels looks unwritten to initcheck: inputs are
made on the host and copied over (initcheck tracks copies), and the NaN check runs
on a host copy of the output. That copy is itself checked: initcheck flags any
output element our kernel left unwritten when cudaMemcpy reads it.

The kernels are launched through the extension's binding (the same shared object
and launch path the op uses), not through the torch custom op: under
compute-sanitizer, torch 2.11's custom-op dispatch kept every argument and result
alive until exit (on an H200, 2026-11-21: 8 of 8 tensors still referenced after
del + gc.collect() under the tool, 0 of 8 without it, 0 of 8 through the binding),
and memcheck's leak check reported each of them (tests/fixtures/sanitizer/probe_memcheck_leak_*).

    compute-sanitizer --tool memcheck python oracles/sanitize_target.py --variant wmma --config m64n64w4s1
"""
from __future__ import annotations

import argparse
import gc
import json

from common import DTYPES, torch

from evpack import registry
from evpack.api import _extension, check_inputs
from evpack.binary import loaded_binary

SHAPES = ((1, 2, 17), (1, 2, 65), (1, 136, 17))  # (B, H, S)
SPLIT_SHAPES = ((1, 2, 700),)  # tail_split configs only


def host_qkv(b: int, h: int, s: int, d: int, dtype: str, seed: int):
    """Random inputs made on the host and copied to the device (never zeros)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn((b, h, s, d), generator=g).to(DTYPES[dtype]).cuda() for _ in range(3)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", required=True)
    ap.add_argument("--config", default=None)
    ap.add_argument("--binary-out", default=None)
    args = ap.parse_args()
    var = registry.get(args.variant, include_canaries=True)
    ext = _extension(var.name)
    config = var.config(args.config)
    shapes = SHAPES + (SPLIT_SHAPES if config.tail_split else ())
    calls = 0
    for dtype in var.dtypes:
        for d in var.head_dims_for(config):
            for b, h, s in shapes:
                for causal in (False, True):
                    q, k, v = host_qkv(b, h, s, d, dtype, seed=s + d)
                    _, cfg, scale = check_inputs(q, k, v, variant=var.name, config=args.config,
                                                 include_canaries=True)
                    out = torch.empty_like(q)  # a fresh allocation that nothing has written
                    ext.forward(q, k, v, out, causal, scale, var.name, cfg, torch.cuda.current_stream().cuda_stream)
                    host = out.cpu()  # synchronizes; initcheck flags any element left unwritten
                    if not torch.isfinite(host).all():
                        print(f"non-finite output: {dtype} D={d} S={s} causal={causal}")
                    calls += 1
                    del q, k, v, out, host
    torch.cuda.synchronize()
    gc.collect()
    torch.cuda.empty_cache()  # hand every block back (cudaFree) before the leak check runs at exit
    if args.binary_out:
        with open(args.binary_out, "w", encoding="utf-8") as f:
            json.dump(loaded_binary(ext.__name__), f)
    print(f"sanitize target {var.name}/{args.config}: {calls} launches done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
