"""The tensor_proof stage's records as typed, read-only views (records/view.py): a target's manifest
(tensor_proof/<variant>.manifest.json: the calls it made, the marker kernel between them), one call of it, and
one call's row (the call with what Nsight Compute counted of it: stages/tensor_proof._row builds it, the data's
`calls` keep a projection of it, report.md reads those). These views never write.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .view import View, objects


@dataclass(frozen=True)
class NcuManifest(View):
    """tensor_proof/<variant>.manifest.json: the calls of the target, the marker kernel, the binary it loaded."""

    calls: Any = None
    marker: Any = None
    binary: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class NcuCall(View):
    """One call of a manifest: the kernel it ran (variant, kind, config, dtype), its shape and causality, and the
    matrix FLOPs the call must do (required) and does with its tiles' padding."""

    variant: Any = None
    kind: Any = None
    config: Any = None
    dtype: Any = None
    B: Any = None
    H: Any = None
    S: Any = None
    D: Any = None
    causal: Any = None
    required_flops: Any = None
    tile_padded_flops: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class CallRow(NcuCall):
    """A call and what ncu counted of its own kernels (and of foreign ones, which fail it), and the verdict."""

    kernel: Any = None
    executed_tensor_flops: Any = None
    coverage: Any = None
    padding_overhead: Any = None
    tensor_math_inst: Any = None
    metrics: Any = None
    foreign_kernels: Any = None  # absent: no kernel but the call's own ran
    foreign_tensor_flops: Any = None
    passed: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


def call_rows(value: Any) -> list[CallRow]:
    return [CallRow.from_json(r) for r in objects(value)]


@dataclass(frozen=True)
class TensorProofData(View):
    """tensor_proof/outcome.json -> data: every profiled call's row (a CallRow projection), the canaries."""

    calls: Any = None
    canaries: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)
