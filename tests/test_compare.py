"""compare: SAME / FASTER / SLOWER from measured spreads, the drift of SDPA rows, exit codes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import reference
from conftest import FAKE, copy_pack, fake_pack

from evpack.records.bench import BenchRow
from evpack.timing import compare as cmp

SHAPE = "B=16,H=16,S=512,D=64,dtype=fp16,causal=0"


def row(impl="evpack", variant="wmma", config="m64n64w4s1", median=50.0, iqr=0.5, mode="cold", status="ok",
        shape=SHAPE):
    return {"impl": impl, "variant": variant, "config": config, "shape": shape, "mode": mode,
            "status": status, "median_us": median if status == "ok" else None, "iqr_us": iqr}


def brow(*args, **kw) -> BenchRow:
    """The row as compare's readers see it (records.bench.BenchRow)."""
    return BenchRow.from_json(row(*args, **kw))


def test_classify_uses_combined_spread():
    a = brow(median=50.0, iqr=0.5)
    # threshold = 2 * sqrt(0.5^2 + 0.5^2) = 1.414 us (no drift)
    assert cmp.classify(a, brow(median=51.3, iqr=0.5), 0.0) == cmp.SAME
    assert cmp.classify(a, brow(median=51.5, iqr=0.5), 0.0) == cmp.SLOWER
    assert cmp.classify(a, brow(median=48.5, iqr=0.5), 0.0) == cmp.FASTER
    # a noisier B widens the band: the same 1.5 us is now noise
    assert cmp.classify(a, brow(median=51.5, iqr=1.0), 0.0) == cmp.SAME
    # drift of untouched SDPA rows widens it too: 3% of ~51 us
    assert cmp.classify(a, brow(median=52.5, iqr=0.5), 0.03) == cmp.SAME
    assert cmp.threshold(a, brow(median=50.0, iqr=0.5), 0.0) == pytest.approx(2 * 0.5 * 2 ** 0.5)


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
    marks = {(e.variant, e.config): e.mark for e in diff.rows}
    assert marks == {("wmma", "m64n64w4s1"): "SAME", ("scalar", "c"): "SLOWER", ("wmma", "old"): "GONE",
                     ("x", "m64n64w4s1"): "N/A", ("default", ""): "SAME", ("wmma", "new"): "NEW"}
    assert diff.counts["SLOWER"] == 1 and cmp.exit_code(diff) == 1
    assert [e.variant for e in cmp.regressions(diff)] == ["scalar"]
    text = cmp.render(diff, only_changed=True)
    assert "SLOWER" in text and "| SAME |" not in text and "drift" in text


def test_sdpa_slower_is_not_our_regression():
    a = [row("sdpa", "math", "", 100.0, 0.1), row("sdpa", "default", "", 50.0), row()]
    b = [row("sdpa", "math", "", 200.0, 0.1), row("sdpa", "default", "", 50.0), row()]
    diff = cmp.compare_rows(a, b)
    assert diff.counts["SLOWER"] == 1 and cmp.exit_code(diff) == 0


def _main(args: list[str]) -> int:
    from evpack.cli import main

    return main(["compare", *args])


@pytest.fixture
def bench_pack(tmp_path, fake_env):
    """make(rows) -> a whole pack (real pipeline, stand-in stages) whose bench/summary.json holds `rows`."""
    def make(rows: list[dict] | None) -> Path:
        fake_env({} if rows is None else {"bench_rows": rows})
        return fake_pack(tmp_path / "packs")

    return make


def _one_error_line(capsys, needle: str) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], err
    assert "Traceback" not in out + err
    return out


def test_main_exit_codes(bench_pack, capsys):
    a = bench_pack([row(), row("sdpa", "default", "", 50.0)])
    same = bench_pack([row(median=50.1), row("sdpa", "default", "", 50.0)])
    slow = bench_pack([row(median=60.0), row("sdpa", "default", "", 50.0)])
    capsys.readouterr()
    assert _main([str(a), str(same), "--stage-package", FAKE]) == 0
    assert "2 same" in capsys.readouterr().out
    assert _main([str(a), str(slow), "--stage-package", FAKE]) == 1
    out = capsys.readouterr()
    assert "SLOWER" in out.out and "REGRESSION" in out.err


def test_a_pack_that_does_not_verify_gets_no_verdict(bench_pack, tmp_path, capsys):
    """A tampered copy made faster (or changed at all) is refused with exit 1 before any row is compared."""
    a = bench_pack([row(median=60.0), row("sdpa", "default", "", 50.0)])
    forged = copy_pack(a, tmp_path / "forged")
    summary = forged / "bench" / "summary.json"
    data = json.loads(summary.read_text())
    data["rows"][0]["median_us"] = 40.0
    summary.write_text(json.dumps(data))
    capsys.readouterr()
    for args in ([a, forged], [forged, a]):
        assert _main([*map(str, args), "--stage-package", FAKE]) == 1
        out = _one_error_line(capsys, f"{forged.name} does not verify")
        assert out == "", "no verdict is printed for a pack that does not verify"


@reference.needs("COMPAT")
def test_a_tampered_reference_pack_gets_no_verdict(tmp_path, capsys):
    """The committed compatibility pack against a copy with one byte of its report changed."""
    ref = reference.COMPAT
    copy = copy_pack(ref, tmp_path / "copy")
    with open(copy / "report.md", "a", encoding="utf-8") as f:
        f.write("\n")
    assert _main([str(ref), str(copy)]) == 1
    assert _one_error_line(capsys, "does not verify") == ""


def test_only_whole_packs_are_compared(bench_pack, tmp_path, capsys):
    a = bench_pack([row()])
    for arg in (a / "bench", a / "bench" / "summary.json"):  # parts of a pack: nothing to verify them by
        assert _main([str(a), str(arg), "--stage-package", FAKE]) == 2
        _one_error_line(capsys, "compare needs whole packs")
    assert _main([str(a), str(tmp_path / "missing"), "--stage-package", FAKE]) == 2
    _one_error_line(capsys, "no such pack")
    (tmp_path / "notapack").mkdir()
    assert _main([str(a), str(tmp_path / "notapack"), "--stage-package", FAKE]) == 2
    _one_error_line(capsys, "not a finished pack")
    nobench = bench_pack(None)
    assert _main([str(a), str(nobench), "--stage-package", FAKE]) == 2
    _one_error_line(capsys, "no bench data")
    empty = bench_pack([])
    assert _main([str(a), str(empty), "--stage-package", FAKE]) == 2
    _one_error_line(capsys, "no bench rows")
    with pytest.raises(SystemExit) as usage:  # argparse: a missing PACK_B is a usage error
        _main([str(a)])
    assert usage.value.code == 2


@pytest.mark.parametrize("bad,needle", [
    ("not a row", "not an object"),
    ({"impl": "evpack", "variant": "wmma", "config": "c", "shape": SHAPE}, "mode is missing"),
    (dict(row(), median_us="50"), "median_us is not a number"),
    (dict(row(), variant=["wmma"]), "variant is missing or not a string"),
])
def test_malformed_rows_are_refused_by_load(tmp_path, bad, needle):
    (tmp_path / "p" / "bench").mkdir(parents=True)
    (tmp_path / "p" / "bench" / "summary.json").write_text(json.dumps({"rows": [row(), bad]}))
    with pytest.raises(cmp.CompareInputError, match=needle):
        cmp.load(tmp_path / "p")


def test_a_zero_median_is_not_a_measurement():
    diff = cmp.compare_rows([row(median=0.0), row("sdpa", "default", "", 0.0)],
                            [row(median=50.0), row("sdpa", "default", "", 50.0)])
    assert [e.mark for e in diff.rows] == [cmp.NA, cmp.NA] and diff.drift == 0.0


# ---- rule 2: a row's drift is at least its own shape's SDPA drift ------------------------------------------

FIXTURES = Path(__file__).parent / "fixtures" / "compare"


def _summary_rows(name: str) -> list[dict]:
    import lzma

    return json.loads(lzma.decompress((FIXTURES / name).read_bytes()))["rows"]


def test_rule_2_does_not_call_unchanged_kernels_slower_between_two_machine_sessions():
    """Two H200 sessions of the same kernels (fixtures/compare, README there): rule 1 called two unchanged WMMA rows
    of the small causal shape SLOWER (+1.1%, +1.3%) while SDPA's rows of that shape moved +1.9% and +2.1%."""
    a = _summary_rows("a-20261125T101009Z-968f02add3ab.summary.json.xz")
    b = _summary_rows("b-20261125T104353Z-22a8ad571f26.summary.json.xz")
    old = cmp.compare_rows(a, b, rule=1)
    assert sorted(e.variant for e in cmp.regressions(old)) == ["wmma", "wmma"]
    assert {e.shape for e in cmp.regressions(old)} == {"B=2,H=8,S=512,D=64,dtype=fp16,causal=1"}
    new = cmp.compare_rows(a, b)
    assert new.rule == cmp.RULE == 2 and cmp.regressions(new) == [] and cmp.exit_code(new) == 0
    assert new.counts[cmp.SAME] >= old.counts[cmp.SAME] and new.to_json()["rule"] == 2


@pytest.mark.parametrize("shift", [1.05, 1.10])
def test_rule_2_still_catches_a_slower_kernel_at_the_shape_that_moved_most(shift):
    """A real regression on top of the same two sessions: every row of one of our kernels made `shift` slower is
    called SLOWER on at least 18 of its 24 rows (the rest: cold rows whose spread, or shapes where SDPA moved, is
    larger than the shift), and no other row is blamed."""
    a = _summary_rows("a-20261125T101009Z-968f02add3ab.summary.json.xz")
    b = _summary_rows("b-20261125T104353Z-22a8ad571f26.summary.json.xz")
    victim = ("wmma", "m64n64w4s1")
    slowed = [dict(r, median_us=r["median_us"] * shift) if (r["variant"], r["config"]) == victim and r.get("median_us")
              else r for r in b]
    caught = {(e.variant, e.config, e.shape, e.mode) for e in cmp.regressions(cmp.compare_rows(a, slowed))}
    victim_rows = {(r["variant"], r["config"], r["shape"], r["mode"]) for r in b
                   if (r["variant"], r["config"]) == victim and r.get("median_us")}
    assert caught <= victim_rows  # nothing else is blamed
    assert len(victim_rows) == 24 and len(caught) >= 18, len(caught)


def test_rule_2_shape_drift_leaves_the_row_out_and_an_unknown_rule_is_refused():
    other = "B=2,H=8,S=512,D=64,dtype=fp16,causal=0"
    sdpa = [row(impl="sdpa", variant=v, config=None, median=10.0, iqr=0.01, shape=other)
            for v in ("flash", "math", "cudnn", "efficient", "default")]
    a = sdpa + [row(median=10.0, iqr=0.01, shape=other), row(median=50.0, iqr=0.05)]
    moved = {"flash": 10.5}  # one SDPA backend of that shape moved 5%, the others not at all
    b = [dict(r, median_us=moved.get(r["variant"], 10.0)) for r in sdpa] + \
        [dict(a[5], median_us=10.27), dict(a[6], median_us=50.3)]
    ours_other = ("evpack", "wmma", "m64n64w4s1", other, "cold")
    assert cmp.shape_drift(*(map(brow_of, (a, b))), ours_other) == pytest.approx(0.05)  # the largest shift there
    flash = ("sdpa", "flash", None, other, "cold")
    assert cmp.shape_drift(*(map(brow_of, (a, b))), flash) == 0.0  # flash's own 5% left out
    old = {(e.impl, e.variant, e.shape): e.mark for e in cmp.compare_rows(a, b, rule=1).rows}
    new = {(e.impl, e.variant, e.shape): e.mark for e in cmp.compare_rows(a, b).rows}
    # +2.7% at the shape where untouched code moved 5%: rule 1 (drift 0, the median) blames it, rule 2 does not
    assert old[("evpack", "wmma", other)] == cmp.SLOWER and new[("evpack", "wmma", other)] == cmp.SAME
    # +0.6% where no SDPA row was timed: the spread alone judges, by both rules
    assert old[("evpack", "wmma", SHAPE)] == new[("evpack", "wmma", SHAPE)] == cmp.SLOWER
    assert new[("sdpa", "flash", other)] == cmp.SLOWER  # judged by the others' shift, not its own
    with pytest.raises(ValueError, match="unknown compare rule 3"):
        cmp.compare_rows(a, b, rule=3)


def brow_of(rows):
    return [BenchRow.from_json(r) for r in rows]


@pytest.mark.parametrize("recorded, regressions", [(None, 2), (1, 2), (2, 0), (7, None)])
def test_the_bench_stage_judges_the_previous_pack_by_the_rule_its_run_json_records(tmp_path, recorded, regressions):
    """run.json without `compare_rule` (every pack made before rule 2) keeps rule 1, so older packs re-derive as
    they were made; a rule this code does not know is a problem, never a silent fallback."""
    from evpack.stages.bench_outcome import add_previous
    from evpack.timing import summary as sm

    a = _summary_rows("a-20261125T101009Z-968f02add3ab.summary.json.xz")
    b = _summary_rows("b-20261125T104353Z-22a8ad571f26.summary.json.xz")
    sm.write_summary(tmp_path, {"schema": 1, "rows": a}, sm.PREVIOUS_FILE)
    run_info = {"previous_pack_id": "20261125T101009Z-968f02add3ab"}
    if recorded is not None:
        run_info["compare_rule"] = recorded
    data: dict = {}
    problem = add_previous(tmp_path, b, run_info, data)
    if regressions is None:
        assert problem == "run.json names an unknown compare rule 7" and "regressions" not in data
    else:
        assert problem is None and len(data["regressions"]) == regressions
