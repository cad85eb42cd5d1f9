"""The sanitize stage's total of cell seconds is derived the same way on every Python and in every cell order.

A pack made on the GPU host (Python 3.12, whose sum() of floats compensates) stored 857.0 where verify on a
CPU machine (Python 3.11, a plain left-to-right sum) derived 856.9 from the same procs.json, and reported a
mismatch on an untouched pack. The six durations below sum to 232.15: left to right a plain sum gives
232.15000000000003 (232.2 once rounded), right to left 232.14999999999998 (232.1).
"""
from __future__ import annotations

import json

import pytest
import reference
from conftest import copy_pack
from forger import forge

from evpack.stages import sanitize
from evpack.verify import verify_all

DURATIONS = (21.795, 40.845, 37.362, 51.15, 49.45, 31.548)


def _stage(tmp_path, durations):
    procs = {f"{tool}.wgmma.m{i}": {"cmd": ["compute-sanitizer"], "returncode": 0, "timed_out": False,
                                     "duration_s": d, "ran": "process"}
             for i, (tool, d) in enumerate(zip(("memcheck", "racecheck", "initcheck") * 2, durations, strict=True))}
    stage = tmp_path / "sanitize"
    stage.mkdir()
    (stage / "procs.json").write_text(json.dumps(procs))
    return stage


@pytest.mark.parametrize("order", [DURATIONS, tuple(reversed(DURATIONS))], ids=["forward", "reversed"])
def test_the_total_is_the_correctly_rounded_sum_in_any_order(tmp_path, order):
    assert round(sum(DURATIONS), 1) != round(sum(reversed(DURATIONS)), 1)  # the case a plain sum gets wrong
    out = sanitize.derive(_stage(tmp_path, order), tmp_path)
    assert out.data["cell_seconds_total"] == 232.2


@reference.needs("DEFAULT")
@pytest.mark.parametrize("delta", [0.1, -0.1])
def test_a_total_edited_by_its_last_digit_does_not_verify(tmp_path, delta):
    """Attack, with only a copy of a pack: the stored total moved by 0.1 s (the precision it is rounded to), the
    index re-hashed, the signature dropped. The fsum derivation still compares exactly, so verify names it."""
    pack = copy_pack(reference.DEFAULT, tmp_path)
    path = pack / "sanitize" / "outcome.json"
    outcome = json.loads(path.read_text())
    outcome["data"]["cell_seconds_total"] = round(outcome["data"]["cell_seconds_total"] + delta, 1)
    path.write_text(json.dumps(outcome, indent=1) + "\n")
    forge(pack)
    problems, _ = verify_all(pack)
    assert any("cell_seconds_total" in p for p in problems), problems
