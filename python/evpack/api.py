"""`evpack.flash_attention`: the registered kernels as a torch op (torch.library custom op + fake impl).

Inputs are (B, H, S, D) like torch.nn.functional.scaled_dot_product_attention.
Every input rule is checked here with a message that names the argument and the
rule; the structural checks come before the device check, so they run (and are
tested) on CPU torch too. The op launches on the current stream and never
synchronizes, so it can be captured in a CUDA graph and traced by torch.compile.
"""
from __future__ import annotations

import functools
import importlib
import math

import torch

from . import dispatch, registry
from .op import forward_op

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16"}


def _variant(variant: str, config: str | None, include_canaries: bool) -> tuple[registry.Variant, str]:
    if not isinstance(variant, str):
        raise TypeError(f"variant: expected a str, got {type(variant).__name__}")
    var = registry.get(variant, include_canaries=include_canaries)
    if config is not None and not isinstance(config, str):
        raise TypeError(f"config: expected a str or None, got {type(config).__name__}")
    return var, var.config(config).name


def check_inputs(q, k, v, *, scale=None, variant: str = "wmma", config: str | None = None,
                 include_canaries: bool = False) -> tuple[registry.Variant, str, float]:
    """Validate everything; return (variant, config name, scale). Raises TypeError/ValueError."""
    var, cfg = _variant(variant, config, include_canaries)
    named = (("q", q), ("k", k), ("v", v))
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    for name, t in named:
        if t.dim() != 4:
            raise ValueError(f"{name}: expected a 4-D tensor (B, H, S, D), got shape {tuple(t.shape)}")
    if q.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"q: dtype must be torch.float16 or torch.bfloat16, got {q.dtype}")
    for name, t in named[1:]:
        if t.dtype != q.dtype:
            raise TypeError(f"{name}: dtype {t.dtype} differs from q's {q.dtype}; q, k and v must share one dtype")
    for name, t in named[1:]:
        if t.shape != q.shape:
            raise ValueError(f"{name}: shape {tuple(t.shape)} must equal q's shape {tuple(q.shape)} (B, H, S, D)")
    d = q.shape[-1]
    if d not in registry.HEAD_DIMS:
        raise ValueError(f"q: head dim D={d} is not supported (supported: {', '.join(map(str, registry.HEAD_DIMS))})")
    if DTYPE_NAMES[q.dtype] not in var.dtypes or d not in var.head_dims:
        raise ValueError(f"variant: {var.name!r} is built for dtypes {var.dtypes} and head dims {var.head_dims}")
    served = var.head_dims_for(var.config(cfg))
    if d not in served:
        raise ValueError(f"config: {var.name}/{cfg} is built for head dims {served}, not D={d}")
    if q.numel() == 0:
        raise ValueError(f"q: zero-size tensor of shape {tuple(q.shape)}: B, H and S must all be >= 1")
    for name, t in named:
        if t.stride(-1) != 1:
            raise ValueError(f"{name}: the last dim must be contiguous (stride(-1) == 1), got strides {t.stride()}")
        # the binding's rule (csrc/bindings.cpp check_tensor): a dimension of size 1 is never stepped over
        if any(t.shape[i] != 1 and t.stride(i) % 8 for i in range(3)):
            raise ValueError(f"{name}: batch/head/row strides must be multiples of 8 elements (16-byte rows), "
                             f"got strides {t.stride()}")
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale: must be a finite positive number or None, got {scale!r}")
    for name, t in named:
        if t.device.type != "cuda":
            raise ValueError(f"{name}: must be a CUDA tensor, got device {t.device}")
    for name, t in named[1:]:
        if t.device != q.device:
            raise ValueError(f"{name}: on {t.device} but q is on {q.device}; all inputs must share one device")
    _check_device_arch(var, q.device)
    return var, cfg, float(scale)


def _check_device_arch(var: registry.Variant, device: torch.device) -> None:
    """An arch-specific variant (e.g. wgmma: sm_90a) runs only on its one device generation."""
    if not var.archs:
        return
    cap = torch.cuda.get_device_capability(device)
    if not var.runs_on(cap):
        needs = " or ".join(f"sm_{a}" for a in var.archs)
        raise ValueError(f"variant: {var.name!r} is built for {needs} only (a Hopper GPU, compute capability "
                         f"9.0); {device} is sm_{cap[0]}{cap[1]} ({torch.cuda.get_device_name(device)}): "
                         f"choose another variant")


def _extension(variant: str):
    is_canary = any(c.name == variant for c in registry.CANARIES)
    return importlib.import_module("evpack._canaries" if is_canary else "evpack._C")


_fwd = forward_op("evpack::flash_attention_fwd", _extension)  # evpack/op.py: the one op factory


@functools.lru_cache(maxsize=1)
def _table() -> dict | None:
    return dispatch.load_table()


@functools.lru_cache(maxsize=16)
def _device(index: int) -> tuple[str, str, int]:
    props = torch.cuda.get_device_properties(index)
    return props.name, f"{props.major}.{props.minor}", props.multi_processor_count


# Under torch.compile the choice is made once, at trace time, and becomes a constant of the graph (it
# reads a file and asks the driver: nothing to trace).
@torch._dynamo.assume_constant_result
def _choice(device_index: int, dtype: str, head_dim: int, causal: bool, batch: int, heads: int,
            seqlen: int) -> tuple[str, str]:
    name, capability, sm_count = _device(device_index)
    variant, config, _ = dispatch.pick(_table(), device_name=name, capability=capability, sm_count=sm_count,
                                       dtype=dtype, head_dim=head_dim, causal=causal, batch=batch, heads=heads,
                                       seqlen=seqlen)
    return variant, config


def default_kernel(q, *, causal: bool) -> tuple[str, str]:
    """(variant, config) that `flash_attention` runs when no variant is given: the dispatch table's choice
    for q's device and shape class (python/evpack/dispatch_table.json), else the registry's first tensor variant."""
    if not (isinstance(q, torch.Tensor) and q.dim() == 4 and q.device.type == "cuda" and q.dtype in DTYPE_NAMES):
        return dispatch.fallback()  # check_inputs then says what is wrong with q
    index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    return _choice(index, DTYPE_NAMES[q.dtype], int(q.shape[-1]), bool(causal), int(q.shape[0]), int(q.shape[1]),
                   int(q.shape[2]))


def flash_attention(q, k, v, *, causal: bool = False, scale: float | None = None, variant: str | None = None,
                    config: str | None = None) -> torch.Tensor:
    """softmax(scale * q @ k^T [causal mask]) @ v for (B, H, S, D) CUDA tensors in fp16/bf16, D in {64, 128}.

    causal masks key j > query i (top-left aligned, as SDPA's is_causal for equal lengths).
    scale defaults to 1/sqrt(D). variant/config pick a registered kernel (`python -m evpack kernels`);
    variant=None runs the fastest verified kernel for this device and shape class (`default_kernel`).
    """
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected a bool, got {type(causal).__name__}")
    if variant is None:
        if config is not None:
            raise ValueError(f"config: {config!r} needs a variant (variant=None picks both)")
        variant, config = default_kernel(q, causal=causal)
    _, cfg, scale = check_inputs(q, k, v, scale=scale, variant=variant, config=config)
    return _fwd(q, k, v, causal, scale, variant, cfg)


def run_kernel(q, k, v, *, causal: bool, variant: str, config: str | None = None,
               scale: float | None = None) -> torch.Tensor:
    """Like flash_attention, but also reaches the canaries (for the oracles only)."""
    _, cfg, scale = check_inputs(q, k, v, scale=scale, variant=variant, config=config, include_canaries=True)
    return _fwd(q, k, v, causal, scale, variant, cfg)
