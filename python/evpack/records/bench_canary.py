"""A bench canary's record (stages/bench_canaries.py: bench/canary_*.json) as a typed, read-only view
(records/view.py, records/required.py): the samples of a kernel with a planted timing cheat, the integrity
counters the harness kept, the re-check after timing and its content-probe entry. derive() judges it by the
bench rules; the shape and mode it was timed at are required (absent: KeyError, as the dict read was).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .required import Strict

# The harness's integrity counters a record carries into the row the bench rules judge (timing/integrity.py).
INTEGRITY_FIELDS = ("drain_us_median", "l2_violations", "l2_error", "timed_mismatches", "timed_checks",
                    "timed_ref_checks", "timed_ref_failures", "timed_ref_worst", "content_uniqueness", "unique_calls")


@dataclass(frozen=True, eq=False, repr=False)
class BenchCanaryRun(Strict):
    """One bench canary timed at the canonical shape: its samples (us), an error, the re-check after timing
    (max error and bound) and, since summary schema 2, one content-probe entry."""

    required = frozenset({"shape", "mode"})
    canary: Any = None
    shape: Any = None
    mode: Any = None
    times_us: Any = None
    error: Any = None
    stop: Any = None
    recheck_err: Any = None
    err_bound: Any = None
    probe: Any = None
    probe_rule: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def integrity(self) -> dict[str, Any]:
        """The integrity counters by name (None where the record holds none)."""
        return {k: self.raw.get(k) for k in INTEGRITY_FIELDS}
