"""The base side inside the benchmark process: REF's extension loaded next to the head's, as timed callables.

Two copies of the extension in one process: the head's is `evpack._C` (imported by
evpack.api); the base's shared object, built in REF's worktree, is loaded by path under the
module name BASE_MODULE with importlib's ExtensionFileLoader. Python keys extension modules
by file path and name, the dynamic loader opens the two files separately (RTLD_LOCAL), and
setup.py builds with -fvisibility=hidden, so no evpack symbol is exported but PyInit__C (`nm -D`
of a build shows only inline std/ATen template helpers besides it): each copy keeps its own
kernel registry and launches its own kernels.

The base is called through its own torch custom op (`evpack_ab::base_fwd`), made by the same
factory as the head's `evpack::flash_attention_fwd` (evpack/op.py: check the pointers, allocate the
output, launch on the current stream), so both sides pay the same dispatch on the host and run under
CUDA-graph capture the same way. What the base registered is read from the binary itself (`_C.kernels()`), not from the
head's registry, so variants and configs that exist on one side only become new/removed rows.
GPU only (torch at import); used by the bench stage and the ShapeRunner.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path

from ..binary import sha256_file
from ..op import forward_op
from .ab import BASE

BASE_MODULE = "evpack_ab_base._C"
_EXT: dict[str, object] = {}  # the loaded base extension, read by the custom op


def load_extension(path: Path, name: str = BASE_MODULE):
    """Load a built evpack extension from `path` under module name `name` (not put in sys.modules)."""
    path = Path(path).resolve()
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
    if spec is None:
        raise ImportError(f"cannot load an extension from {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


_base_fwd = forward_op("evpack_ab::base_fwd", lambda variant: _EXT["base"])  # evpack/op.py, as the head's


@dataclass(frozen=True)
class BaseSide:
    """REF's extension as the ShapeRunner sees it: the kernels it holds and a callable per kernel."""

    path: str
    sha256: str
    kernels: tuple[tuple[str, str, str, int], ...]  # (variant, config, dtype, head_dim) from _C.kernels()
    variants: tuple[str, ...] | None = None  # the --variants filter, applied to both sides

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """(variant, config) pairs in the binary's order, after the variants filter."""
        seen: dict[tuple[str, str], None] = {}
        for v, c, _, _ in self.kernels:
            if self.variants is None or v in self.variants:
                seen[(v, c)] = None
        return list(seen)

    def built_for(self, variant: str, config: str, dtype: str, head_dim: int) -> bool:
        return (variant, config, dtype, head_dim) in self.kernels

    def fn(self, variant: str, config: str, causal: bool, head_dim: int):
        scale = 1.0 / math.sqrt(head_dim)  # the head's default (evpack.api.check_inputs)

        def call(q, k, v):
            return _base_fwd(q, k, v, causal, scale, variant, config)

        return call


def load_base(path: Path, variants: list[str] | None = None) -> BaseSide:
    """Load REF's extension once per process and describe it (its SHA-256 and its kernels)."""
    if "base" not in _EXT:
        _EXT["base"] = load_extension(path)
    ext = _EXT["base"]
    kernels = tuple((str(v), str(c), str(d), int(h)) for v, c, d, h, *_ in ext.kernels())
    return BaseSide(str(Path(path).resolve()), sha256_file(Path(path)), kernels,
                    tuple(variants) if variants else None)


__all__ = ["BASE", "BASE_MODULE", "BaseSide", "load_base", "load_extension"]
