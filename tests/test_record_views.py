"""records/: the typed views of summary.json, ab.json and the SASS and PTXAS kernel rows hold the values as the
file holds them, and a corrupted file gives a view of empty fields rather than a traceback."""
from __future__ import annotations

import json
from dataclasses import fields

import pytest
import reference

from evpack.records.bench import AbRecord, AbRow, BenchRow, BenchRun, BenchSummary, Clocks
from evpack.records.ptxas import rows_of as ptxas_rows
from evpack.records.sass import rows_of as sass_rows
from evpack.timing import ab
from evpack.timing.ab_stage import load as load_ab
from evpack.timing.summary import read_summary


def _named(view) -> dict:
    return {f.name: getattr(view, f.name) for f in fields(view) if f.name != "raw"}


@reference.needs("DEFAULT")
def test_a_summary_view_holds_every_value_as_written():
    stored = read_summary(reference.DEFAULT / "bench")
    view = BenchSummary.from_json(stored)
    assert len(view.rows) == len(stored["rows"]) > 0 and len(view.leaderboard) == len(stored["leaderboard"]) > 0
    for row, raw in zip(view.rows, stored["rows"], strict=True):
        assert row.raw is raw
        assert {k: v for k, v in _named(row).items() if k in raw} == {k: raw[k] for k in _named(row) if k in raw}
        assert all(v is None for k, v in _named(row).items() if k not in raw)
    assert view.canonical == stored["canonical"] and view.canonical_speedup == stored["canonical_speedup"]
    best = next(r for r in view.rows if r.impl == "evpack" and r.timed)
    assert best.speedup("default") == best.raw["speedup_vs"].get("default")


@reference.needs("FULL")
def test_an_ab_view_counts_its_rows():
    stored = load_ab(reference.FULL / "bench")
    view = AbRecord.from_json(stored)
    assert view.passed and len(view.rows) == len(stored["rows"]) > 0
    assert {v: view.count(v) for v in ab.VERDICTS} == stored["counts"]
    assert view.rule.rule_version == stored["rule"].get("version", 1)
    unsure = view.with_verdict(ab.UNSURE)
    assert [e.key for e in unsure] == sorted(e["key"] for e in stored["rows"] if e["verdict"] == ab.UNSURE)
    assert all(isinstance(e.base.median_us, float) for e in view.rows)


@pytest.mark.parametrize("value", [None, 3, "rows", [], [1, "x"], {"rows": "x", "leaderboard": {"a": 1}},
                                   {"rows": [None, 7, {"impl": ["x"]}], "shards": {"dir": 1}, "before": "x"}])
def test_a_view_of_a_corrupted_file_is_a_view_of_empty_fields(value):
    summary = BenchSummary.from_json(value)
    assert all(isinstance(r, BenchRow) for r in summary.rows) and summary.speedups_vs() == {}
    assert [r.impl for r in summary.rows] == ([["x"]] if isinstance(value, dict) and "shards" in value else [])
    assert not any(r.timed for r in summary.rows) and all(r.kernel_names == [] for r in summary.rows)
    record = AbRecord.from_json(value)
    assert not record.passed and len(record.rows) == len(summary.rows) and record.count(ab.SAME) == 0
    assert record.rule.rule_version == 1 and all(e.base.median_us is None for e in record.rows)
    run = BenchRun.from_json(value)
    assert run.shards == () and run.device.name is None
    clocks = Clocks.from_json(value)
    assert clocks.before.sm_mhz is None and clocks.throttled is None
    assert AbRow.from_json(value).base.median_us is None


@reference.needs("DEFAULT")
@pytest.mark.parametrize("stage,rows_of", [("sass", sass_rows), ("ptxas", ptxas_rows)])
def test_kernel_row_views_hold_every_value_as_written(stage, rows_of):
    stored = json.loads((reference.DEFAULT / stage / "outcome.json").read_text())["data"]["kernels"]
    views = rows_of(stored)
    assert len(views) == len(stored) > 0
    for row, raw in zip(views, stored, strict=True):
        named = _named(row)
        assert {k: v for k, v in named.items() if k in raw} == {k: raw[k] for k in named if k in raw}
        assert row.kernel == (raw["variant"], raw["config"], raw["dtype"], raw["head_dim"])
        assert row.short == f"{raw['variant']}/{raw['config']}/{raw['dtype']}/d{raw['head_dim']} on {raw['arch']}"


def test_a_sass_view_names_every_table_opcode():
    """The SASS row view has a field for each opcode the stage counts (parsers.sass.TABLE_OPCODES)."""
    from dataclasses import fields as fields_of

    from evpack.parsers.sass import TABLE_OPCODES
    from evpack.records.sass import SassRow
    from evpack.stages.sass import ROW_KEYS

    assert set(ROW_KEYS) <= {f.name for f in fields_of(SassRow)}
    assert {op.lower() for op in TABLE_OPCODES} <= {f.name for f in fields_of(SassRow)}


@pytest.mark.parametrize("value", [None, 3, [None, "x", 7], [{"variant": None, "symbol": "_Z3foo", "arch": "sm_90"}]])
def test_kernel_row_views_of_corrupted_data(value):
    for rows_of in (sass_rows, ptxas_rows):
        views = rows_of(value)
        assert all(r.status is None for r in views)
        assert [r.short for r in views] == (["_Z3foo on sm_90"] if isinstance(value, list) and value
                                            and isinstance(value[0], dict) else [])


@pytest.mark.parametrize("value", [None, [], {"members": [None, {"gpu": "x", "gates": [1], "headline": 3}]},
                                   {"gpu_types": [{"name": None, "members": "x"}], "labels": "x"}])
def test_a_merged_record_view_of_corrupted_data(value):
    from evpack.records.merged import MergedRecord

    record = MergedRecord.from_json(value)
    assert all(m.gpu_name == "no GPU" and dict(m.gates) == {} and dict(m.headline) == {} for m in record.members)
    assert all(t.count == 0 for t in record.gpu_types) and record.source.commit is None
