"""env.json (envlock.collect_env) and bench/gpu_limits.json: views of what the run recorded of its machine."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .view import View


@dataclass(frozen=True)
class GpuLimits(View):
    """One GPU of an nvidia-smi limits query (envlock.gpu_limits): the queried values by nvidia-smi's field
    names, and the SKU lines of `nvidia-smi -q`."""

    values: Mapping
    sku: Mapping
    raw: Mapping


@dataclass(frozen=True)
class LimitsQuery(View):
    """envlock.gpu_limits(): one entry per GPU."""

    gpus: tuple[GpuLimits, ...]
    raw: Mapping

    @property
    def first(self) -> GpuLimits | None:
        """The first GPU's limits (None when the first entry is missing, empty or not an object)."""
        gpus = self.raw.get("gpus")
        return self.gpus[0] if isinstance(gpus, list) and gpus and isinstance(gpus[0], Mapping) and gpus[0] else None


@dataclass(frozen=True)
class SmiQuery(View):
    """env.json -> nvidia_smi_query: the driver's own facts, and since the GPU-limits record its limits."""

    limits: LimitsQuery
    raw: Mapping


@dataclass(frozen=True)
class GpuLimitsFile(View):
    """bench/gpu_limits.json: the limits before and after the timed shapes."""

    before: LimitsQuery
    after: LimitsQuery
    raw: Mapping


@dataclass(frozen=True)
class EnvJson(View):
    """env.json: the run's machine (the reports' machine line, the provenance predicate and a merged verdict's
    member record repeat these fields)."""

    gpu_name: Any
    driver_version: Any
    compute_capability: Any
    cuda_version: Any
    torch_version: Any
    nvidia_smi_query: SmiQuery
    git_commit: Any  # the commit and dirty flag the run saw (crosscheck: pack.json's git)
    git_dirty: Any
    raw: Mapping
