"""Incremental evidence attacked: carried cells whose files, keys, marks or source pack were changed, a source
pack missing, edited or swapped, and the planner re-running what changed. The packs are made by the real
pipeline (evidence, pack writer, verify) on the stand-in stages in their "cells" mode: one process per variant
through the real procs.run_jobs, and a real cuobjdump dump (tests/fixtures/sass) the device keys come from."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import FAKE, REPO, TESTS, run_cli

from evpack.binary import sha256_file
from evpack.incremental import CARRY_STAGES
from evpack.incremental.cells import cell_variant
from evpack.incremental.plan import make_plan
from evpack.labels import format_labels
from evpack.pack import write_index
from evpack.stages.base import read_json, write_json
from evpack.verify import verify_pack

VARIANTS = ["scalar", "wmma"]


def _run(mp: pytest.MonkeyPatch, root: Path, plan: dict, *, fresh: bool = False) -> Path:
    from evpack.evidence import run_evidence

    mp.setenv("FAKE_PLAN", json.dumps({"cells": True, **plan}))  # undone with mp: later tests see real stages
    return run_evidence(REPO, selected=None, packs_root=root, options={"variants": VARIANTS}, stages=FAKE,
                        gpu=(True, ""), fresh=fresh).pack


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """p1: every cell ran; p2: wmma's kernels changed (scalar carried from p1); p3: nothing changed since p2
    (both variants' keys equal: the cheapest runs, the other is carried from the pack where it ran)."""
    root = tmp_path_factory.mktemp("incr") / "packs"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(REPO / "python")]))
        p1 = _run(mp, root, {})
        p2 = _run(mp, root, {"device_edit": ["wmma"]})
        p3 = _run(mp, root, {"device_edit": ["wmma"]})
    return root, p1, p2, p3


@pytest.fixture
def fake_plan_env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(REPO / "python")]))
    monkeypatch.setenv("FAKE_PLAN", json.dumps({"cells": True}))
    return dict(os.environ)


def _cell(stage: str, variant: str) -> str:
    return f"memcheck.{variant}.m64n64" if stage == "sanitize" else variant


def _inc(pack: Path) -> dict:
    return read_json(pack / "pack.json")["incremental"]


def _copy_root(root: Path, dst: Path) -> Path:
    shutil.copytree(root, dst, symlinks=True)
    return dst


def _problems(pack: Path, **kw) -> list[str]:
    return verify_pack(pack, stages=FAKE, **kw)


def _edit_json(path: Path, change) -> None:
    data = read_json(path)
    change(data)
    write_json(path, data)


# ---- the planner ---------------------------------------------------------------------------------------------

def test_a_changed_variant_reruns_and_the_others_are_carried(chain):
    _, p1, p2, _ = chain
    assert _inc(p1)["carried"] == [] and "no earlier complete pack" in _inc(p1)["reason"]
    carried = _inc(p2)["carried"]
    assert {(c["stage"], c["variant"]) for c in carried} == {(s, "scalar") for s in CARRY_STAGES}
    assert {c["source_pack"] for c in carried} == {p1.name}
    for stage in CARRY_STAGES:
        procs = read_json(p2 / stage / "procs.json")
        marks = {cell: rec.get("carried_from") for cell, rec in procs.items()}
        assert marks == {_cell(stage, "scalar"): p1.name, _cell(stage, "wmma"): None,
                         _cell(stage, "canary_wrong_result"): None}, stage
        for rel, sha in ((r, s) for c in carried if c["stage"] == stage for r, s in c["files"].items()):
            assert sha256_file(p2 / rel) == sha256_file(p1 / rel) == sha
    assert _problems(p2) == []
    # the device key of wmma changed, scalar's did not
    k1, k2 = _inc(p1)["keys"]["correctness"], _inc(p2)["keys"]["correctness"]
    assert k1["scalar"] == k2["scalar"] and k1["wmma"]["device"] != k2["wmma"]["device"]


def test_with_nothing_changed_one_variant_per_stage_still_runs_and_the_origin_is_named(chain):
    _, p1, p2, p3 = chain
    carried = _inc(p3)["carried"]
    for stage in CARRY_STAGES:
        procs = read_json(p3 / stage / "procs.json")
        fresh = [c for c, r in procs.items() if "carried_from" not in r and cell_variant(stage, c) in VARIANTS]
        assert len(fresh) == 1, (stage, procs.keys())  # it loaded the new binary and recorded it
        assert "carried_from" not in procs[_cell(stage, "canary_wrong_result")]
    # a cell p2 carried from p1 names p1, where it ran, not p2
    origin = {c["variant"]: c["source_pack"] for c in carried}
    assert origin.get("scalar", p1.name) == p1.name and origin.get("wmma", p2.name) == p2.name
    assert _problems(p3) == []


def test_fresh_carries_nothing(chain, tmp_path, fake_plan_env, monkeypatch):
    root = _copy_root(chain[0], tmp_path / "packs")
    pack = _run(monkeypatch, root, {"device_edit": ["wmma"]}, fresh=True)
    inc = _inc(pack)
    assert inc["fresh"] is True and inc["carried"] == [] and inc["keys"]
    assert all("carried_from" not in r for s in CARRY_STAGES for r in read_json(pack / s / "procs.json").values())
    assert _problems(pack) == []


def test_a_previous_pack_that_does_not_verify_is_not_carried_from(chain, tmp_path, fake_plan_env, monkeypatch):
    root = _copy_root(chain[0], tmp_path / "packs")
    newest = sorted(p for p in root.iterdir() if p.name[0].isdigit())[-1]
    log = newest / "correctness" / "canary_wrong_result.log"
    log.write_text(log.read_text() + "edited\n")
    pack = _run(monkeypatch, root, {"device_edit": ["wmma"]})
    inc = _inc(pack)
    assert inc["carried"] == [] and f"{newest.name} does not verify" in inc["reason"]


def test_a_change_of_one_key_part_reruns_only_that_stage_and_variant(chain):
    _, _, p2, _ = chain
    keys = json.loads(json.dumps(_inc(p2)["keys"]))
    keys["sanitize"]["scalar"]["check"] = "0" * 64  # the sanitizer's check code changed
    keys["stability"]["scalar"]["gpu"] = dict(keys["stability"]["scalar"]["gpu"], driver_version="999.1")
    plan = make_plan(p2, keys, list(CARRY_STAGES))
    got = {(c.stage, c.variant) for c in plan.carried}
    # scalar stays carried where nothing changed; in no stage are both variants carried
    assert ("sanitize", "scalar") not in got and ("stability", "scalar") not in got
    # where nothing changed one variant is carried; which one is the stage's cheapest cell in the source pack,
    # which depends on the stand-in cells' measured durations, so it may differ from stage to stage
    for stage in ("tensor_proof", "correctness"):
        assert len({v for s, v in got if s == stage}) == 1, (stage, got)
    for stage in CARRY_STAGES:
        assert len({v for s, v in got if s == stage}) <= 1


# ---- verify of the chain --------------------------------------------------------------------------------------

def _p2_copy(chain, tmp_path) -> tuple[Path, Path, Path]:
    root = _copy_root(chain[0], tmp_path / "packs")
    return root, root / chain[1].name, root / chain[2].name


def test_an_edited_carried_file_fails_even_with_the_index_rewritten(chain, tmp_path):
    _, p1, p2 = _p2_copy(chain, tmp_path)
    rec = next(c for c in _inc(p2)["carried"] if c["stage"] == "correctness")
    rel = next(r for r in rec["files"] if r.endswith(".json"))
    _edit_json(p2 / rel, lambda d: d.update(ok=True, forged=1))
    write_index(p2)  # the pack is self-consistent again: only the chain can tell
    problems = _problems(p2)
    assert any(f"carried file {rel}" in p for p in problems), problems


def test_a_missing_source_pack_is_one_clear_failure_and_carried_from_finds_it(chain, tmp_path):
    root, p1, p2 = _p2_copy(chain, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.move(str(p1), elsewhere / p1.name)
    problems = _problems(p2)
    assert len(problems) == 1 and f"come from pack {p1.name}, which is not next to the pack" in problems[0]
    assert _problems(p2, carried_from=elsewhere) == []
    assert _problems(p2, carried_from=elsewhere / p1.name) == []
    out = run_cli("verify", str(p2), "--stage-package", FAKE, env=dict(os.environ, FAKE_PLAN="{}"))
    assert out.returncode == 1 and "--carried-from DIR" in out.stdout and "Traceback" not in out.stderr
    out = run_cli("verify", str(p2), "--carried-from", str(elsewhere), "--stage-package", FAKE,
                  env=dict(os.environ, FAKE_PLAN="{}"))
    assert out.returncode == 0, out.stdout + out.stderr


def test_an_edited_source_pack_fails(chain, tmp_path):
    _, p1, p2 = _p2_copy(chain, tmp_path)
    log = p1 / "correctness" / "scalar.log"
    log.write_text(log.read_text() + "edited\n")
    problems = _problems(p2)
    assert any(f"source pack {p1.name} does not verify" in p for p in problems), problems
    write_index(p1)  # made self-consistent: it is no longer the pack the cells came from
    problems = _problems(p2)
    assert any("index.json differs from the digest pack.json records" in p for p in problems), problems


def test_a_source_pack_swapped_for_another_fails(chain, tmp_path):
    root, p1, p2 = _p2_copy(chain, tmp_path)
    p3 = root / chain[3].name
    shutil.rmtree(p1)
    shutil.copytree(p3, p1)  # another pack under the source's name
    problems = _problems(p2)
    assert any("is not the pack the carried cells came from" in p for p in problems), problems


@pytest.mark.parametrize("where", ["record", "record_and_table", "device_everywhere"])
def test_changed_keys_fail(chain, tmp_path, where):
    _, _, p2 = _p2_copy(chain, tmp_path)

    def change(pj):
        inc = pj["incremental"]
        rec = next(c for c in inc["carried"] if c["stage"] == "stability")
        if where == "record":
            rec["keys"]["check"] = "1" * 64
        elif where == "record_and_table":  # consistent inside the pack, not with the source
            for c in inc["carried"]:
                if c["stage"] == "stability":
                    c["keys"]["check"] = "1" * 64
            inc["keys"]["stability"]["scalar"]["check"] = "1" * 64
        else:  # the device key everywhere: the pack's own SASS says otherwise
            for c in inc["carried"]:
                c["keys"]["device"] = "2" * 64
            for table in inc["keys"].values():
                table["scalar"]["device"] = "2" * 64

    _edit_json(p2 / "pack.json", change)
    write_index(p2)
    problems = _problems(p2)
    want = {"record": "its keys are not the pack's keys of stability/scalar",
            "record_and_table": "its keys are not those source pack",
            "device_everywhere": "the device key of"}[where]
    assert any(want in p for p in problems), problems


@pytest.mark.parametrize("attack", ["unmark", "mark_fresh", "canary", "bench", "outside_id", "own_id"])
def test_forged_marks_and_records_fail(chain, tmp_path, attack):
    _, p1, p2 = _p2_copy(chain, tmp_path)
    if attack == "unmark":  # a carried cell passed off as run in this pack
        _edit_json(p2 / "correctness" / "procs.json", lambda d: d["scalar"].pop("carried_from"))
        want = "is not marked carried"
    elif attack == "mark_fresh":
        _edit_json(p2 / "correctness" / "procs.json", lambda d: d["wmma"].update(carried_from=p1.name))
        want = "marks cell 'wmma' carried"
    else:
        def change(pj):
            rec = next(c for c in pj["incremental"]["carried"] if c["stage"] == "correctness")
            if attack == "canary":
                rec.update(cell="canary_wrong_result", variant="canary_wrong_result")
            elif attack == "bench":
                rec["stage"] = "bench"
            elif attack == "outside_id":
                rec["source_pack"] = "../../etc"
            else:
                rec["source_pack"] = pj["pack_id"]
        _edit_json(p2 / "pack.json", change)
        want = {"canary": "canaries always run", "bench": "never carries cells",
                "outside_id": "not another pack's id", "own_id": "not another pack's id"}[attack]
    write_index(p2)
    problems = _problems(p2)
    assert any(want in p for p in problems), problems


def test_a_carried_procs_entry_edited_fails(chain, tmp_path):
    _, p1, p2 = _p2_copy(chain, tmp_path)
    _edit_json(p2 / "stability" / "procs.json", lambda d: d["scalar"].update(duration_s=0.01, returncode=0))
    write_index(p2)
    problems = _problems(p2)
    assert any("procs.json entry is not the one of source pack" in p for p in problems), problems


# ---- labels and reports ---------------------------------------------------------------------------------------

def test_labels_say_what_was_carried_and_nothing_else_changes(chain):
    _, p1, p2, _ = chain
    pj1, pj2 = read_json(p1 / "pack.json"), read_json(p2 / "pack.json")
    assert "carried" not in json.loads(format_labels(pj1, "json"))
    got = json.loads(format_labels(pj2, "json"))
    assert got["label"] == pj2["label"] == "evidence:complete"
    assert got["carried"]["cells"] == 4 and got["carried"]["source_packs"] == [p1.name]
    assert format_labels(pj2, "text") == format_labels(pj1, "text")  # one label per line, nothing else
    assert f"4 cells carried from {p1.name}" in (p2 / "comment.md").read_text()
    assert "carried" not in (p1 / "comment.md").read_text()
