"""Development loop for the Hopper variant: correctness sweep, then same-run cold-L2 timings vs SDPA.

Not a pack stage: a quick check while tuning `wgmma` on one H200/H100 (the evidence run is what
counts). It uses the oracles' inputs, float64 reference and error bound (oracles/correctness.py:
max |out - ref| <= 2 * max |torch_out - ref| + floor, NaN-poisoned outputs), and the benchmark
harness (cold mode: input sets rotated past 2x L2, interleaved sampling, event timing).

    python setup.py build_ext --inplace   # EVPACK_VARIANTS=wgmma,mma to build less
    python bench/hopper_dev.py --out DIR [--variants wgmma,mma] [--skip-timing] [--quick] [--shapes d64,d64c]

Prints the correctness summary, then one table per shape: median µs, TFLOP/s, ratio to SDPA's
flash and cuDNN backends. Writes DIR/hopper_dev.json with every row.

Correctness: S in ODD_SEQS (--quick: 77, 512, 513), a strided (B, S, H, D) view, and (both modes) the
MULTI_ITEM shapes, which have more work items than an H200 has SMs, so one persistent CTA runs several
items back to back (the K/V ring, the Q buffers and the cross-item overlap carry over), with tails.
--shapes picks the timed shapes by name (TIMED_NAMES, or a SHAPE_GROUPS key; default all).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "oracles"))

import torch  # noqa: E402
from common import DTYPES, default_scale, make_qkv, reference, torch_same_precision  # noqa: E402

from evpack import registry  # noqa: E402
from evpack.api import _extension, check_inputs  # noqa: E402
from evpack.timing import baselines, harness, roofline  # noqa: E402
from evpack.timing.stats import StopRule  # noqa: E402

ODD_SEQS = (1, 77, 128, 512, 513, 1000)
TIMED = (  # (B, H, S, D, dtype, causal): the canonical shape and its neighbours, then the full suite's losses
    (16, 16, 512, 64, "fp16", False),
    (16, 16, 512, 64, "fp16", True),
    (16, 16, 512, 128, "fp16", False),
    (16, 16, 512, 128, "fp16", True),
    (16, 16, 512, 64, "bf16", False),
    (32, 32, 512, 64, "fp16", False),
    (4, 16, 2048, 64, "fp16", False),
    (2, 16, 4096, 64, "fp16", False),
    (32, 16, 256, 64, "fp16", False),
    (64, 16, 128, 64, "fp16", False),
    (4, 16, 512, 64, "fp16", False),
    (2, 8, 512, 64, "fp16", False),
    (8, 16, 1024, 64, "fp16", False),
    (8, 16, 1024, 64, "fp16", True),
    (4, 16, 2048, 64, "fp16", True),
    (2, 16, 4096, 64, "fp16", True),
    (32, 32, 512, 64, "fp16", True),
    (32, 16, 256, 64, "fp16", True),
    (64, 16, 128, 64, "fp16", True),
    (4, 16, 512, 64, "fp16", True),
    (2, 8, 512, 64, "fp16", True),
)
TIMED_NAMES = ("d64", "d64c", "d128", "d128c", "bf16", "b32h32", "s2048", "s4096", "s256", "s128", "b4",
               "b2h8", "s1024", "s1024c", "s2048c", "s4096c", "b32h32c", "s256c", "s128c", "b4c",
               "b2h8c")  # in order
SHAPE_GROUPS = {"all": TIMED_NAMES, "s512": TIMED_NAMES[:5], "causal": ("d64c", "d128c", "s1024c", "s2048c",
                                                                        "s4096c", "b32h32c", "s256c", "s128c", "b4c",
                                                                        "b2h8c"),
                "long": ("b32h32", "s1024", "s2048", "s4096"), "short": ("s256", "s128", "b4", "b2h8")}
# (B, H, S): > 132 work items of 128 query rows (several per persistent CTA), with a seqlen tail; B1 H23 S1000:
# 184 items of 128 rows (138 of 192), one round of 132 and 52 (6) left, which a tail_split config runs split across
# the grid after it
MULTI_ITEM = ((64, 8, 77), (8, 16, 200), (4, 16, 1000), (1, 23, 1000))
SDPA = ("flash", "cudnn")


def check(var, cfg, shape: dict) -> dict:
    q, k, v = make_qkv(shape["B"], shape["H"], shape["S"], shape["D"], shape["dtype"], shape["seed"],
                       shape["layout"])
    scale = default_scale(shape["D"])
    ref = reference(q, k, v, shape["causal"], scale)
    pt_err = (torch_same_precision(q, k, v, shape["causal"], scale).double() - ref).abs().max().item()
    floor = 2 * (ref.to(DTYPES[shape["dtype"]]).double() - ref).abs().max().item()
    check_inputs(q, k, v, scale=scale, variant=var.name, config=cfg.name)
    out = torch.full(q.shape, float("nan"), dtype=q.dtype, device=q.device)  # poisoned
    _extension(var.name).forward(q, k, v, out, shape["causal"], scale, var.name, cfg.name,
                                 torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    finite = bool(torch.isfinite(out).all().item())
    err = (out.double() - ref).abs().max().item() if finite else float("inf")
    bound = 2 * pt_err + floor
    return dict(variant=var.name, config=cfg.name, **shape, err=err, torch_err=pt_err, bound=bound,
                nonfinite=int((~torch.isfinite(out)).sum().item()), passed=bool(finite and err <= bound))


def correctness(variants, quick: bool) -> list[dict]:
    rows = []
    seqs = (77, 512, 513) if quick else ODD_SEQS
    for var in variants:
        for dtype in var.dtypes:
            for d in var.head_dims:
                for causal in (False, True):
                    shapes = [dict(B=2, H=3, S=s, layout="bhsd") for s in seqs]
                    shapes.append(dict(B=1, H=2, S=200, layout="bshd"))  # strided (B, S, H, D) views
                    shapes += [dict(B=b, H=h, S=s, layout="bhsd") for b, h, s in MULTI_ITEM]
                    if not quick:
                        shapes.append(dict(B=16, H=16, S=512, layout="bhsd"))
                    for i, sh in enumerate(shapes):
                        for cfg in var.configs_for(d):
                            rows.append(check(var, cfg, dict(**sh, D=d, dtype=dtype, causal=causal, seed=i)))
    return rows


def timed_shapes(spec: str) -> list[tuple]:
    """--shapes: comma list of TIMED_NAMES or SHAPE_GROUPS keys -> TIMED entries, in TIMED's order."""
    names: set[str] = set()
    for tok in (t.strip() for t in spec.split(",")):
        if tok in SHAPE_GROUPS:
            names.update(SHAPE_GROUPS[tok])
        elif tok in TIMED_NAMES:
            names.add(tok)
        elif tok:
            raise SystemExit(f"--shapes: unknown {tok!r} (known: {', '.join((*SHAPE_GROUPS, *TIMED_NAMES))})")
    return [shape for name, shape in zip(TIMED_NAMES, TIMED, strict=True) if name in names]


def timing(variants, rule: StopRule, shapes) -> list[dict]:
    stream = torch.cuda.Stream()
    l2 = harness.device_info()["l2_bytes"]
    rows = []
    for b, h, s, d, dtype, causal in shapes:
        set_bytes = 4 * b * h * s * d * torch.finfo(DTYPES[dtype]).bits // 8
        n_sets = roofline.rotation_sets(set_bytes, l2)
        sets = [tuple(make_qkv(b, h, s, d, dtype, 1000 + i)) for i in range(n_sets)]
        scale = default_scale(d)
        timers = []
        for var in variants:
            for cfg in var.configs_for(d):
                def ours(q, k, v, _v=var.name, _c=cfg.name, _causal=causal, _scale=scale):
                    out = torch.empty_like(q)
                    _extension(_v).forward(q, k, v, out, _causal, _scale, _v, _c,
                                           torch.cuda.current_stream().cuda_stream)
                    return out
                timers.append(harness.Timer(ours, sets, "cold", rule, stream=stream, name=f"{var.name}/{cfg.name}"))
        for backend in SDPA:
            fn = baselines.sdpa_fn(causal)
            out, why = baselines.probe(backend, causal, *sets[0])
            if out is None:
                print(f"  sdpa {backend}: cannot run ({why})")
                continue
            timers.append(harness.Timer(fn, sets, "cold", rule, stream=stream, name=f"sdpa/{backend}",
                                        context=lambda _b=backend: baselines.backend_context(_b)))
        harness.sample_interleaved(timers, rule)
        flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
        med, count = {}, {}
        for t in timers:
            ts = sorted(t.times_ms)
            med[t.name] = ts[len(ts) // 2] * 1e3 if ts else float("nan")
            count[t.name] = len(ts)
            if t.error:
                print(f"  {t.name}: {t.error}")
            t.close()
        for name, us in med.items():
            rows.append(dict(B=b, H=h, S=s, D=d, dtype=dtype, causal=causal, impl=name, median_us=round(us, 2),
                             tflops=round(flops / (us * 1e-6) / 1e12, 1),
                             x_flash=round(med.get("sdpa/flash", math.nan) / us, 3),
                             x_cudnn=round(med.get("sdpa/cudnn", math.nan) / us, 3), n=count[name]))
        del sets
        torch.cuda.empty_cache()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--variants", default="wgmma")
    ap.add_argument("--timing-variants", default="wgmma,mma")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--shapes", default="all", help=f"timed shapes: comma list of {', '.join(TIMED_NAMES)} or "
                    f"{', '.join(SHAPE_GROUPS)} (default all)")
    ap.add_argument("--one-call", metavar="CONFIG", help="one call at the canonical shape, nothing else (for ncu)")
    ap.add_argument("--causal", action="store_true", help="with --one-call")
    args = ap.parse_args()
    shapes = timed_shapes(args.shapes)
    if args.one_call:
        q, k, v = make_qkv(16, 16, 512, 64, "fp16", 0)
        out = torch.empty_like(q)
        _extension("wgmma").forward(q, k, v, out, args.causal, default_scale(64), "wgmma", args.one_call,
                                    torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        return 0
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"device: {torch.cuda.get_device_name()} (sm_{''.join(map(str, torch.cuda.get_device_capability()))}), "
          f"torch {torch.__version__}")
    result: dict = {}
    t0 = time.monotonic()
    rows = correctness([registry.get(n) for n in args.variants.split(",") if n], args.quick)
    result["correctness"] = rows
    failed = [r for r in rows if not r["passed"]]
    print(f"correctness: {len(rows) - len(failed)}/{len(rows)} within bound ({time.monotonic() - t0:.1f} s); "
          f"worst err/bound {max((r['err'] / max(r['bound'], 1e-30) for r in rows), default=0):.3f}")
    for r in failed[:20]:
        print(f"  FAIL {r['variant']}/{r['config']} {r['dtype']} D{r['D']} causal={r['causal']} B{r['B']} H{r['H']} "
              f"S{r['S']} {r['layout']}: err {r['err']:.3g} bound {r['bound']:.3g} nonfinite {r['nonfinite']}")
    (out_dir / "hopper_dev.json").write_text(json.dumps(result, indent=1))
    if failed or args.skip_timing:
        return 1 if failed else 0
    rule = StopRule(warmup=5, min_samples=40, max_samples=400, time_cap_s=0.4, target_rel_iqr=0.01)
    built = {r[0] for r in _extension("wgmma").kernels()}
    trows = timing([registry.get(n) for n in args.timing_variants.split(",") if n in built], rule, shapes)
    result["timing"] = trows
    (out_dir / "hopper_dev.json").write_text(json.dumps(result, indent=1))
    print(f"\n{'shape':<28} {'impl':<26} {'µs':>8} {'TFLOP/s':>8} {'x flash':>8} {'x cudnn':>8}")
    for r in trows:
        shape = f"B{r['B']}H{r['H']}S{r['S']} D{r['D']} {r['dtype']}{' causal' if r['causal'] else ''}"
        print(f"{shape:<28} {r['impl']:<26} {r['median_us']:>8.2f} {r['tflops']:>8.1f} {r['x_flash']:>8.3f} "
              f"{r['x_cudnn']:>8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
