"""The incremental plan made when the build ends, before the SASS dump, and checked when the dump is there.

The packs are made by the real pipeline on the stand-in stages in their "cells" mode (see
test_attacks_incremental.py). `device_edit` changes a variant's kernels in the SASS dump while its source stays the
same: exactly the case the early plan cannot see (every key part but the device key is equal), so the stage that
carried it must run again, and the pack must end up carrying only what a plan made after the dump carries.
"""
from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import FAKE, REPO, TESTS
from test_attacks_incremental import VARIANTS, _inc, _problems, _run

from evpack.incremental import CARRY_STAGES
from evpack.incremental.keys import derived_keys
from evpack.stages.base import read_json

SLOW_SASS = {"sass": "sleep:3"}  # the dump is written at once; the stage concludes 3 s later


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """A packs folder holding one complete pack in which every cell ran."""
    root = tmp_path_factory.mktemp("early") / "packs"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(REPO / "python")]))
        p1 = _run(mp, root, {})
    return root, p1


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(REPO / "python")]))
    return monkeypatch


def _copy(first, tmp_path):
    root = tmp_path / "packs"
    shutil.copytree(first[0], root, symlinks=True)
    return root


def _stages(pack):
    return read_json(pack / "pack.json")["timings"]["stages"]


def _carried_pairs(pack):
    return {(c["stage"], c["variant"]) for c in _inc(pack)["carried"]}


def test_with_nothing_changed_the_gpu_checks_start_before_the_sass_dump_ends(first, tmp_path, env):
    root = _copy(first, tmp_path)
    pack = _run(env, root, dict(SLOW_SASS))
    t = _stages(pack)
    assert t["tensor_proof"]["start_s"] < t["sass"]["end_s"]  # it did not wait for the dump
    inc = _inc(pack)
    assert "planned when the build ended" in inc["reason"] and "run again" not in inc["reason"]
    # one variant per stage carried, each with its full keys (device included) equal to the source's
    assert {s for s, _ in _carried_pairs(pack)} == set(CARRY_STAGES)
    source_keys = _inc(first[1])["keys"]
    for c in inc["carried"]:
        assert c["keys"] == source_keys[c["stage"]][c["variant"]] and "device" in c["keys"]
    assert _problems(pack) == []


def test_every_kernel_changed_under_the_same_source_reruns_every_stage_that_carried(first, tmp_path, env):
    """Both variants' device code differs while their source keys are equal: the early plan carried one variant in
    every stage; the device keys refuse every one of them; each such stage runs again and carries nothing."""
    root = _copy(first, tmp_path)
    pack = _run(env, root, {**SLOW_SASS, "device_edit": list(VARIANTS)})
    inc = _inc(pack)
    assert inc["carried"] == []
    assert "the early plan also carried" in inc["reason"] and "run again under the full plan" in inc["reason"]
    for stage in CARRY_STAGES:
        assert stage in inc["reason"]
        procs = read_json(pack / stage / "procs.json")
        assert set(procs) >= {f"memcheck.{v}.m64n64" if stage == "sanitize" else v for v in VARIANTS}
        assert not any("carried_from" in r for r in procs.values()), stage
    # the keys the pack records are the new dump's: the next run compares with them
    new = derived_keys(pack)
    assert all(inc["keys"][s][v]["device"] == new[v]["device"] for s in CARRY_STAGES for v in VARIANTS)
    assert _problems(pack) == []


def test_one_kernel_changed_under_the_same_source_ends_carrying_only_the_unchanged_variant(first, tmp_path, env):
    root = _copy(first, tmp_path)
    pack = _run(env, root, {**SLOW_SASS, "device_edit": ["wmma"]})
    assert _carried_pairs(pack) == {(s, "scalar") for s in CARRY_STAGES}
    for stage in CARRY_STAGES:
        procs = read_json(pack / stage / "procs.json")
        assert "carried_from" not in procs["memcheck.wmma.m64n64" if stage == "sanitize" else "wmma"]
    assert _problems(pack) == []


def test_a_stage_that_ran_without_sass_plans_from_every_key(first, tmp_path, env):
    """`--stage correctness` runs no SASS stage: no early plan is made, and without the dump no device key is known,
    so every cell runs (as before the early plan)."""
    from evpack.evidence import run_evidence

    root = _copy(first, tmp_path)
    env.setenv("FAKE_PLAN", json.dumps({"cells": True}))
    pack = run_evidence(REPO, selected=["correctness"], packs_root=root, options={"variants": VARIANTS},
                        stages=FAKE, gpu=(True, "")).pack
    inc = _inc(pack)
    assert inc["carried"] == [] and "planned when the build ended" not in inc["reason"]
    assert "keys are not known" in inc["reason"]


def test_a_runner_that_keeps_a_wrong_early_plan_makes_a_pack_that_never_verifies(first, tmp_path, env):
    """The attack: a runner that skips the check against the dump, keeps the early plan although both variants'
    device code changed, and records the source's own full keys, for the carried cells and as the pack's keys (the
    best lie it can tell: every key record agrees). verify derives the device keys from the pack's own SASS dump
    and refuses the pack."""
    from dataclasses import replace

    from evpack.incremental import run as inc_run
    from evpack.incremental.plan import Plan

    source_keys = _inc(first[1])["keys"]

    def lying(self):
        with self._lock:
            self._dump_done = True
            if self.speculative:
                cells = tuple(replace(c, keys=source_keys[c.stage][c.variant]) for c in self.plan.carried)
                self.plan = Plan(cells, self.plan.reason, False, self.plan.source, self.plan.sources)
                self.keys = json.loads(json.dumps(source_keys))
                self.speculative = False

    env.setattr(inc_run.IncrementalRun, "sass_concluded", lying)
    root = _copy(first, tmp_path)
    pack = _run(env, root, {**SLOW_SASS, "device_edit": list(VARIANTS)})
    assert _inc(pack)["carried"]  # the lie made it into the pack
    problems = _problems(pack)
    assert problems and all(p.startswith("incremental:") for p in problems), problems
    assert any("device" in p for p in problems), problems


def test_a_stage_that_carried_nothing_does_not_check_the_plan_before_the_dump_is_complete(tmp_path, monkeypatch):
    """settle() of a stage that carried nothing copies nothing and must not derive the device keys early (the SASS
    dump may still be being written): the plan stays unchecked until the SASS stage concludes."""
    from evpack.incremental.plan import CarriedCell, Plan
    from evpack.incremental.run import IncrementalRun

    (tmp_path / "packs").mkdir()
    inc = IncrementalRun(REPO, tmp_path / "packs", tmp_path / "pack", variants=["scalar", "wmma"], fresh=False,
                         exclude="none", early=True)
    cell = CarriedCell("correctness", "wmma", "wmma", "20261125T000000Z-aaaaaaaaaaaa", {}, {})
    inc.plan, inc.speculative = Plan((cell,), "early", source=tmp_path / "packs"), True
    inc.ran_with = {"sanitize": set(), "correctness": {"wmma"}}
    monkeypatch.setattr(IncrementalRun, "sass_concluded", lambda self: pytest.fail("checked before the dump"))
    assert inc.hold("sanitize") == () and inc.hold("correctness") == ("sass",)
    assert inc.settle("sanitize") is False and inc.speculative is True and inc.applied == []
