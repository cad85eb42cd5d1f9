"""The correctness oracle's result (oracles/correctness.py: correctness/<cell>.json, or .json.xz) and the
seeded shortcut set (correctness/shortcut_inputs.json) as typed, read-only views (records/view.py,
records/required.py), and the records the correctness stage writes under outcome.json's data (a variant's
summary, the shortcut set's). The numbers a case's verdict needs are required (absent: KeyError, as the dict
read was); the fields older oracles did not record read None, or their documented default, when absent.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .required import Strict
from .view import View


@dataclass(frozen=True, eq=False, repr=False)
class CaseRow(Strict):
    """One checked case: the shape, the set (grid or shortcut) and input family, the error against the float64
    reference, its bound and margin, the output elements left unwritten and the input elements changed."""

    required = frozenset({"config", "dtype", "D", "S", "causal", "max_err", "bound", "margin", "ref_max"})
    set: Any = None
    case: Any = None
    variant: Any = None
    config: Any = None
    B: Any = None
    H: Any = None
    S: Any = None
    D: Any = None
    dtype: Any = None
    causal: Any = None
    dist: Any = None
    max_err: Any = None
    bound: Any = None
    margin: Any = None
    ref_max: Any = None
    nonfinite: Any = None
    inputs_changed: Any = None
    passed: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def nonfinite_count(self) -> Any:
        """Output elements not finite (0 for an older oracle's row, which does not record it)."""
        return self.nonfinite if self.has("nonfinite") else 0

    @property
    def changed_count(self) -> Any:
        """Input elements changed (0 for an older oracle's row, which does not record it)."""
        return self.inputs_changed if self.has("inputs_changed") else 0

    @property
    def family(self) -> Any:
        """The input family (normal when the row does not name one)."""
        return self.dist if self.has("dist") else "normal"


@dataclass(frozen=True, eq=False, repr=False)
class CorrectnessResult(Strict):
    """<cell>.json: the cases one oracle process checked."""

    required = frozenset({"rows"})
    variant: Any = None
    rows: Any = None
    elapsed_s: Any = None
    binary: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def row_views(self) -> list[CaseRow]:
        return [CaseRow.from_json(r) for r in self.rows]


@dataclass(frozen=True, eq=False, repr=False)
class ShortcutFile(Strict):
    """shortcut_inputs.json: the generator and seed of the seeded shortcut set, and the cases they gave."""

    required = frozenset({"seed", "cases"})
    generator: Any = None
    seed: Any = None
    cases: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def recorded_seed(self) -> Any:
        """The seed, None when the file records none."""
        return self.seed if self.has("seed") else None


@dataclass(frozen=True)
class VariantSummary:
    """A variant's entry under the variants of correctness/outcome.json's data."""

    status: str
    reason: str
    cases: int
    min_margin: Any
    max_err: Any

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "cases": self.cases, "min_margin": self.min_margin,
                "max_err": self.max_err}


@dataclass(frozen=True)
class VariantView(View):
    """A variant's summary as a pack holds it (report_md)."""

    status: Any = None
    reason: Any = None
    cases: Any = None
    min_margin: Any = None
    max_err: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class CorrectnessData(View):
    """correctness/outcome.json's data as a pack holds it: the variants' summaries, the canaries, the shortcut set."""

    variants: Mapping = field(default_factory=dict)  # variant -> its summary (VariantView)
    canaries: Any = None
    shortcut: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class ShortcutSummary:
    """The shortcut set's entry of correctness/outcome.json's data: its seed, the rows that checked it, why it is
    not proven (empty when it is) and the smallest max|ref| / bound of any case."""

    seed: Any
    rows: int
    problems: list[str]
    min_ref_ratio: Any

    def to_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "rows": self.rows, "problems": self.problems, "min_ref_ratio": self.min_ref_ratio}
