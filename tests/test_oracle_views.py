"""records/stability.py, records/correctness.py, records/sanitize.py: the oracles' rows as views hold every value
as the file holds it; a field a verdict needs that the row lacks is refused as the dict read refused it (KeyError
naming it), a required object that is not one is a TypeError, and the stages' own records write today's JSON."""
from __future__ import annotations

import pytest

from evpack.records.correctness import CaseRow, ShortcutSummary, VariantSummary
from evpack.records.procs import CellRun
from evpack.records.sanitize import SanitizeCell
from evpack.records.stability import RunRecord, StabilityRow
from evpack.stages import correctness, stability

PHASE = {"launches": 3, "mismatched_elements": 0, "mismatched_launches": 0, "inputs_changed": 0,
         "refill": {"rounds": 2, "bad_rounds": 0, "worst_err": 0.0}}
ROW = {"config": "c", "causal": False, "error": None, "passed": True, "eager": PHASE,
       "graph": {**PHASE, "mismatched_replays": 0}}


def test_a_stability_row_reads_its_phases_and_refuses_a_missing_one():
    row = StabilityRow.from_json(ROW)
    assert row.raw is ROW and row.eager.refill.rounds == 2 and stability.row_passed(row) and stability.row_passed(ROW)
    with pytest.raises(KeyError, match="eager"):
        stability.row_passed({k: v for k, v in ROW.items() if k != "eager"})
    with pytest.raises(TypeError, match="eager is not an object"):
        stability.row_passed({**ROW, "eager": [1]})
    with pytest.raises(KeyError, match="bad_rounds"):
        stability.row_passed({**ROW, "eager": {**PHASE, "refill": {"rounds": 2}}})
    assert not stability.row_passed({**ROW, "graph": {**PHASE, "mismatched_replays": 1}})
    assert "KeyError: 'eager'" in stability.flag_mismatch([StabilityRow.from_json({"passed": True})], {})


def test_a_correctness_case_defaults_only_what_older_oracles_did_not_record():
    case = {"max_err": 0.1, "bound": 0.2}
    assert correctness.row_passed(case) and not correctness.row_passed({**case, "nonfinite": None})
    assert CaseRow.from_json(case).family == "normal" and CaseRow.from_json({"dist": "sink"}).family == "sink"
    with pytest.raises(KeyError, match="bound"):
        correctness.row_passed({"max_err": 0.1})
    assert CaseRow.from_json(5).passed is None and repr(CaseRow.from_json({"S": 1})) == "CaseRow({'S': 1})"


def test_a_proc_record_that_is_not_an_object_is_refused():
    assert CellRun.of({"cmd": ["x"], "returncode": 0}).command == ["x"] and CellRun.of({}).command == ()
    with pytest.raises(TypeError):
        CellRun.of([1])


def test_the_stages_records_write_their_keys_in_order():
    assert list(RunRecord("pass", "r", None, []).to_json()) == ["status", "reason", "first_error", "graph_capture_s"]
    assert list(VariantSummary("pass", "r", 1, 0.1, 0.2).to_json()) == ["status", "reason", "cases", "min_margin",
                                                                         "max_err"]
    assert list(ShortcutSummary(1, 2, [], None).to_json()) == ["seed", "rows", "problems", "min_ref_ratio"]
    cell = SanitizeCell("memcheck", "v", "c", 0, 1.5, {"summary_found": True, "errors": 0}, "pass", "clean")
    assert list(cell.to_json()) == ["tool", "variant", "config", "returncode", "duration_s", "summary_found", "errors",
                                    "status", "reason"]
