"""Gates: the pass/fail questions a pack answers, derived from stage outcomes and pack files."""
from __future__ import annotations

from pathlib import Path

from .stages.base import ERROR, FAIL, PASS, SKIPPED, StageOutcome, read_json

# gate name -> (stage it comes from, question it answers)
STAGE_GATES = {
    "build": ("build", "builds with the pinned flags"),
    "ptxas_resources": ("ptxas", "0 spills / 0 stack (or declared budget), smem within arch limit"),
    "sass_tensor_proof": ("sass", "tensor kernels contain HMMA/HGMMA and no LDL/STL; scalar kernels none"),
    "executed_tensor_work": ("tensor_proof", "executed tensor-core FLOPs cover >= 95% of the matrix FLOPs"),
    "sanitizer_clean": ("sanitize", "memcheck, racecheck, initcheck, synccheck report 0"),
    "correctness": ("correctness", "every shape within the flash-attention error bound"),
    "stability": ("stability", "1000 launches bitwise identical, also under graph replay"),
    "gates_live": ("canaries", "every planted fault is caught by its gate"),
    "performance": ("bench", "benchmark ran with same-run SDPA baselines and re-checked outputs"),
}
GATE_ORDER = tuple(STAGE_GATES) + ("one_binary",)


def one_binary_gate(pack_dir: Path) -> StageOutcome:
    """Every stage that loaded the kernels loaded the file the build produced and SASS disassembled."""
    build_rec = pack_dir / "build" / "binary.json"
    if not build_rec.exists():
        return StageOutcome(SKIPPED if not (pack_dir / "build").exists() else ERROR,
                            "no build/binary.json: nothing was built")
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
    if not seen:
        return StageOutcome(SKIPPED, "no stage loaded or disassembled the binary")
    bad = {s: h for s, h in seen.items() if h != want.get("sha256")}
    if bad:
        detail = ", ".join(f"{s}={str(h)[:12]}" for s, h in bad.items())
        return StageOutcome(FAIL, f"binary mismatch: build={str(want.get('sha256'))[:12]} but {detail}")
    runtime = [s for s in seen if s not in ("sass",)]
    if not runtime:
        return StageOutcome(SKIPPED, f"sha256 {want['sha256'][:12]} matches in sass; no runtime stage loaded it")
    return StageOutcome(PASS, f"sha256 {want['sha256'][:12]} in build and {', '.join(sorted(seen))}")


def derive_gates(stages: dict[str, StageOutcome], pack_dir: Path) -> dict[str, StageOutcome]:
    gates: dict[str, StageOutcome] = {}
    for gate, (stage, _question) in STAGE_GATES.items():
        out = stages.get(stage)
        gates[gate] = out if out is not None else StageOutcome(SKIPPED, f"stage {stage} not selected")
    gates["one_binary"] = one_binary_gate(pack_dir)
    return {g: StageOutcome(o.status, o.reason) for g, o in gates.items()}


def overall(gates: dict[str, StageOutcome]) -> str:
    statuses = [g.status for g in gates.values()]
    if any(s in (FAIL, ERROR) for s in statuses):
        return FAIL
    if any(s == SKIPPED for s in statuses):
        return SKIPPED
    return PASS
