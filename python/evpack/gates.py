"""Gates: the pass/fail questions a pack answers, derived from stage outcomes and pack files."""
from __future__ import annotations

import json
from pathlib import Path

from .jsonio import read_json
from .model import ERROR, FAIL, GATE_ORDER, PASS, SKIPPED, STAGE_GATES, GateResult, StageOutcome

__all__ = ["GATE_ORDER", "STAGE_GATES", "derive_gates", "one_binary_gate", "overall"]


def one_binary_gate(pack_dir: Path) -> StageOutcome:
    """Every stage that loaded the kernels loaded the file the build produced and SASS disassembled."""
    build_rec = pack_dir / "build" / "binary.json"
    if not build_rec.exists():
        return StageOutcome(SKIPPED if not (pack_dir / "build").exists() else ERROR,
                            "no build/binary.json: nothing was built")
    try:
        want = read_json(build_rec)
        seen = {}
        for rec_path in sorted(pack_dir.glob("*/binary.json")):
            stage = rec_path.parent.name
            if stage == "build":
                continue
            rec = read_json(rec_path)
            if rec.get("module", "evpack._C") != want.get("module", "evpack._C"):
                continue
            seen[stage] = rec.get("sha256")
    except (OSError, ValueError, AttributeError, json.JSONDecodeError) as exc:
        return StageOutcome(ERROR, f"a binary.json record is unreadable: {exc}")
    if not seen:
        return StageOutcome(SKIPPED, "no stage loaded or disassembled the binary")
    bad = {s: h for s, h in seen.items() if h != want.get("sha256")}
    if bad:
        detail = ", ".join(f"{s}={str(h)[:12]}" for s, h in bad.items())
        return StageOutcome(FAIL, f"binary mismatch: build={str(want.get('sha256'))[:12]} but {detail}")
    runtime = [s for s in seen if s not in ("sass",)]
    if not runtime:
        return StageOutcome(SKIPPED, f"sha256 {str(want.get('sha256'))[:12]} matches in sass; no runtime stage loaded it")
    return StageOutcome(PASS, f"sha256 {str(want.get('sha256'))[:12]} in build and {', '.join(sorted(seen))}")


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
