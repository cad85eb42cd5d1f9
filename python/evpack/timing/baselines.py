"""PyTorch SDPA baselines: the default dispatch and each backend forced, plus the fp32 reference.

Each backend runs under torch.nn.attention.sdpa_kernel(SDPBackend.X). Which kernel really
ran is read from the profiler (kernel names of one extra call) and mapped to a backend by
KERNEL_SIGNATURES, the one place that knows those raw strings. A backend that cannot run
a shape raises "No available kernel" (with UserWarnings naming why); probe() turns that
into (False, reason) so the stage writes an `unsupported` row instead of stopping.
"""
from __future__ import annotations

import contextlib
import warnings

BACKENDS = ("default", "flash", "efficient", "cudnn", "math")
_SDP_NAMES = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
              "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
# Profiler kernel-name substrings -> backend, checked in this order (cuDNN's Hopper
# kernels contain "flash" too, so cudnn goes first; the math path is gemm + softmax).
KERNEL_SIGNATURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cudnn", ("cudnn",)),
    ("flash", ("flash_fwd",)),
    ("efficient", ("fmha_cutlass", "memeffattention")),
    ("math", ("softmax",)),
)
ROUNDING_FLOOR = {"fp16": 2.0 ** -10, "bf16": 2.0 ** -7}  # one ulp at 1.0


def classify_kernels(names: list[str]) -> str:
    """Which SDPA backend a list of kernel names belongs to ('unknown' if none matches)."""
    lowered = [n.lower() for n in names]
    for backend, needles in KERNEL_SIGNATURES:
        if any(needle in n for n in lowered for needle in needles):
            return backend
    return "unknown"


def error_bound(torch_err: float, dtype: str) -> float:
    """Allowed max |ours - ref32|: 2x PyTorch's own same-precision error + one ulp at 1.0."""
    return 2.0 * torch_err + ROUNDING_FLOOR[dtype]


def backend_context(name: str):
    """Context manager forcing one SDPA backend (no-op for 'default')."""
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    if name == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(getattr(SDPBackend, _SDP_NAMES[name]))


def sdpa_fn(causal: bool):
    import torch.nn.functional as F

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return fn


def probe(name: str, causal: bool, q, k, v):
    """Run one call under the backend; (output, '') or (None, reason) if it cannot run this shape."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with backend_context(name):
                out = sdpa_fn(causal)(q, k, v)
            return out, ""
        except RuntimeError as exc:
            why = [str(exc).strip()] + [str(w.message).strip() for w in caught]
            return None, " | ".join(" ".join(x.split()) for x in why if x)[:600]


def kernels_ran(fn, args) -> list[str]:
    """Names of the GPU kernels one call of fn(*args) launched (profiler, one extra call)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    names: list[str] = []
    for e in prof.events():
        if e.device_type == DeviceType.CUDA and e.name not in names:
            names.append(e.name)
    return [n[:200] for n in names]


def reference(q, k, v, causal: bool):
    """fp32 SDPA-math output for the inputs (upcast copies; inputs untouched)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)


def max_abs_err(out, ref) -> float | None:
    """max |out - ref| in fp32; None when out has NaN/Inf (always a failure)."""
    import torch

    diff = (out.float() - ref).abs()
    if not torch.isfinite(diff).all():
        return None
    return float(diff.max().item())
