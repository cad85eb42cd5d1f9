"""compare: SAME / FASTER / SLOWER from measured spreads, the drift of SDPA rows, exit codes."""
from __future__ import annotations

import json

import pytest

from evpack.timing import compare as cmp

SHAPE = "B=16,H=16,S=512,D=64,dtype=fp16,causal=0"


def row(impl="evpack", variant="wmma", config="m64n64w4s1", median=50.0, iqr=0.5, mode="cold", status="ok",
        shape=SHAPE):
    return {"impl": impl, "variant": variant, "config": config, "shape": shape, "mode": mode,
            "status": status, "median_us": median if status == "ok" else None, "iqr_us": iqr}


def test_classify_uses_combined_spread():
    a = row(median=50.0, iqr=0.5)
    # threshold = 2 * sqrt(0.5^2 + 0.5^2) = 1.414 us (no drift)
    assert cmp.classify(a, row(median=51.3, iqr=0.5), 0.0) == cmp.SAME
    assert cmp.classify(a, row(median=51.5, iqr=0.5), 0.0) == cmp.SLOWER
    assert cmp.classify(a, row(median=48.5, iqr=0.5), 0.0) == cmp.FASTER
    # a noisier B widens the band: the same 1.5 us is now noise
    assert cmp.classify(a, row(median=51.5, iqr=1.0), 0.0) == cmp.SAME
    # drift of untouched SDPA rows widens it too: 3% of ~51 us
    assert cmp.classify(a, row(median=52.5, iqr=0.5), 0.03) == cmp.SAME
    assert cmp.threshold(a, row(median=50.0, iqr=0.5), 0.0) == pytest.approx(2 * 0.5 * 2 ** 0.5)


def test_drift_is_median_shift_of_sdpa_rows():
    a = [row("sdpa", b, "", m) for b, m in (("default", 50.0), ("flash", 70.0), ("math", 400.0))]
    b = [row("sdpa", b, "", m) for b, m in (("default", 51.0), ("flash", 70.0), ("math", 440.0))]
    assert cmp.drift(a, b) == pytest.approx(0.02)  # shifts 2%, 0%, 10% -> median 2%
    assert cmp.drift([row()], [row()]) == 0.0  # no SDPA rows: spread only


def test_compare_rows_marks():
    a = [row(), row(variant="scalar", config="c", median=900.0), row(config="old"),
         row(variant="x", status="error"), row("sdpa", "default", "", 50.0)]
    b = [row(median=50.2), row(variant="scalar", config="c", median=1000.0), row(config="new"),
         row(variant="x"), row("sdpa", "default", "", 50.0)]
    diff = cmp.compare_rows(a, b)
    marks = {(e["variant"], e["config"]): e["mark"] for e in diff["rows"]}
    assert marks == {("wmma", "m64n64w4s1"): "SAME", ("scalar", "c"): "SLOWER", ("wmma", "old"): "GONE",
                     ("x", "m64n64w4s1"): "N/A", ("default", ""): "SAME", ("wmma", "new"): "NEW"}
    assert diff["counts"]["SLOWER"] == 1 and cmp.exit_code(diff) == 1
    assert [e["variant"] for e in cmp.regressions(diff)] == ["scalar"]
    text = cmp.render(diff, only_changed=True)
    assert "SLOWER" in text and "| SAME |" not in text and "drift" in text


def test_sdpa_slower_is_not_our_regression():
    a = [row("sdpa", "math", "", 100.0, 0.1), row("sdpa", "default", "", 50.0), row()]
    b = [row("sdpa", "math", "", 200.0, 0.1), row("sdpa", "default", "", 50.0), row()]
    diff = cmp.compare_rows(a, b)
    assert diff["counts"]["SLOWER"] == 1 and cmp.exit_code(diff) == 0


def _pack(tmp_path, name, rows):
    d = tmp_path / name / "bench"
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"schema": 1, "rows": rows}))
    return tmp_path / name


def _main(args: list[str]) -> int:
    from evpack.cli import main

    return main(["compare", *args])


def test_main_exit_codes(tmp_path, capsys):
    a = _pack(tmp_path, "a", [row(), row("sdpa", "default", "", 50.0)])
    same = _pack(tmp_path, "same", [row(median=50.1), row("sdpa", "default", "", 50.0)])
    slow = _pack(tmp_path, "slow", [row(median=60.0), row("sdpa", "default", "", 50.0)])
    assert _main([str(a), str(same)]) == 0
    assert _main([str(a), str(slow)]) == 1
    out = capsys.readouterr()
    assert "SLOWER" in out.out and "REGRESSION" in out.err
    # accepts the bench folder or the summary file too
    assert _main([str(a / "bench"), str(same / "bench" / "summary.json")]) == 0


def test_main_bad_input(tmp_path, capsys):
    a = _pack(tmp_path, "a", [row()])
    assert _main([str(a), str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err
    (tmp_path / "nobench").mkdir()
    assert _main([str(a), str(tmp_path / "nobench")]) == 2
    assert "no bench data" in capsys.readouterr().err
    empty = _pack(tmp_path, "empty", [])
    assert _main([str(a), str(empty)]) == 2
    (tmp_path / "bad" / "bench").mkdir(parents=True)
    (tmp_path / "bad" / "bench" / "summary.json").write_text("{not json")
    assert _main([str(a), str(tmp_path / "bad")]) == 2
    with pytest.raises(SystemExit) as usage:  # argparse: a missing PACK_B is a usage error
        _main([str(a)])
    assert usage.value.code == 2
