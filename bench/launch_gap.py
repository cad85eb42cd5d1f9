"""Where an eager call's time goes besides its kernel: CUDA event time against the kernel's own GPU time.

Not a pack stage: a diagnostic for one GPU host. For each shape and implementation it enqueues, behind one
spin kernel, N calls as the benchmark's cold eager mode does (one small raise kernel before each call, input
sets rotated past 2x L2, a CUDA event pair around each call), under the CUDA profiler, and reports per call:
the event time, the call's kernels and their GPU time, the gap from the previous kernel's end to the call's
first kernel and from its last kernel to the next kernel. With `--plain` the raise kernel is left out too.

    python bench/launch_gap.py --out DIR [--shapes d64,s256,s128] [--calls 40]

Writes DIR/launch_gap.json and prints one table. The gap columns are medians over the N calls; a negative
gap before a call means its kernel started before the previous kernel ended (an overlapped launch).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "oracles"))

import torch  # noqa: E402
from common import DTYPES, default_scale  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from evpack.api import _extension  # noqa: E402
from evpack.timing import baselines, harness, roofline  # noqa: E402

SHAPES = {  # name: (B, H, S, D, dtype, causal, wgmma configs)
    "d64": (16, 16, 512, 64, "fp16", False, ("m192n128w16s2", "m128n128w12s2")),
    "d64c": (16, 16, 512, 64, "fp16", True, ("m128n128w12s2",)),
    "d128": (16, 16, 512, 128, "fp16", False, ("m128n128w12s2",)),
    "s256": (32, 16, 256, 64, "fp16", False, ("m128n128w12s2",)),
    "s128": (64, 16, 128, 64, "fp16", False, ("m128n128w12s2",)),
    "b4": (4, 16, 512, 64, "fp16", False, ("m128n128w12s2",)),
}


def _impls(causal: bool, scale: float, configs):
    for cfg in configs:
        def ours(q, k, v, _c=cfg):
            out = torch.empty_like(q)
            _extension("wgmma").forward(q, k, v, out, causal, scale, "wgmma", _c,
                                        torch.cuda.current_stream().cuda_stream)
            return out
        yield f"wgmma/{cfg}", ours, None
    for backend in ("cudnn", "flash"):
        yield f"sdpa/{backend}", baselines.sdpa_fn(causal), backend


def _kernels(trace: Path) -> list[tuple[str, float, float]]:
    events = json.loads(trace.read_text()).get("traceEvents", [])
    rows = [(e["name"], float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
            if e.get("cat") == "kernel" and "ts" in e and "dur" in e]
    return sorted(rows, key=lambda r: r[1])


def measure(fn, sets, flat, backend, calls: int, raise_first: bool, cycles_per_s: float) -> dict:
    ctx = (lambda: baselines.backend_context(backend)) if backend else contextlib.nullcontext
    one = torch.ones(1, dtype=flat.dtype, device=flat.device)
    idx = torch.randint(0, flat.numel(), (calls + 8,), device=flat.device)
    with ctx():
        for i in range(8):  # warm-up: plan builds, lazy loading
            flat.index_add_(0, idx[i:i + 1], one)
            fn(*sets[i % len(sets)])
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    with tempfile.TemporaryDirectory() as tmp, ctx():
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            torch.cuda._sleep(int(0.02 * cycles_per_s))  # the host enqueues every call while this spins
            for i in range(calls):
                if raise_first:
                    flat.index_add_(0, idx[8 + i:9 + i], one)
                events[i][0].record()
                fn(*sets[i % len(sets)])
                events[i][1].record()
            torch.cuda.synchronize()
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        kernels = _kernels(trace)
    event_us = [a.elapsed_time(b) * 1e3 for a, b in events]
    spin = next((i for i, k in enumerate(kernels) if "sleep" in k[0].lower() or "spin" in k[0].lower()), None)
    if spin is None:
        raise SystemExit("launch_gap: the profile holds no spin kernel; the trace is not the one enqueued")
    # each call as the range [first, last] of its kernels' positions in `kernels` (the spin kernel comes first)
    spans: list[list[int]] = []
    if raise_first:
        for i in range(spin + 1, len(kernels)):
            if "index" in kernels[i][0].lower():
                spans.append([])
            elif spans:
                spans[-1].append(i)
    else:
        per = max(1, (len(kernels) - spin - 1) // calls)
        spans = [list(range(spin + 1 + c * per, spin + 1 + (c + 1) * per)) for c in range(calls)]
    pre, post, dur, names = [], [], [], set()
    for span in (s for s in spans if s):
        first, last = span[0], span[-1]
        pre.append(kernels[first][1] - kernels[first - 1][2])
        if last + 1 < len(kernels):
            post.append(kernels[last + 1][1] - kernels[last][2])
        dur.append(sum(kernels[i][2] - kernels[i][1] for i in span))
        names.update(kernels[i][0][:60] for i in span)
    med = statistics.median
    return dict(event_us=round(med(event_us), 2), kernel_us=round(med(dur), 2) if dur else None,
                kernels_per_call=round(sum(len(k) for k in spans) / max(len(spans), 1), 2),
                gap_before_us=round(med(pre), 2) if pre else None, gap_after_us=round(med(post), 2) if post else None,
                span_us=round(med(event_us) - med(dur), 2) if dur else None, calls=len(spans),
                kernel_names=sorted(names))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default="d64,s256,s128")
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--plain", action="store_true", help="also measure without the raise kernel before each call")
    args = ap.parse_args()
    l2 = harness.device_info()["l2_bytes"]
    cycles = harness.sleep_cycles_per_s(torch.cuda.current_stream())
    rows = []
    for name in args.shapes.split(","):
        b, h, s, d, dtype, causal, configs = SHAPES[name]
        numel = b * h * s * d
        n_sets = roofline.rotation_sets(4 * numel * torch.finfo(DTYPES[dtype]).bits // 8, l2)
        flat = torch.randn(3 * n_sets * numel, device="cuda").to(DTYPES[dtype]) * 0.5
        sets = [tuple(flat[(3 * i + t) * numel:(3 * i + t + 1) * numel].view(b, h, s, d) for t in range(3))
                for i in range(n_sets)]
        for impl, fn, backend in _impls(causal, default_scale(d), configs):
            for raise_first in ((True, False) if args.plain else (True,)):
                r = measure(fn, sets, flat, backend, args.calls, raise_first, cycles)
                rows.append(dict(shape=name, impl=impl, raise_first=raise_first, **r))
                print(f"{name:<6} {impl:<24} {'raise' if raise_first else 'plain':<6} event {r['event_us']:>8.2f} "
                      f"kernel {r['kernel_us']!s:>8} x{r['kernels_per_call']:<4} before {r['gap_before_us']!s:>6} "
                      f"after {r['gap_after_us']!s:>6} span {r['span_us']!s:>6}", flush=True)
        del flat, sets
        torch.cuda.empty_cache()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "launch_gap.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
