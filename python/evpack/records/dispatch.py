"""dispatch_table.json: views of the default-kernel table (dispatch.generate_table writes it)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .view import View


@dataclass(frozen=True)
class RunnerUp(View):
    """A choice's second-best kernel (an empty view when the class had one candidate)."""

    variant: Any
    config: Any
    geomean_us: Any
    raw: Mapping


@dataclass(frozen=True)
class Choice(View):
    """One shape class's default kernel on a device."""

    dtype: Any
    head_dim: Any
    causal: Any
    size: Any
    seq: Any
    variant: Any
    config: Any
    geomean_us: Any
    runner_up: RunnerUp
    candidates: Any
    shapes: Any
    raw: Mapping

    @property
    def shape_class(self) -> tuple:
        return self.dtype, self.head_dim, self.causal, self.size, self.seq

    @property
    def kernel(self) -> tuple:
        return self.variant, self.config


@dataclass(frozen=True)
class ExactRunnerUp(View):
    """A measured shape's second-fastest kernel (an empty view when one kernel ran there)."""

    variant: Any
    config: Any
    median_us: Any
    raw: Mapping


@dataclass(frozen=True)
class ExactChoice(View):
    """One shape the source pack measured and its fastest kernel there (tables of schema 4 and later)."""

    shape: Any
    dtype: Any
    head_dim: Any
    causal: Any
    batch: Any
    heads: Any
    seqlen: Any
    variant: Any
    config: Any
    median_us: Any
    runner_up: ExactRunnerUp
    candidates: Any
    raw: Mapping

    @property
    def dims(self) -> tuple:
        return self.dtype, self.head_dim, self.causal, self.batch, self.heads, self.seqlen

    @property
    def kernel(self) -> tuple:
        return self.variant, self.config


@dataclass(frozen=True)
class DeviceEntry(View):
    name: Any
    capability: Any
    sm_count: Any
    choices: tuple[Choice, ...]
    exact: tuple[ExactChoice, ...]  # empty in a schema-3 table
    raw: Mapping


@dataclass(frozen=True)
class DispatchTable(View):
    schema_version: Any
    generated_by: Any
    source_pack: Any
    source_commit: Any
    source_label: Any
    mode: Any
    rule: Any
    devices: tuple[DeviceEntry, ...]
    raw: Mapping
