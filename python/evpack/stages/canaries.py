"""Stage `canaries`: the liveness matrix. Every planted fault (registry.CANARIES) must be caught by
the gate it targets, in this very pack; a gate that did not fire is `error` ("gate not live")."""
from __future__ import annotations

from pathlib import Path

from .. import registry
from ..markdown import code, text  # report_md: every pack value escaped
from ..model import REQUIRED_CANARIES, SCHEMA_VERSION
from ..records.canary import MatrixRow, PlantedCanary, canary_records
from ..records.schema import CANARY_GATES
from .base import ERROR, PASS, SKIPPED, StageContext, StageOutcome, other_outcome, read_json, write_json
from .order import declared

NAME = "canaries"
SPEC = declared(NAME)  # stages/order.py: the one declaration of this stage
NEEDS_GPU, TIMEOUT_S = SPEC.needs_gpu, SPEC.timeout_s
REQUIRED_FILES = SPEC.required_files  # raw files a stage that decided keeps (verify requires them)
DERIVE_READS_STAGES = SPEC.reads_stages  # derive() reads the outcomes of the stages that ran the canaries
SOURCE_STAGE = {"memcheck": "sanitize", "racecheck": "sanitize", "initcheck": "sanitize",
                "synccheck": "sanitize", "correctness": "correctness", "stability": "stability",
                "tensor_proof": "tensor_proof", "bench": "bench"}
# Build-time gates: their canaries are caught from the build's own tool output, so they are live on a
# pack made without a GPU too (the PTXAS gate fails a kernel whose wgmma ptxas serialised; the SASS gate
# fails a tensor kernel whose HMMA accumulates in fp16).
BUILD_TIME_SOURCE = {"ptxas": "ptxas", "sass": "sass"}


def source_stage(gate: str) -> str:
    """The stage whose outcome holds the canary results of `gate`."""
    return BUILD_TIME_SOURCE.get(gate) or SOURCE_STAGE[gate]


def run(ctx: StageContext) -> None:
    # Nothing to execute: the canaries ran inside the stages whose gates they test.
    write_json(ctx.dir / "expected.json", [PlantedCanary(c.name, c.expect_caught_by, c.description).to_json()
                                           for c in registry.CANARIES])


def _row(planted: PlantedCanary, gate: str, stage: str, out: StageOutcome) -> MatrixRow:
    """The matrix row of one planted canary, caught (or not) by `gate` (the schema's gate of the canary), from the
    outcome of the stage that ran it."""
    name = planted.canary
    found = [r for r in canary_records(out.data) if r.name == name and r.fired_in(gate)]
    if out.status == SKIPPED:
        return MatrixRow(name, planted.fault, gate, stage, SKIPPED, None, f"{stage} skipped: {out.reason}")
    if not found:
        return MatrixRow(name, planted.fault, gate, stage, ERROR, False, f"{stage} did not run this canary ({out.status})")
    caught = bool(found[0].caught)
    return MatrixRow(name, planted.fault, gate, stage, PASS if caught else ERROR, caught, found[0].observed)


def derive(stage_dir: Path, pack_dir: Path) -> StageOutcome:
    # What was planted is read from the pack (written by run()); what must have been planted comes from
    # the pack's schema (records/schema.py), so dropping a canary from expected.json leaves its gate
    # unproven instead of passing.
    expected = [PlantedCanary.from_json(e) for e in read_json(stage_dir / "expected.json")]
    if not expected:
        return StageOutcome(ERROR, "no canaries were planted: every gate is unproven", {"matrix": []})
    missing = [c for c in required_canaries(pack_dir) if c not in {e.canary for e in expected}]
    if missing:
        return StageOutcome(ERROR, f"gates not proven live: required canaries not planted: {', '.join(missing)}",
                            {"matrix": [], "missing_canaries": missing})
    # The gate that must catch each canary is the schema's (records/schema.py), never expected.json's: a pack
    # that names another gate for a canary (one that did catch something) proves nothing about the gate it
    # was planted for.
    gates = canary_gates(pack_dir)
    wrong = [_gate_mismatch(c, gates) for c in expected if gates.get(c.canary) != c.caught_by]
    if wrong:
        return StageOutcome(ERROR, f"canaries/expected.json disagrees with schema {pack_schema(pack_dir)}: "
                            + "; ".join(wrong), {"matrix": [], "gate_mismatches": wrong})
    # A stage this pack never ran (e.g. bench in an `oracles` pack) leaves its canaries not run, not failed.
    outcomes = {s: other_outcome(s, pack_dir) if (pack_dir / s).is_dir()
                else StageOutcome(SKIPPED, f"{s} is not in this pack") for s in set(SOURCE_STAGE.values()) | set(BUILD_TIME_SOURCE.values())}
    rows = [_row(c, gates[c.canary], source_stage(gates[c.canary]), outcomes[source_stage(gates[c.canary])])
            for c in expected]
    problems = [f"gate not live: {r.gate} did not catch {r.canary} ({r.observed})" for r in rows if r.status == ERROR]
    statuses = [r.status for r in rows]
    matrix = [r.to_json() for r in rows]
    if problems:
        return StageOutcome(ERROR, "; ".join(problems), {"matrix": matrix})
    if all(s == SKIPPED for s in statuses):
        return StageOutcome(SKIPPED, "the stages that run the canaries were skipped", {"matrix": matrix})
    if SKIPPED in statuses:
        n = statuses.count(PASS)
        return StageOutcome(SKIPPED, f"{n}/{len(matrix)} canaries caught{_caught_names(rows)}; the rest were not run",
                            {"matrix": matrix})
    return StageOutcome(PASS, f"all {len(matrix)} planted faults caught by their gates", {"matrix": matrix})


def pack_schema(pack_dir: Path) -> int:
    """The schema version of the pack being derived: its pack.json's, or the current one for a pack still
    being made (no pack.json yet) or one whose recorded version this code does not know. Checks that newer
    schemas require (canaries, input families, graph and aliasing checks) key on it, so packs made by older
    code keep verifying."""
    if (pack_dir / "pack.json").is_file():
        try:
            recorded = read_json(pack_dir / "pack.json").get("schema_version")
        except (ValueError, OSError, AttributeError):
            return SCHEMA_VERSION
        if recorded in REQUIRED_CANARIES:
            return recorded
    return SCHEMA_VERSION


def required_canaries(pack_dir: Path) -> tuple[str, ...]:
    """The canaries every pack of this pack's schema must have planted (a running pack: the current schema)."""
    return REQUIRED_CANARIES[pack_schema(pack_dir)]


def canary_gates(pack_dir: Path) -> dict[str, str]:
    """The gate that must catch each canary a pack of this pack's schema may plant (records/schema.py)."""
    return CANARY_GATES[pack_schema(pack_dir)]


def _gate_mismatch(planted: PlantedCanary, gates: dict[str, str]) -> str:
    if planted.canary not in gates:
        return f"{planted.canary} is not a canary of this schema (expected.json: caught by {planted.caught_by})"
    return f"{planted.canary} must be caught by {gates[planted.canary]}, expected.json says {planted.caught_by}"


def _caught_names(rows: list[MatrixRow]) -> str:
    """' (name by gate, ...)' for the canaries caught: on a pack without a GPU, the build-time ones."""
    caught = [f"{r.canary} by {r.gate}" for r in rows if r.status == PASS]
    return f" ({', '.join(caught)})" if caught else ""


def report_md(stage_dir: Path, outcome: StageOutcome) -> str:
    lines = ["| canary | planted fault | expected catch | caught? | observed |", "|---|---|---|---|---|"]
    for r in map(MatrixRow.from_json, outcome.data.get("matrix", [])):
        caught = {True: "yes", False: "NO", None: "not run"}[r.caught]
        observed = code(r.observed, in_table=True)  # tool text: a code span
        lines.append(f"| {text(r.canary)} | {text(r.fault)} | {text(r.gate)} | {caught} | {observed} |")
    return "\n".join(lines)
