"""The build stage's records as typed, read-only views (records/view.py): build/result.json (the build command's
result), build/binary.json and its kind (one shared object and its SHA-256; sass/binary.json is the same
record), a build/kernels.json row (one kernel the built extension registered), a build/skipped_<ext>.json
entry, build/build_tools.json, and the build outcome's data that report.md reads. These views never write.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .view import View

KERNEL_KEY = ("variant", "config", "dtype", "head_dim")  # the fields that name a kernels.json row


@dataclass(frozen=True)
class BuildResult(View):
    """build/result.json: the build command, its exit status, the build's environment, the tools record kept."""

    command: Any = None
    returncode: Any = None
    elapsed_s: Any = None
    env: Any = None
    build_tools: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class BuiltKernel(View):
    """A build/kernels.json row: a kernel the extension registered, its launch shape and its extension."""

    variant: Any = None
    config: Any = None
    dtype: Any = None
    head_dim: Any = None
    dynamic_smem_bytes: Any = None
    threads: Any = None
    module: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def extension(self) -> Any:
        """The module the kernel is in (rows written before kernels.json named it: evpack._C)."""
        return self.module if "module" in self.raw else "evpack._C"

    def key(self) -> tuple:
        """(variant, config, dtype, head_dim as int); KeyError naming the first of those the row lacks."""
        missing = [name for name in KERNEL_KEY if name not in self.raw]
        if missing:
            raise KeyError(missing[0])
        return self.variant, self.config, self.dtype, int(self.head_dim)


@dataclass(frozen=True)
class SkippedVariant(View):
    """A build/skipped_<ext>.json entry: a variant the build left out, and why."""

    variant: Any = None
    reason: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class ToolInfo(View):
    """build/build_tools.json's ninja or compiler_cache: its name, version and (a cache) this build's counts."""

    name: Any = None
    version: Any = None
    counts: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class BuildTools(View):
    """build/build_tools.json: the ninja and the compiler cache the build ran (each a ToolInfo's object)."""

    ninja: Any = None
    compiler_cache: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class BuildEnv(View):
    """The build's environment as result.json (and the outcome's data) holds it."""

    EVPACK_CUDA_ARCHS: Any = None
    EVPACK_NVCC_FLAGS: Any = None
    EVPACK_VARIANTS: Any = None
    EVPACK_CANARIES: Any = None
    MAX_JOBS: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class BuildData(View):
    """build/outcome.json -> data: the shared objects' digests, counts, the environment, Triton's part."""

    so_sha256: Any = None
    so_path: Any = None
    canaries_sha256: Any = None
    ptxas_logs: Any = None
    kernels: Any = None
    env: BuildEnv = field(default_factory=BuildEnv)
    triton: Any = None
    skipped_variants: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)
