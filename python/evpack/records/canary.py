"""Canary records: a planted fault as the stage that ran it saw it, what was planted
(canaries/expected.json), and the liveness matrix's rows (canaries/outcome.json).

Every stage that runs canaries writes CanaryRecord.to_json() under data["canaries"]; the canary stage reads
them back with CanaryRecord.from_json. Two key orders have always been written: the build-time and
sanitizer stages put `caught` before `observed`, the oracle stages `observed` before `caught` (Layout). A
record keeps the order it was written in, so outcome.json's bytes stay those of older code. Fields a stage
does not write are None and are not written. `expected`, `observed` and `reason` are prose (schema.py):
verify compares `caught`, `status` and the kernels' rows, never the sentences.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..errors import ModelError

CAUGHT_FIRST = ("name", "tool", "expected", "caught", "status", "observed", "reason", "kernels")
OBSERVED_FIRST = ("name", "tool", "expected", "observed", "caught", "status", "reason", "kernels")


@dataclass(frozen=True)
class CanaryRecord:
    """One planted fault as the stage that ran it saw it."""

    name: str
    caught: bool  # the gate fired on it
    observed: str  # what the gate saw: a tool line, a status, a number
    tool: str | None = None  # the sub-gate of stages with several (memcheck, ptxas, sass); None: the stage's own
    expected: str | None = None  # what catching it looks like, in words
    reason: str | None = None  # why it counts as caught or not, in words
    status: str | None = None  # the canary kernels' worst status (build-time stages)
    kernels: list[dict] | None = None  # the canary kernels' rows (build-time stages)
    layout: tuple[str, ...] = CAUGHT_FIRST  # the key order written
    extra: tuple[tuple[str, Any], ...] = ()  # keys of a newer writer, kept

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.layout if getattr(self, k) is not None}
        return {**out, **dict(self.extra)}

    @classmethod
    def from_json(cls, obj: Any) -> CanaryRecord:
        if not isinstance(obj, dict) or "name" not in obj or "caught" not in obj:
            raise ModelError("canary record: expected an object with name and caught")
        keys = list(obj)
        layout = OBSERVED_FIRST if "observed" in obj and keys.index("observed") < keys.index("caught") \
            else CAUGHT_FIRST
        known = [f.name for f in fields(cls) if f.name not in ("layout", "extra")]
        values = {"observed": "", **{k: obj[k] for k in known if k in obj}}
        if "tool" in obj and obj["tool"] is None:  # a tool that is named as none is no gate's (never the stage's own)
            values["tool"] = ""
        return cls(**values, layout=layout,
                   extra=tuple((k, v) for k, v in obj.items() if k not in known))

    def fired_in(self, gate: str) -> bool:
        """Whether this record is the one of `gate` (a stage with several sub-gates names its tool)."""
        return (gate if self.tool is None else self.tool) == gate


def canary_records(data: dict) -> list[CanaryRecord]:
    """The canary records of a stage's data (data["canaries"]; none when it ran none)."""
    return [CanaryRecord.from_json(c) for c in data.get("canaries") or []]


@dataclass(frozen=True)
class PlantedCanary:
    """canaries/expected.json: a canary that was planted and the check that must catch it."""

    canary: str
    caught_by: str
    fault: str  # the planted fault, in words

    def to_json(self) -> dict[str, Any]:
        return {"canary": self.canary, "caught_by": self.caught_by, "fault": self.fault}

    @classmethod
    def from_json(cls, obj: Any) -> PlantedCanary:
        if not isinstance(obj, dict) or "canary" not in obj or "caught_by" not in obj:
            raise ModelError("canaries/expected.json: an entry without canary and caught_by")
        return cls(obj["canary"], obj["caught_by"], obj.get("fault", ""))


@dataclass(frozen=True)
class MatrixRow:
    """A row of the liveness matrix (canaries/outcome.json): was the planted fault caught by its gate?"""

    canary: str
    fault: str
    gate: str
    stage: str
    status: str
    caught: bool | None  # None: the stage that runs it did not run
    observed: str

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, obj: Any) -> MatrixRow:
        if not isinstance(obj, dict):
            raise ModelError("canary matrix: a row that is not an object")
        return cls(**{f.name: obj.get(f.name) for f in fields(cls)})
