"""records/bench.py: the typed views of summary.json and ab.json hold the values as the file holds them, and a
corrupted file gives a view of empty fields rather than a traceback."""
from __future__ import annotations

from dataclasses import fields

import pytest
import reference

from evpack.records.bench import AbRecord, AbRow, BenchRow, BenchRun, BenchSummary, Clocks
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
