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
    z = torch.randn(shape, generator=gen, device=gen.device, dtype=torch.float32)
    chi = torch.randn((df, *shape), generator=gen, device=gen.device, dtype=torch.float32).square().mean(0)
    return (z / chi.sqrt()).clamp_(-1000.0, 1000.0)


# Structured input families (stages/correctness.shortcut_cases draws them): the inputs real models produce,
# where a kernel tuned on Gaussian data may take a wrong fast path. Each starts from the normal inputs of the
# seed and reshapes them (in float32, before the cast):
#   sink              key 0 dominates every row: q carries a constant 1 in head dim 0, key 0 is zero but for a
#                     large value there, so its logit is ln(S) + SINK_EXTRA_LOGIT in every row against the others'
#                     N(0, 1): ~90% of each row's mass, the other keys keep the rest (causal rows see key 0 too).
#   outlier_channels  a few head dims (2 or 3, drawn) of q, of k and of v (disjoint) hold +-750..1000, as LLM
#                     activation outliers do. Scale chosen so fp16 holds every intermediate of the reference:
#                     |q.k| <= 2 * 3 * 1000 * ~5.5 (a normal's largest draw) ~ 3.3e4 < 65504 before the softmax
#                     scale, so even PyTorch's fp16 math path (scores rounded to fp16) cannot overflow; logits
#                     are then in the hundreds (near one-hot rows) and outputs reach 1e3.
#   ties              every key of a (batch, head) equals its key 0: all scores of a row tie, softmax rows are
#                     uniform and the output is the mean of the visible values.
FAMILIES = ("normal", "student_t3", "sink", "outlier_channels", "ties")
SINK_EXTRA_LOGIT = 3.0
OUTLIER_RANGE = (750.0, 1000.0)  # |value| of an outlier element
OUTLIER_CHANNELS = (2, 3)  # head dims per tensor that carry outliers (drawn in this range)


def structure(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dist: str, gen: torch.Generator) -> None:
    """Reshape float32 (B, H, S, D) q, k, v (views allowed) in place into family `dist` (see FAMILIES)."""
    d, s = q.shape[-1], q.shape[-2]
    if dist == "sink":
        q[..., 0] = 1.0
        k[..., 0, :] = 0.0
        k[..., 0, 0] = (math.log(s) + SINK_EXTRA_LOGIT) / default_scale(d)
    elif dist == "outlier_channels":
        lo, hi = OUTLIER_CHANNELS
        c = int(torch.randint(lo, hi + 1, (1,), generator=gen, device=gen.device).item())
        dims = torch.randperm(d, generator=gen, device=gen.device)[: 3 * c].tolist()
        for i, t in enumerate((q, k, v)):
            mine = dims[i * c:(i + 1) * c]
            shape = (*t.shape[:-1], c)
            mag = torch.empty(shape, device=gen.device, dtype=torch.float32).uniform_(*OUTLIER_RANGE, generator=gen)
            sign = torch.randint(0, 2, shape, generator=gen, device=gen.device).to(torch.float32) * 2 - 1
            t[..., mine] = (mag * sign).to(t.device)
    elif dist == "ties":
        k.copy_(k[..., :1, :].clone().expand_as(k))
    else:
        raise ValueError(f"dist: {dist!r} is not a structured family ({', '.join(FAMILIES[2:])})")


def make_inputs(b: int, h: int, s: int, d: int, dtype: str, seed: int, layout: str = "bhsd", dist: str = "normal",
                device: str = "cuda"):
    """make_qkv with a choice of input family (FAMILIES): 'normal' (== make_qkv), 'student_t3' (heavy tails),
    or a structured family ('sink', 'outlier_channels', 'ties': see structure())."""
    if dist not in FAMILIES:
        raise ValueError(f"dist: unknown distribution {dist!r} (known: {', '.join(FAMILIES)})")
    if dist == "normal" and device == "cuda":
        return make_qkv(b, h, s, d, dtype, seed, layout)
    g = torch.Generator(device=device).manual_seed(seed)
    shape = (b, s, h, d) if layout == "bshd" else (b, h, s, d)
    if dist == "student_t3":
        qkv = [heavy_tailed(shape, g) for _ in range(3)]
    else:
        qkv = [torch.randn(shape, generator=g, device=device, dtype=torch.float32) for _ in range(3)]
        if dist != "normal":
            structure(*[t.transpose(1, 2) if layout == "bshd" else t for t in qkv], dist, g)
    qkv = [t.to(DTYPES[dtype]) for t in qkv]
    return [t.transpose(1, 2) for t in qkv] if layout == "bshd" else qkv


def storage_span(t: torch.Tensor) -> tuple[int, int]:
    """[start, end) byte addresses of the storage behind `t` (a view shares its base's storage)."""
    st = t.untyped_storage()
    return st.data_ptr(), st.data_ptr() + st.nbytes()


def storage_overlaps(named: dict[str, torch.Tensor]) -> list[tuple[str, str]]:
    """Pairs of names whose tensors' storages overlap in memory: an output that is an input, a view of one,
    another call's output, or a slice of one persistent buffer (a fresh output never shares a storage, so
    disjoint slices of one count too). Tensors of zero bytes overlap nothing."""
    spans = [(n, *storage_span(t)) for n, t in named.items()]
    out = []
    for i, (a, a0, a1) in enumerate(spans):
        for b, b0, b1 in spans[i + 1:]:
            if a0 < a1 and b0 < b1 and a0 < b1 and b0 < a1:
                out.append((a, b))
    return out


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
