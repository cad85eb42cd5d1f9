"""Shared by the oracle programs: inputs, the float64 reference, result files.

The oracle programs import the installed `evpack` package (an editable install of this checkout:
`pip install -e .`, which nox does); nothing here edits the import path."""
from __future__ import annotations

import json
import math
import os

import torch

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def make_qkv(b: int, h: int, s: int, d: int, dtype: str, seed: int, layout: str = "bhsd"):
    """Fresh random inputs (never zeros). layout 'bshd' gives SDPA-shaped views with non-trivial strides."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    shape = (b, s, h, d) if layout == "bshd" else (b, h, s, d)
    qkv = [torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(DTYPES[dtype])
           for _ in range(3)]
    if layout == "bshd":
        qkv = [t.transpose(1, 2) for t in qkv]
    return qkv


def reference(q, k, v, causal: bool, scale: float) -> torch.Tensor:
    """Attention in float64 (the ground truth)."""
    q64, k64, v64 = (t.to(torch.float64) for t in (q, k, v))
    scores = torch.matmul(q64, k64.transpose(-1, -2)) * scale
    if causal:
        s = q.shape[-2]
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v64)


def torch_same_precision(q, k, v, causal: bool, scale: float) -> torch.Tensor:
    """PyTorch's own attention in the inputs' precision (the error yardstick of the bound)."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def default_scale(d: int) -> float:
    return 1.0 / math.sqrt(d)


def write_result(path: str, obj) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def cuda_error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"


# -- checked calls: poisoned outputs, untouched inputs, in-place refills (the cheat checks) ---------------

def heavy_tailed(shape, gen, df: int = 3) -> torch.Tensor:
    """Student-t samples (df degrees of freedom) in float32: a normal over the root mean square of df normals."""
    z = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32)
    chi = torch.randn((df, *shape), generator=gen, device="cuda", dtype=torch.float32).square().mean(0)
    return (z / chi.sqrt()).clamp_(-1000.0, 1000.0)


def make_inputs(b: int, h: int, s: int, d: int, dtype: str, seed: int, layout: str = "bhsd", dist: str = "normal"):
    """make_qkv with a choice of distribution: 'normal' (== make_qkv) or 'student_t3' (heavy tails)."""
    if dist == "normal":
        return make_qkv(b, h, s, d, dtype, seed, layout)
    if dist != "student_t3":
        raise ValueError(f"dist: unknown distribution {dist!r}")
    g = torch.Generator(device="cuda").manual_seed(seed)
    shape = (b, s, h, d) if layout == "bshd" else (b, h, s, d)
    qkv = [heavy_tailed(shape, g).to(DTYPES[dtype]) for _ in range(3)]
    return [t.transpose(1, 2) for t in qkv] if layout == "bshd" else qkv


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16)


def snapshot(tensors) -> list[torch.Tensor]:
    return [t.clone() for t in tensors]


def changed_elements(tensors, snap) -> torch.Tensor:
    """Device scalar: elements of q, k, v whose bits differ from the snapshot (no host sync)."""
    return sum((bits(t) != bits(s)).sum() for t, s in zip(tensors, snap, strict=True))


def poisoned_out(q: torch.Tensor) -> torch.Tensor:
    """A NaN-filled output buffer: an element the kernel does not write stays NaN."""
    return torch.full(q.shape, float("nan"), dtype=q.dtype, device=q.device)


def bound_for(q, k, v, causal: bool, scale: float):
    """(float64 reference, PyTorch same-precision error, rounding floor, bound) of one input set."""
    ref = reference(q, k, v, causal, scale)
    pt_err = (torch_same_precision(q, k, v, causal, scale).double() - ref).abs().max().item()
    floor = 2 * (ref.to(q.dtype).double() - ref).abs().max().item()
    return ref, pt_err, floor, 2 * pt_err + floor


def max_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out - ref|, inf when any element is NaN/Inf (e.g. left poisoned)."""
    if not bool(torch.isfinite(out).all().item()):
        return float("inf")
    return (out.double() - ref).abs().max().item()
