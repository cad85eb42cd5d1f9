"""One op factory and one dict walker: the ops and the three stored-vs-derived comparisons share them."""
from __future__ import annotations

import ast
import math

from conftest import REPO

from evpack.derivation import view_differences
from evpack.merge.verify import differences as member_differences
from evpack.provenance.statement import diff_facts

PACKAGE = REPO / "python" / "evpack"


def test_only_the_factory_registers_a_torch_custom_op():
    hits = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
                  if any(isinstance(n, ast.Attribute) and n.attr == "custom_op" for n in ast.walk(ast.parse(p.read_text()))))
    assert hits == ["op.py"]


def test_the_head_and_base_ops_come_from_one_factory():
    import torch

    from evpack import api
    from evpack.timing import ab_runner

    assert api._fwd._init_fn.__code__ is ab_runner._base_fwd._init_fn.__code__
    head, base = torch.ops.evpack.flash_attention_fwd.default, torch.ops.evpack_ab.base_fwd.default
    assert [a.type for a in head._schema.arguments] == [a.type for a in base._schema.arguments]


def test_decision_views_keep_their_messages():
    stored = {"a": 1, "only_stored": 1, "x": {"f": 1.0, "l": [1, 2], "m": [{"k": "s"}], "nan": None}}
    derived = {"a": 2, "only_derived": 1, "x": {"f": 1.0 + 1e-12, "l": [1], "m": [{"k": "t"}], "nan": math.nan}}
    assert sorted(view_differences(stored, derived)) == ["a: stored 1, derived 2", "x.l: 2 entries stored, 1 derived",
                                                          "x.m[0].k: stored 's', derived 't'"]
    assert view_differences(1, 2) == ["value: stored 1, derived 2"]
    assert view_differences([1], [1, 2]) == ["data: 1 entries stored, 2 derived"]


def test_provenance_facts_keep_their_messages():
    stated = {"b": 1, "a": {"x": 1, "y": None}, "bench_clocks": {"sm": 1}, "gone": 1}
    derived = {"b": 1, "a": {"x": 2}, "bench_clocks": {"sm": 2}, "new": 1}
    assert diff_facts(stated, derived) == ["a.x", "bench_clocks", "gone", "new"]
    assert diff_facts(stated, derived, "p.") == ["p.a.x", "p.bench_clocks", "p.gone", "p.new"]


def test_merged_members_keep_their_messages():
    stored = {"label": "a", "gone": 1, "g": {"x": [1]}}
    derived = {"label": "b", "new": 2, "g": {"x": [2]}}
    assert member_differences(stored, derived, "m") == [
        "m.label: merged.json says 'a' but the files give 'b'", "m.new: missing in merged.json",
        "m.g.x: merged.json says [1] but the files give [2]", "m.gone: not derivable from the member's files"]
