"""The statement's run-only facts (the command, the source tree's hash, the GPUs, the CI identity) cannot be
re-derived by verify; each one present must have the shape the writer gives it. A fuzzed pack whose statement
named its command by a number once verified (tests/test_cli_fuzz.py)."""
from __future__ import annotations

import copy
import json

import pytest
import reference

from evpack.provenance.statement import _RUN_FACT_SHAPES, run_fact_problems

STATEMENTS = [p for p in reference.PACKS if (p / "provenance.json").is_file()]


@pytest.mark.skipif(not STATEMENTS, reason="no committed pack holds a provenance statement")
@pytest.mark.parametrize("pack", STATEMENTS, ids=lambda p: p.name)
def test_every_committed_statement_has_the_shape(pack):
    assert run_fact_problems(json.loads((pack / "provenance.json").read_text())) == []


# per path, values of a type its rule refuses (a float fits none of them; a bool is no integer)
WRONG = {("source", "tree", "files"): ["many", True, 1.5]}
WRONG_INSIDE = {("invocation", "command"): ["python3", 3], ("source", "tree", "missing"): [None],
                ("gpu", "devices", "devices"): [{"index": "0", "name": "H200", "uuid": "u", "driver": "d"}],
                ("ci",): {"system": 1, "variables": {}}}


@pytest.mark.skipif(not STATEMENTS, reason="no committed pack holds a provenance statement")
@pytest.mark.parametrize("path", [p for p, _, _ in _RUN_FACT_SHAPES], ids=lambda p: "predicate." + ".".join(p))
def test_a_run_fact_of_another_type_is_named(path):
    for wrong in [*WRONG.get(path, [12.5]), *([WRONG_INSIDE[path]] if path in WRONG_INSIDE else [])]:
        statement = json.loads((STATEMENTS[-1] / "provenance.json").read_text())
        node = statement["predicate"]
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = copy.deepcopy(wrong)
        problems = run_fact_problems(statement)
        assert problems == [f"provenance: predicate.{'.'.join(path)} is not "
                            f"{next(w for p, _, w in _RUN_FACT_SHAPES if p == path)}"], (wrong, problems)


def test_a_predicate_that_is_not_an_object():
    assert run_fact_problems({"predicate": []}) == ["provenance: the statement's predicate is not an object"]


def test_pack_facts_of_a_pack_json_whose_stages_are_no_object():
    """A tampered pack.json (stages null, a list) re-derives facts with no stages, so verify names the
    difference with the statement; before, the derivation raised and the statement was called malformed."""
    from evpack.provenance.statement import pack_facts
    from evpack.records.env import EnvJson
    from evpack.records.pack import PackJson

    for stages in (None, ["build"], "build"):
        facts = pack_facts(pack_id="p", pack_json=PackJson.from_json({"stages": stages}), env_json=EnvJson.from_json({}),
                           clocks_json=None)
        assert facts.stages == []
    facts = pack_facts(pack_id="p", pack_json=PackJson.from_json({"stages": {"sass": {}, "build": {}}}),
                       env_json=EnvJson.from_json({}), clocks_json=None)
    assert facts.stages == ["build", "sass"]
