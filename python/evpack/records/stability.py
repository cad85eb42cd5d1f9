"""The stability oracle's result (oracles/stability.py: stability/<cell>.json) as typed, read-only views
(records/view.py, records/required.py), and the per-run record the stability stage writes under
outcome.json's data ("variants", "diagnostic"). derive() decides each row from these views; the fields a row's
verdict needs are required (absent: KeyError, as the dict read was), the others read None when absent.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .required import Strict
from .view import View


@dataclass(frozen=True, eq=False, repr=False)
class Refill(Strict):
    """In-place refills of the inputs behind a pending side-stream producer, and how many gave a wrong output."""

    required = frozenset({"rounds", "bad_rounds", "worst_err"})
    rounds: Any = None
    bad_rounds: Any = None
    worst_err: Any = None
    rounds_detail: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, eq=False, repr=False)
class OwnKernel(Strict):
    """The kernel the captured call must launch (the registry's name of it)."""

    required = frozenset({"variant", "config", "dtype", "D"})
    variant: Any = None
    config: Any = None
    dtype: Any = None
    D: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def kernel(self) -> tuple:
        return self.variant, self.config, self.dtype, self.D


@dataclass(frozen=True)
class GraphNode(View):
    """A node of the captured graph: its type (kernel, memcpy, conditional, ...) and a kernel's mangled name."""

    type: Any = None
    name: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, eq=False, repr=False)
class Phase(Strict):
    """The eager launches or the graph replays of one row: the counters of runs that differed, the input
    comparison, the refills; the graph phase also its capture time and nodes."""

    required = frozenset({"launches", "mismatched_launches", "mismatched_replays", "inputs_changed", "refill",
                          "capture_s", "own_kernel"})
    launches: Any = None
    replays: Any = None
    mismatched_elements: Any = None
    mismatched_launches: Any = None
    mismatched_replays: Any = None
    inputs_changed: Any = None
    refill: Refill = field(default_factory=Refill)
    capture_s: Any = None
    nodes: Any = None
    nodes_error: Any = None
    own_kernel: OwnKernel = field(default_factory=OwnKernel)
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    def counter(self, name: str, default: Any = 0) -> Any:
        """A counter the phase records (`default` when an older oracle does not record it)."""
        return self.raw.get(name, default)

    @property
    def node_views(self) -> list[GraphNode]:
        """The nodes (a node that is not an object: TypeError, as reading it as one failed)."""
        if any(not isinstance(n, Mapping) for n in self.nodes):
            raise TypeError("a graph node is not an object")
        return [GraphNode.from_json(n) for n in self.nodes]


@dataclass(frozen=True, eq=False, repr=False)
class AliasPhase(Strict):
    """The aliasing phase: outputs of earlier calls kept alive and rechecked, storage overlaps."""

    required = frozenset({"calls", "overwritten", "wrong", "worst_err", "overlaps"})
    calls: Any = None
    overwritten: Any = None
    wrong: Any = None
    worst_err: Any = None
    overlaps: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, eq=False, repr=False)
class StabilityRow(Strict):
    """One config x causal cell of the oracle: the eager and graph phases, the aliasing phase, a CUDA error."""

    required = frozenset({"config", "causal", "eager", "graph"})
    variant: Any = None
    config: Any = None
    causal: Any = None
    error: Any = None
    passed: Any = None
    eager: Phase = field(default_factory=Phase)
    graph: Phase = field(default_factory=Phase)
    alias: AliasPhase = field(default_factory=AliasPhase)
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    def phase(self, name: str) -> Phase:
        """The eager or the graph phase by name (required)."""
        if name not in ("eager", "graph"):
            raise ValueError(f"no phase {name!r}")
        return self.eager if name == "eager" else self.graph

    def phase_or_empty(self, name: str) -> Phase:
        """The phase when the row holds it as an object, else an empty one (for naming a row's fields)."""
        return Phase.from_json(self.raw.get(name))


@dataclass(frozen=True, eq=False, repr=False)
class StabilityResult(Strict):
    """<cell>.json: the rows and the first CUDA error of one oracle process."""

    required = frozenset({"rows"})
    variant: Any = None
    env: Any = None
    rows: Any = None
    first_error: Any = None
    binary: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def row_views(self) -> list[StabilityRow]:
        return [StabilityRow.from_json(r) for r in self.rows]


@dataclass(frozen=True)
class Cell:
    """How derive() judged one oracle process: its result (None when unreadable), the contradiction between a
    row's flag and its fields, the schema-3 checks that failed."""

    result: StabilityResult | None = None
    flag_mismatch: str | None = None
    failed_checks: list[str] | None = None

    @property
    def rows(self) -> list[StabilityRow]:
        return self.result.row_views if self.result is not None and self.result.has("rows") else []

    @property
    def first_error(self) -> Any:
        return None if self.result is None else self.result.first_error


@dataclass(frozen=True)
class RunRecord:
    """One run's record under the variants or the diagnostic runs of stability/outcome.json's data."""

    status: str
    reason: str
    first_error: Any
    graph_capture_s: list

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "first_error": self.first_error,
                "graph_capture_s": self.graph_capture_s}


@dataclass(frozen=True)
class RunView(View):
    """A run's record as a pack holds it (report_md)."""

    status: Any = None
    reason: Any = None
    first_error: Any = None
    graph_capture_s: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)
