"""The Triton part of a build as typed, read-only views (records/view.py): build/triton/<ext>/manifest.json
(python/evpack/triton_aot.py writes it: every kernel with the files it made, every fat binary) and
build/triton.json (per extension: the manifest's digest, the shared object its cubins were matched against,
the Triton versions, how many cubins are embedded). These views never write.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .view import View


@dataclass(frozen=True)
class TritonFile(View):
    """One file a kernel's compile made (manifest kernel -> files -> kind): its path under the manifest's folder
    and the SHA-256 of its raw bytes."""

    path: Any = None
    sha256: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class TritonKernel(View):
    """One kernel compiled for one arch (a manifest's kernels)."""

    variant: Any = None
    config: Any = None
    dtype: Any = None
    head_dim: Any = None
    arch: Any = None
    symbol: Any = None
    shared: Any = None
    num_warps: Any = None
    num_stages: Any = None
    block_m: Any = None
    block_n: Any = None
    files: Mapping = field(default_factory=dict)  # kind ("cubin", "ptx", "json", "ptxas.log") -> TritonFile's object
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    def file(self, kind: str) -> TritonFile:
        return TritonFile.from_json(self.files.get(kind))

    @property
    def cubin(self) -> TritonFile:
        return self.file("cubin")


@dataclass(frozen=True)
class TritonManifest(View):
    """build/triton/<ext>/manifest.json: the kernels (per arch) and fat binaries (per config) of one extension."""

    schema_version: Any = None
    extension: Any = None
    triton_version: Any = None
    triton_required: Any = None
    kernels: Any = None  # the list as the file holds it: `rows` gives its views
    fatbins: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def rows(self) -> list[TritonKernel]:
        return [TritonKernel.from_json(k) for k in self.kernels or []]


@dataclass(frozen=True)
class TritonRecord(View):
    """One extension's entry of build/triton.json."""

    manifest_sha256: Any = None
    so_sha256: Any = None
    kernels: Any = None
    cubins_embedded: Any = None
    triton_version: Any = None
    triton_required: Any = None
    problems: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

