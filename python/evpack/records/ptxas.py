"""A kernel row of the PTXAS stage (ptxas/outcome.json -> data -> kernels, the canaries' kernels, off_target) as a
typed, read-only view (records/view.py): what the stage's reason and its report read of a row. The row is written
by stages/ptxas._row as JSON; this view never writes.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .view import KernelNamed, View, objects


@dataclass(frozen=True)
class PtxasRow(View, KernelNamed):
    """One kernel of one object on one arch: its resources as ptxas reported them, its budget and occupancy."""

    object: Any = None
    arch: Any = None
    symbol: Any = None
    variant: Any = None  # None: a kernel the registry does not know
    config: Any = None
    dtype: Any = None
    head_dim: Any = None
    kind: Any = None
    canary: Any = None
    registers: Any = None
    stack_bytes: Any = None
    spill_store_bytes: Any = None
    spill_load_bytes: Any = None
    static_smem_bytes: Any = None
    dynamic_smem_bytes: Any = None
    smem_limit_bytes: Any = None
    budget_spill_bytes: Any = None
    budget_stack_bytes: Any = None
    occ_blocks_per_sm: Any = None
    occ_warps_per_sm: Any = None
    occ_limiter: Any = None
    status: Any = None
    reason: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


def rows_of(value: Any) -> list[PtxasRow]:
    return [PtxasRow.from_json(r) for r in objects(value)]
