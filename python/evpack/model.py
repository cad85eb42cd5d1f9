"""The typed model shared by stages, gates, labels, reports and verify.

Every record that crosses a layer is a frozen dataclass with explicit `to_json`/`from_json`.
Raw tool strings never appear here; this module holds the pack's own vocabulary: statuses,
the stage <-> gate mapping, label decisions and the schema versions (the records
of a pack, canary records included, live in records/).

Schema versions (`pack.json` "schema_version"):
  1  packs of 2026-11-21 (seven canaries, no provenance, no comment.md)
  2  provenance.json (+ optional signature), comment.md, the cheat-class canaries
  3  the next cheat classes: capture-aware launches, output aliasing, fp16 accumulation and
     structured-input fast paths, each with its canary; the correctness set's structured input
     families; the stability graph's kernel nodes and aliasing rechecks
`verify` accepts every version in KNOWN_SCHEMAS and names an unknown one clearly; what each version
promises (gates, canaries, root files, prose keys) is records/schema.py's, written out per version.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .errors import ModelError  # noqa: F401  (model.ModelError: the name its readers use)

# The schema versions and what each promises are written out per version in records/schema.py (re-exported
# here: the names older modules import).
from .records.schema import (  # noqa: F401
    KNOWN_SCHEMAS,
    REQUIRED_CANARIES,
    REQUIRED_GATES,
    REQUIRED_ROOT_FILES,
    SCHEMA_VERSION,
)

PASS, FAIL, ERROR, SKIPPED = "pass", "fail", "error", "skipped"
STATUSES = (PASS, FAIL, ERROR, SKIPPED)




def worst(statuses) -> str:
    """Combine cell statuses: error > fail > skipped > pass (an empty set is an error)."""
    statuses = list(statuses)
    if not statuses:
        return ERROR
    for s in (ERROR, FAIL, SKIPPED):
        if s in statuses:
            return s
    return PASS


def _status(value: Any, what: str) -> str:
    if value not in STATUSES:
        raise ModelError(f"{what}: status must be one of {STATUSES}, got {value!r}")
    return value


@dataclass(frozen=True)
class StageOutcome:
    """What a stage decided: status, a one-line reason (a view), and its data (rows, numbers)."""

    status: str
    reason: str
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _status(self.status, "stage outcome")
        if not isinstance(self.reason, str):
            raise ModelError(f"stage outcome: reason must be text, got {type(self.reason).__name__}")
        if "\n" in self.reason:
            object.__setattr__(self, "reason", " ".join(self.reason.split()))
        if not isinstance(self.data, dict):
            raise ModelError(f"stage outcome: data must be an object, got {type(self.data).__name__}")

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "data": self.data}

    @classmethod
    def from_json(cls, obj: Any) -> StageOutcome:
        if not isinstance(obj, dict) or "status" not in obj:
            raise ModelError("stage outcome: expected an object with status, reason and data")
        return cls(_status(obj["status"], "stage outcome"), str(obj.get("reason", "")), obj.get("data") or {})


@dataclass(frozen=True)
class GateResult:
    name: str
    status: str
    reason: str

    def __post_init__(self) -> None:
        _status(self.status, f"gate {self.name}")

    def to_json(self) -> dict[str, str]:
        return {"status": self.status, "reason": self.reason}

    @classmethod
    def from_json(cls, name: str, obj: Any) -> GateResult:
        if not isinstance(obj, dict):
            raise ModelError(f"gate {name}: expected an object with status and reason")
        return cls(name, _status(obj.get("status"), f"gate {name}"), str(obj.get("reason", "")))


@dataclass(frozen=True)
class LabelDecision:
    label: str
    labels: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "labels": list(self.labels)}

    def __iter__(self):  # label, labels = decide(...)
        return iter((self.label, list(self.labels)))


@dataclass(frozen=True)
class PackFacts:
    """Pack-level facts that stages contribute (each stage module's optional `facts(outcome, facts)`);
    the generic layer reads these fields, never a stage's data by key."""

    so_sha256: str | None = None
    perf_regression: bool = False
    canonical_speedup: float | None = None

    def with_(self, **changes: Any) -> PackFacts:
        return replace(self, **changes)


# --- stages and gates: one mapping ------------------------------------------------------------
# gate name -> (stage it comes from, question it answers). The gate names are a public API (labels,
# PR comments, older packs): a gate keeps its name; the stage that decides it is named here.
STAGE_GATES: dict[str, tuple[str, str]] = {
    "build": ("build", "builds with the pinned flags"),
    "ptxas_resources": ("ptxas", "0 spills / 0 stack (or declared budget), smem within arch limit"),
    "sass_tensor_proof": ("sass", "tensor kernels contain HMMA/HGMMA accumulating in F32 and no LDL/STL; "
                                  "scalar kernels none"),
    "executed_tensor_work": ("tensor_proof", "executed tensor-core FLOPs cover >= 95% of the matrix FLOPs, at most "
                                             "1.10x the tile-padded ones"),
    "sanitizer_clean": ("sanitize", "memcheck, racecheck, initcheck, synccheck report 0"),
    "correctness": ("correctness", "every shape within the flash-attention error bound"),
    "stability": ("stability", "1000 launches bitwise identical, also under graph replay; the captured graph "
                               "holds the call's own kernel; earlier outputs stay intact"),
    "gates_live": ("canaries", "every planted fault is caught by its gate"),
    "performance": ("bench", "benchmark ran with same-run SDPA baselines and re-checked outputs"),
}
CROSS_STAGE_GATES = ("one_binary",)  # decided from several stages' files
GATE_ORDER = tuple(STAGE_GATES) + CROSS_STAGE_GATES
GATE_OF_STAGE = {stage: gate for gate, (stage, _q) in STAGE_GATES.items()}

# Files written after index.json (they name its digest), never listed in it.
UNINDEXED_FILES = ("index.json", "provenance.json", "provenance.json.sig")
