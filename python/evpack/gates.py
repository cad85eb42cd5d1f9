"""Gates: the pass/fail questions a pack answers, derived from stage outcomes and pack files."""
from __future__ import annotations

import json
from pathlib import Path

from .jsonio import read_json
from .model import ERROR, FAIL, GATE_ORDER, PASS, SKIPPED, STAGE_GATES, GateResult, StageOutcome
from .records.binary import BinaryRecord
from .records.view import view

__all__ = ["GATE_ORDER", "STAGE_GATES", "derive_gates", "one_binary_gate", "overall"]


def one_binary_gate(pack_dir: Path) -> StageOutcome:
    """Every stage that loaded the kernels loaded the file the build produced and SASS disassembled."""
    build_rec = pack_dir / "build" / "binary.json"
    if not build_rec.exists():
        return StageOutcome(SKIPPED if not (pack_dir / "build").exists() else ERROR,
                            "no build/binary.json: nothing was built")
    try:
        want = _binary_record(build_rec)
        seen = {}
        for rec_path in sorted(pack_dir.glob("*/binary.json")):
            stage = rec_path.parent.name
            if stage == "build":
                continue
            rec = _binary_record(rec_path)
            if rec.module_name != want.module_name:
                continue
            seen[stage] = rec.sha256
    except (OSError, ValueError, json.JSONDecodeError) as exc:
        return StageOutcome(ERROR, f"a binary.json record is unreadable: {exc}")
    if not seen:
        return StageOutcome(SKIPPED, "no stage loaded or disassembled the binary")
    short = str(want.sha256)[:12]
    bad = {s: h for s, h in seen.items() if h != want.sha256}
    if bad:
        detail = ", ".join(f"{s}={str(h)[:12]}" for s, h in bad.items())
        return StageOutcome(FAIL, f"binary mismatch: build={short} but {detail}")
    runtime = [s for s in seen if s not in ("sass",)]
    if not runtime:
        return StageOutcome(SKIPPED, f"sha256 {short} matches in sass; no runtime stage loaded it")
    return StageOutcome(PASS, f"sha256 {short} in build and {', '.join(sorted(seen))}")


def _binary_record(path: Path) -> BinaryRecord:
    value = read_json(path)
    if not isinstance(value, dict):
        raise ValueError(f"{path.parent.name}/{path.name} is not a JSON object")
    return view(BinaryRecord, value)


def derive_gates(stages: dict[str, StageOutcome], pack_dir: Path) -> dict[str, GateResult]:
    gates: dict[str, GateResult] = {}
    for gate, (stage, _question) in STAGE_GATES.items():
        out = stages.get(stage)
        gates[gate] = GateResult(gate, out.status, out.reason) if out is not None else \
            GateResult(gate, SKIPPED, f"stage {stage} not selected")
    ob = one_binary_gate(pack_dir)
    gates["one_binary"] = GateResult("one_binary", ob.status, ob.reason)
    return gates


def overall(gates: dict[str, GateResult]) -> str:
    statuses = [g.status for g in gates.values()]
    if any(s in (FAIL, ERROR) for s in statuses):
        return FAIL
    if any(s == SKIPPED for s in statuses):
        return SKIPPED
    return PASS
