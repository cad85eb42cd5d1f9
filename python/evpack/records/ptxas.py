"""The PTXAS stage's records as typed, read-only views (records/view.py): a kernel row (ptxas/outcome.json -> data
-> kernels, the canaries' kernels, off_target: what the stage's reason and its report read of a row; the row is
written by stages/ptxas._row as JSON), a log of the data's logs with its advisories, and the data report.md
reads. These views never write.
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


@dataclass(frozen=True)
class AdvisoryEntry(View):
    """A ptxas performance advisory as a log entry holds it (parsers/ptxas.PtxasAdvisory and voids_design)."""

    code: Any = None
    kind: Any = None
    line: Any = None
    arch: Any = None
    function: Any = None
    voids_design: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class LogEntry(View):
    """One build/ptxas/<object>.log as the data's logs name it: what was parsed of it, or why it was not."""

    object: Any = None
    path: Any = None
    command: Any = None
    built_archs: Any = None
    kernels: Any = None
    error: Any = None
    diagnostics: Any = None
    advisories: tuple[AdvisoryEntry, ...] = ()
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class PtxasData(View):
    """ptxas/outcome.json -> data: what report.md reads of it (the canaries are read by records/canary.py)."""

    logs: tuple[LogEntry, ...] = ()
    archs: Any = None
    summary: Any = None
    problems: Any = None
    kernels: Any = None
    canaries: Any = None
    off_target: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)
