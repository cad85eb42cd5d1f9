"""Mangled kernel symbol -> (variant, config, dtype, head dim), through the registry.

Every kernel is `template <class Cfg, class T, int kHeadDim> __global__ void
evpack::<variant>::fwd_kernel(evpack::FwdParams)` with Cfg = `<ns>::cfg_<config>`, so
its Itanium-mangled name is, for example,

    _ZN6evpack4wmma10fwd_kernelINS0_14cfg_m64n64w4s1E6__halfLi64EEEvNS_9FwdParamsE
        evpack :: wmma :: fwd_kernel < wmma::cfg_m64n64w4s1, __half, 64 > (FwdParams)

Pure: a symbol outside this scheme, or one naming no registry entry, gives None (the
gates report it as an unknown kernel); `explain` says why.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .. import registry

# C++ element type (as mangled: <length><name>) -> registry dtype. The one mapping.
MANGLED_DTYPES = {"6__half": "fp16", "13__nv_bfloat16": "bf16"}
_NAMESPACE = "evpack"
_KERNEL = "fwd_kernel"


@dataclass(frozen=True)
class KernelId:
    variant: str
    config: str
    dtype: str  # "fp16" / "bf16"
    head_dim: int
    kind: str  # registry kind: "scalar" / "tensor"
    canary: bool

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.variant, self.config, self.dtype, self.head_dim)

    @property
    def label(self) -> str:
        return f"{self.variant}/{self.config}/{self.dtype}/d{self.head_dim}"


@dataclass(frozen=True)
class ParsedSymbol:
    variant: str
    config: str
    dtype: str
    head_dim: int


def _source_name(s: str, i: int) -> tuple[str, int] | None:
    """<length><identifier> at s[i:] -> (identifier, index after it)."""
    m = re.compile(r"(\d+)").match(s, i)
    if not m:
        return None
    n, j = int(m.group(1)), m.end()
    if j + n > len(s):
        return None
    return s[j:j + n], j + n


def parse_symbol(symbol: str) -> ParsedSymbol | None:
    """The scheme's fields, without consulting the registry; None if the name is not of the scheme."""
    if not symbol.startswith("_ZN"):
        return None
    i = 3
    names = []
    for _ in range(3):  # evpack, <variant>, fwd_kernel
        got = _source_name(symbol, i)
        if got is None:
            return None
        name, i = got
        names.append(name)
    if names[0] != _NAMESPACE or names[2] != _KERNEL or not symbol.startswith("I", i):
        return None
    i += 1
    # Cfg: N S0_ <cfg> E (in the variant's namespace), N S_ <cfg> E (in evpack::), or a plain <cfg>.
    for prefix in ("NS0_", "NS_", ""):
        if symbol.startswith(prefix, i):
            got = _source_name(symbol, i + len(prefix))
            if got is None:
                continue
            cfg, j = got
            if prefix:
                if not symbol.startswith("E", j):
                    continue
                j += 1
            break
    else:
        return None
    if not cfg.startswith("cfg_"):
        return None
    mangled = next((m for m in MANGLED_DTYPES if symbol.startswith(m, j)), None)
    if mangled is None:
        return None
    dtype, j = MANGLED_DTYPES[mangled], j + len(mangled)
    m = re.compile(r"Li(\d+)EE").match(symbol, j)
    if not m:
        return None
    return ParsedSymbol(variant=names[1], config=cfg[len("cfg_"):], dtype=dtype, head_dim=int(m.group(1)))


def _lookup(parsed: ParsedSymbol, variants) -> tuple[KernelId | None, str]:
    canaries = {v.name for v in registry.CANARIES}
    for v in variants:
        if v.name != parsed.variant:
            continue
        if parsed.config not in {c.name for c in v.configs}:
            return None, f"config {parsed.config!r} is not registered for variant {v.name!r}"
        if parsed.dtype not in v.dtypes:
            return None, f"dtype {parsed.dtype} is not registered for variant {v.name!r}"
        if parsed.head_dim not in v.head_dims:
            return None, f"head dim {parsed.head_dim} is not registered for variant {v.name!r}"
        if not v.config(parsed.config).serves(parsed.head_dim):
            return None, f"head dim {parsed.head_dim} is not registered for config {parsed.config!r} of {v.name!r}"
        return KernelId(v.name, parsed.config, parsed.dtype, parsed.head_dim, v.kind, v.name in canaries), ""
    return None, f"variant {parsed.variant!r} is not in the registry"


def identify(symbol: str, variants=None) -> KernelId | None:
    """The registry kernel a mangled symbol names (variants: default all, canaries included)."""
    parsed = parse_symbol(symbol)
    if parsed is None:
        return None
    return _lookup(parsed, registry.variants(include_canaries=True) if variants is None else variants)[0]


def explain(symbol: str, variants=None) -> str:
    """Why `identify` gives None for a symbol ('' when it maps)."""
    parsed = parse_symbol(symbol)
    if parsed is None:
        return f"not of the form {_NAMESPACE}::<variant>::{_KERNEL}<cfg_<config>, __half or __nv_bfloat16, D>"
    return _lookup(parsed, registry.variants(include_canaries=True) if variants is None else variants)[1]


def describe(symbol: str, variants=None) -> str:
    """Who a kernel belongs to, in words for a reason (pure): 'variant mma (mma/m128n64w4s2/fp16/d64)',
    'canary canary_memo (...)', 'an evpack::<variant> kernel the registry does not hold (<why>)', or, for a
    name outside the scheme (a library or torch kernel), 'not from the extension'."""
    kid = identify(symbol, variants)
    if kid is not None:
        return f"{'canary' if kid.canary else 'variant'} {kid.variant} ({kid.label})"
    parsed = parse_symbol(symbol)
    if parsed is not None:
        return f"an {_NAMESPACE}::{parsed.variant} kernel the registry does not hold ({explain(symbol, variants)})"
    return "not from the extension"
