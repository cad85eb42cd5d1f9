"""Correctness oracle: every shape x config of one variant against a float64 reference.

Bound (flash-attention's rule): max |out - ref| <= 2 * max |torch_out - ref| + floor,
where torch_out is PyTorch's own attention in the same precision and floor is
twice the rounding error of the reference itself in the output dtype. NaN/Inf
always fails. The output buffer is poisoned with NaN before every call, so an
element the kernel never writes is caught; q, k and v are compared bit for bit before and after
every call, so a kernel that writes its inputs is caught. Inputs are fresh random per trial.

With --shortcut-seed N the oracle also checks the pack's seeded set of shortcut-defeating cases
(stages/correctness.shortcut_cases: odd S, S = 1, a large S, sharper softmax, heavy tails, and the
structured families of common.FAMILIES: an attention sink, outlier channels, tied keys); every row
records its input family (`dist`) and |ref|, so the stage can require the reference to stand far above
the bound.

    python oracles/correctness.py --variant wmma --out results.json [--quick] [--shortcut-seed N]
"""
from __future__ import annotations

import argparse
import time

from common import (
    DTYPES,
    bound_for,
    changed_elements,
    default_scale,
    make_inputs,
    max_err,
    poisoned_out,
    snapshot,
    torch,
    write_result,
)

from evpack import registry
from evpack.api import _extension, check_inputs
from evpack.binary import loaded_binary
from evpack.stages.correctness import shortcut_cases

SEQ_LENS = (1, 17, 63, 64, 65, 127, 512, 1000, 2048)
SMALL_BH = ((1, 1), (2, 3))
LARGE_BH = (8, 16)
LARGE_BH_SEQ = (65, 512, 1000)
# More work items than an H200 has SMs and few left after the first round (184 of 128 rows, 138 of 192): wgmma's
# tail_split config runs those split across the grid after whole ones (scheduler.cuh), in the quick grid too.
SPLIT_TAIL = (1, 23, 1000)
SEEDS = (0, 1)


def shape_grid(quick: bool):
    seqs = (17, 64, 65, 512) if quick else SEQ_LENS
    seeds = SEEDS[:1] if quick else SEEDS
    for dtype in DTYPES:
        for d in registry.HEAD_DIMS:
            for causal in (False, True):
                for seed in seeds:
                    for s in seqs:
                        for b, h in SMALL_BH:
                            # one layout in four goes through strided (B, S, H, D) views
                            layout = "bshd" if (s + b) % 4 == 1 else "bhsd"
                            yield dict(B=b, H=h, S=s, D=d, dtype=dtype, causal=causal, seed=seed, layout=layout)
                    b, h, s = SPLIT_TAIL
                    yield dict(B=b, H=h, S=s, D=d, dtype=dtype, causal=causal, seed=seed + 200, layout="bhsd")
                    if not quick:
                        for s in LARGE_BH_SEQ:
                            yield dict(B=LARGE_BH[0], H=LARGE_BH[1], S=s, D=d, dtype=dtype, causal=causal,
                                       seed=seed + 100, layout="bhsd")


def check_one(var, cfg, shape) -> dict:
    dist = shape.get("dist", "normal")
    q, k, v = make_inputs(shape["B"], shape["H"], shape["S"], shape["D"], shape["dtype"], shape["seed"],
                          shape["layout"], dist)
    scale = default_scale(shape["D"]) * shape.get("scale_mult", 1.0)
    ref, pt_err, floor, bound = bound_for(q, k, v, shape["causal"], scale)
    check_inputs(q, k, v, scale=scale, variant=var.name, config=cfg.name, include_canaries=True)
    before = snapshot((q, k, v))
    out = poisoned_out(q)
    _extension(var.name).forward(q, k, v, out, shape["causal"], scale, var.name, cfg.name,
                                 torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    changed = int(changed_elements((q, k, v), before).item())
    nonfinite = int((~torch.isfinite(out)).sum().item())
    err = max_err(out, ref)
    ref_max = ref.abs().max().item()
    return dict(variant=var.name, config=cfg.name, **shape, scale=scale, max_err=err, torch_err=pt_err,
                floor=floor, bound=bound, margin=bound - err, nonfinite=nonfinite, ref_max=ref_max,
                inputs_changed=changed, passed=bool(nonfinite == 0 and err <= bound and changed == 0))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="a reduced grid (canaries)")
    ap.add_argument("--shortcut-seed", type=int, default=None, help="also check the seeded shortcut-defeating set")
    args = ap.parse_args()
    var = registry.get(args.variant, include_canaries=True)
    rows, t0 = [], time.monotonic()
    grid = [dict(shape, set="grid") for shape in shape_grid(args.quick)]
    if args.shortcut_seed is not None:
        grid += [dict(case, set="shortcut") for case in shortcut_cases(args.shortcut_seed)]
    for shape in grid:
        if shape["dtype"] not in var.dtypes or shape["D"] not in var.head_dims:
            continue
        for cfg in var.configs_for(shape["D"]):
            rows.append(check_one(var, cfg, shape))
    failed = sum(not r["passed"] for r in rows)
    write_result(args.out, {"variant": var.name, "rows": rows, "elapsed_s": round(time.monotonic() - t0, 2),
                            "binary": loaded_binary(_extension(var.name).__name__)})
    print(f"correctness {var.name}: {len(rows) - failed}/{len(rows)} cases within bound "
          f"({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
