"""Suite files and ad-hoc shape strings."""
from __future__ import annotations

from pathlib import Path

import pytest

from evpack.timing.suites import MODES, Shape, SuiteError, load_suite, parse_shape, parse_suite, with_adhoc

REPO = Path(__file__).resolve().parents[1]


def test_parse_shape():
    s = parse_shape("B=16,H=16,S=512,D=64,dtype=fp16,causal=1")
    assert s == Shape(16, 16, 512, 64, "fp16", True)
    assert s.key == "B=16,H=16,S=512,D=64,dtype=fp16,causal=1"
    assert parse_shape(s.key) == s
    assert parse_shape("B=2, H=8, S=128, D=128, dtype=BF16") == Shape(2, 8, 128, 128, "bf16", False)


@pytest.mark.parametrize("text, msg", [
    ("B=16,H=16,S=512", "missing D"),
    ("B=16,H=16,S=512,D=x", "D must be an integer"),
    ("B=0,H=16,S=512,D=64", "B must be a positive integer"),
    ("B=1,H=1,S=1,D=64,dtype=fp8", "dtype must be one of"),
    ("B=1,H=1,S=1,D=64,causal=maybe", "causal must be"),
    ("B=1,H=1,S=1,D=64,Q=3", "unknown key"),
    ("B=1,B=2,H=1,S=1,D=64", "given twice"),
    ("B16,H=1,S=1,D=64", "expected KEY=VALUE"),
])
def test_parse_shape_errors(text, msg):
    with pytest.raises(SuiteError, match=msg):
        parse_shape(text)


def test_quick_suite_is_the_canonical_grid():
    s = load_suite("quick", REPO)
    keys = {x.shape.key for x in s.shapes}
    assert len(keys) == 8
    for B, H in ((2, 8), (4, 16), (16, 16), (32, 32)):
        for c in (0, 1):
            assert f"B={B},H={H},S=512,D=64,dtype=fp16,causal={c}" in keys
    assert s.canonical.key == "B=16,H=16,S=512,D=64,dtype=fp16,causal=0"
    assert all(x.modes == MODES for x in s.shapes)
    assert s.rule.target_rel_iqr == 0.01 and s.rule.min_samples >= 30


def test_full_suite_adds_dtypes_headdims_and_sweep():
    s = load_suite("full", REPO)
    shapes = [x.shape for x in s.shapes]
    assert len(shapes) == len(set(shapes))  # merged duplicates
    assert {(x.dtype, x.D) for x in shapes if (x.B, x.H, x.S) == (16, 16, 512)} == {
        ("fp16", 64), ("fp16", 128), ("bf16", 64), ("bf16", 128)}
    sweep = sorted({x.S for x in shapes if x.H == 16 and x.B * x.S == 8192 and x.D == 64 and x.dtype == "fp16"})
    assert sweep == [128, 256, 512, 1024, 2048, 4096]
    canon = next(x for x in s.shapes if x.shape == s.canonical)
    assert "sequence sweep" in canon.tags and canon.modes == MODES


def test_adhoc_shapes():
    quick = load_suite("quick", REPO)
    s = with_adhoc(quick, ["B=1,H=2,S=64,D=64"])
    assert len(s.shapes) == 9 and s.shapes[-1].tags == ("adhoc",)
    only = with_adhoc(quick, ["B=1,H=2,S=64,D=64", "B=16,H=16,S=512,D=64"], only=True)
    assert only.name == "adhoc" and len(only.shapes) == 2
    with pytest.raises(SuiteError):
        with_adhoc(quick, [], only=True)


def _doc(**group):
    base = {"name": "g", "S": [512], "D": [64], "dtype": ["fp16"], "causal": [False], "modes": ["cold"]}
    base.update(group)
    return {"name": "t", "group": [base]}


@pytest.mark.parametrize("group, msg", [
    ({"BH": [[1, 2]], "B": [1], "H": [2]}, "exactly one of"),
    ({}, "exactly one of"),
    ({"tokens": 1000, "H": [16]}, "multiple of S"),
    ({"BH": [[1, 2]], "modes": ["hot"]}, "modes must be"),
    ({"BH": [[1, 2]], "extra": 1}, "unknown keys"),
    ({"BH": [1, 2]}, "pairs"),
])
def test_bad_suites(group, msg):
    with pytest.raises(SuiteError, match=msg):
        parse_suite(_doc(**group))


def test_bad_sampling_and_missing_file(tmp_path):
    with pytest.raises(SuiteError, match="unknown keys"):
        parse_suite({"name": "t", "sampling": {"samples": 3}})
    with pytest.raises(SuiteError, match=r"\[sampling\]"):
        parse_suite({"name": "t", "sampling": {"time_cap_s": -1}})
    with pytest.raises(SuiteError, match="no suite file"):
        load_suite("nope", tmp_path)
    (tmp_path / "bad.toml").write_text("name = [")
    with pytest.raises(SuiteError):
        load_suite(tmp_path / "bad.toml", tmp_path)
