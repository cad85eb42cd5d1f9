"""A kernel row of the SASS stage (sass/outcome.json -> data -> kernels, the canaries' kernels, off_target) as a
typed, read-only view (records/view.py): what the stage's own checks and its report read of a row. The row is
written by stages/sass.kernel_row as JSON; this view never writes.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .view import KernelNamed, View, objects


@dataclass(frozen=True)
class SassRow(View, KernelNamed):
    """One function of one module on one arch: who it is, its opcode counts and its proof-gate status."""

    module: Any = None
    arch: Any = None
    symbol: Any = None
    variant: Any = None  # None: a function the registry does not know
    config: Any = None
    dtype: Any = None
    head_dim: Any = None
    kind: Any = None  # the registry's kind: tensor / scalar
    canary: Any = None
    instructions: Any = None
    tensor_math: Any = None
    tensor_forms: Any = None
    # counts of parsers.sass.TABLE_OPCODES (lower case) and of the HFMA2.MMA full form
    hmma: Any = None
    hgmma: Any = None
    ffma: Any = None
    hfma2: Any = None
    mufu: Any = None
    ldsm: Any = None
    ldgsts: Any = None
    lds: Any = None
    sts: Any = None
    ldg: Any = None
    stg: Any = None
    ldl: Any = None
    stl: Any = None
    bar: Any = None
    hfma2_mma: Any = None
    first_tensor_lines: Any = None  # [{"address", "text"}]
    status: Any = None
    reason: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    def first_lines(self) -> list[tuple[Any, Any]]:
        """(address, text) of the first tensor-core instructions, as the row holds them."""
        return [(q.get("address"), q.get("text")) for q in objects(self.first_tensor_lines)]


def rows_of(value: Any) -> list[SassRow]:
    return [SassRow.from_json(r) for r in objects(value)]
