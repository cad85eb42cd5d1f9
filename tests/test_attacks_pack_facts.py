"""pack.json's facts that another record of the pack also holds (evpack/crosscheck.py, evpack/coverage.py).

Each test is an attack on an unsigned copy of the default reference pack (tests/forger.py: the claims
re-derived, the index re-written, the signature dropped) that verified before the check it names: the forger
edits pack.json alone, and every other record still says what the run did.
"""
from __future__ import annotations

import json

import pytest
import reference
from conftest import copy_pack, run_cli
from forger import forge

from evpack.verify import verify_all

pytestmark = reference.needs("DEFAULT")
GPU_STAGES = ("correctness", "sanitize", "stability", "tensor_proof")


@pytest.fixture
def quick(tmp_path):
    pack = copy_pack(reference.DEFAULT, tmp_path)
    assert verify_all(pack)[0] == []
    return pack


def _edit_pack_json(pack, edit) -> None:
    raw = json.loads((pack / "pack.json").read_text())
    edit(raw)
    (pack / "pack.json").write_text(json.dumps(raw, indent=2) + "\n")


def _edit_json(path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2) + "\n")


def _without_variant(pack, variant: str) -> None:
    """Every cell of `variant` out of every GPU stage (the tensor proof's batch made one process per cell)."""
    tp = pack / "tensor_proof"
    for f in [*tp.glob("ncu-batch*"), tp / "batches.json"]:
        f.unlink(missing_ok=True)
    _edit_json(tp / "procs.json", lambda procs: [rec.pop("batch", None) for rec in procs.values()])
    for stage in GPU_STAGES:
        procs = json.loads((pack / stage / "procs.json").read_text())
        for cell in [c for c in procs if c == variant or c.startswith(f"{variant}.") or f".{variant}." in c]:
            del procs[cell]
            for f in (pack / stage).glob(f"{cell}.*"):
                f.unlink()
        (pack / stage / "procs.json").write_text(json.dumps(procs, indent=2) + "\n")


def _without_sanitize(raw) -> None:
    """pack.json as if the run had not selected the sanitize stage."""
    del raw["stages"]["sanitize"]
    for key in ("stages", "stages_s"):
        raw["timings"].get(key, {}).pop("sanitize", None)


def _problems(pack) -> list[str]:
    return verify_all(pack)[0]


@pytest.mark.parametrize("selection", [["x"], ["scalar", "wmma", "mma", "triton"]], ids=["none-shipped", "others"])
@pytest.mark.parametrize("also_run_json", [False, True], ids=["pack.json", "pack.json+run.json"])
def test_a_selection_cannot_excuse_a_timed_variant_from_the_gpu_stages(quick, selection, also_run_json):
    """Before: coverage asked for the cells of the shipped variants pack.json's options.variants selected, and
    nothing compared that option with anything. With wgmma's cells gone from every GPU stage and the selection
    edited to leave it out, the pack verified evidence:complete while its headline was a wgmma kernel. Now
    the selection must be the one the benchmark recorded, and a variant the benchmark timed must have its
    cells whatever the selection says (the forger who edits bench/run.json too gains nothing)."""
    _without_variant(quick, "wgmma")
    _edit_pack_json(quick, lambda raw: raw["options"].update(variants=selection))
    if also_run_json:
        _edit_json(quick / "bench" / "run.json", lambda run: run["options"].update(variants=selection))
    forge(quick, claims=True)
    problems = _problems(quick)
    timed = [p for p in problems if "no cell of variant wgmma" in p and "the benchmark timed" in p]
    assert {p.split(":")[0] for p in timed} == {f"stage {s}" for s in GPU_STAGES}, problems
    assert also_run_json or any(p.startswith("options.variants: pack.json says") for p in problems), problems


def test_a_stage_left_out_of_pack_json_is_named_by_its_folder(quick):
    """Before: verify derived the stages pack.json lists and no other. A pack whose racecheck found a race in
    one of our kernels (evidence:failed) dropped `sanitize` from pack.json: sanitizer_clean became `skipped`
    ("not selected"), the pack verified evidence:partial, and sanitize/outcome.json inside it still said fail."""
    _race_in_wgmma(quick)
    forge(quick, claims=True)
    assert json.loads((quick / "pack.json").read_text())["label"] == "evidence:failed"

    _edit_pack_json(quick, _without_sanitize)
    forge(quick, claims=True)
    pj = json.loads((quick / "pack.json").read_text())
    assert pj["gates"]["sanitizer_clean"]["status"] == "skipped"  # what the forger's pack.json claims
    assert "folder sanitize/ is not a stage pack.json lists (its files would go unread)" in _problems(quick)


def _gpu(raw):
    raw["summary"]["gpu_name"] = "NVIDIA B200"


def _commit(raw):
    raw["git"]["commit"] = "0123456789abcdef0123456789abcdef01234567"


def _dirty(raw):
    raw["git"]["dirty"] = True


def _suite(raw):
    raw["options"]["suite"] = "full"


@pytest.mark.parametrize(("edit", "needle"), [
    (_gpu, "summary.gpu_name: pack.json says 'NVIDIA B200' but bench/run.json device.name says"),
    (_commit, "git.commit: pack.json says '0123456789abcdef0123456789abcdef01234567' but the pack id"),
    (_dirty, "git.dirty: pack.json says True but the pack id"),
    (_suite, "options.suite: pack.json says 'full' but bench/run.json, the benchmark's own record says 'quick'"),
], ids=["gpu_name", "commit", "dirty", "suite"])
def test_a_fact_of_pack_json_agrees_with_the_records_that_also_hold_it(quick, edit, needle):
    """Before: the GPU name the report heads with, the commit and dirty flag, and the suite were pack.json's
    word alone: each could be edited (claims re-derived, re-indexed) and the pack verified."""
    _edit_pack_json(quick, edit)
    forge(quick, claims=True)
    problems = _problems(quick)
    assert any(needle in p for p in problems), problems


def test_env_json_gpu_and_commit_agree_with_the_benchmark_and_pack_json(quick):
    """env.json is the environment record the report and the incremental keys read: its GPU and commit are
    those the benchmark and pack.json give."""
    _edit_json(quick / "env.json", lambda env: env.update(gpu_name="NVIDIA B200", git_commit="0" * 40))
    forge(quick, claims=True)
    problems = " ".join(_problems(quick))
    assert "env.json gpu_name 'NVIDIA B200' is not the GPU the benchmark ran on" in problems
    assert "git (git_commit): pack.json says" in problems


def test_report_shows_the_derived_reasons_not_pack_json_prose(quick, tmp_path):
    """Before: `report` rendered the gate table (report.md, report.html, comment.md) and the stage table from
    pack.json's reasons, which verify never compares (prose): a verified pack's first table could say the
    performance gate passed at 9.99x SDPA while its benchmark gives 1.06x. The reasons shown are now those of
    the outcomes and gates derived from the raw files."""
    fake = "canonical wgmma/m192n128w16s2 9.99x SDPA default (cold)"
    _edit_pack_json(quick, lambda raw: (raw["gates"]["performance"].update(reason=fake),
                                        raw["stages"]["bench"].update(reason=fake)))
    forge(quick)
    assert _problems(quick) == []  # prose is not compared: the pack verifies
    r = run_cli("report", str(quick))
    assert r.returncode == 0, r.stderr
    assert "9.99x" not in r.stdout
    derived = json.loads((quick / "bench" / "outcome.json").read_text())["reason"]
    assert derived and derived != fake and r.stdout.count(derived) >= 1
    r = run_cli("report", str(quick), "--out", str(tmp_path / "views"))
    assert r.returncode == 0, r.stderr
    for name in ("report.md", "report.html", "comment.md"):
        assert "9.99x" not in (tmp_path / "views" / name).read_text(), name


V3_CANARIES = ("canary_capture_aware", "canary_output_alias", "canary_fp16_accum", "canary_input_family",
               "canary_content_cache", "canary_timing_aware", "canary_triton_decoy")


@pytest.mark.parametrize("also_drop_field", [False, True], ids=["as-is", "incremental-dropped"])
def test_a_pack_cannot_declare_an_older_schema_than_it_holds(quick, also_drop_field):
    """Before: the declared schema_version picked the rules, and nothing tied it to the pack. A pack whose
    correctness never ran canary_input_family (evidence:failed: that gate is not live) declared schema 2 and
    left the 7 schema-3 canaries out of canaries/expected.json: all 14 planted faults caught, evidence:complete.
    A field or a canary cell a later schema's writer introduced now names the lie (the forger who removes
    every one of them has made a consistent older pack; the signature is what stops that)."""
    procs = json.loads((quick / "correctness" / "procs.json").read_text())
    del procs["canary_input_family"]
    (quick / "correctness" / "procs.json").write_text(json.dumps(procs, indent=2) + "\n")
    for f in (quick / "correctness").glob("canary_input_family.*"):
        f.unlink()
    forge(quick, claims=True)
    assert json.loads((quick / "pack.json").read_text())["label"] == "evidence:failed"
    _edit_json(quick / "canaries" / "expected.json", lambda rows: rows.__setitem__(
        slice(None), [r for r in rows if r["canary"] not in V3_CANARIES]))
    _edit_pack_json(quick, lambda raw: (raw.update(schema_version=2),
                                        raw.pop("incremental") if also_drop_field else None))
    forge(quick, claims=True)
    assert json.loads((quick / "pack.json").read_text())["label"] == "evidence:complete"  # the forger's claim
    problems = " ".join(_problems(quick))
    assert "a canary schema-3 writers planted, but pack.json says schema_version 2" in problems, problems
    assert also_drop_field or "pack.json holds 'incremental', which schema-3 writers introduced" in problems


def test_the_benchmark_record_cannot_be_emptied_of_its_options(quick):
    """The step around the options check: bench/run.json's options removed, pack.json's suite edited."""
    _edit_json(quick / "bench" / "run.json", lambda run: run.pop("options"))
    _edit_pack_json(quick, _suite)
    forge(quick, claims=True)
    problems = _problems(quick)
    assert any(p.startswith("bench/run.json records no run options") for p in problems), problems


def _race_in_wgmma(pack) -> str:
    """A racecheck log of one of our wgmma cells that found a race (the canary's hazard records appended)."""
    s = pack / "sanitize"
    race = "".join(ln for ln in (s / "racecheck.canary_smem_race.m64n64w2s1.log").read_text().split("Traceback")[0]
                   .splitlines(True) if ln.startswith("=========") and "COMPUTE-SANITIZER" not in ln)
    cell = sorted(p.name for p in s.glob("racecheck.wgmma.*.log"))[0].removesuffix(".log")
    (s / f"{cell}.log").write_text((s / f"{cell}.log").read_text() + race)
    return cell


def _drop_cells(stage_dir, cells) -> None:
    procs = json.loads((stage_dir / "procs.json").read_text())
    for cell in cells:
        del procs[cell]
        for f in stage_dir.glob(f"{cell}.*"):
            f.unlink()
    (stage_dir / "procs.json").write_text(json.dumps(procs, indent=2) + "\n")


@pytest.mark.parametrize("which", ["the racing cell", "the headline config"])
def test_a_sanitizer_cell_of_a_shipped_config_cannot_be_left_out(quick, which):
    """Before: coverage asked one sanitize cell per variant, so one cell stood for every tool and config. The
    racecheck cell that found a race (evidence:failed) deleted with its log, or all four cells of the benchmark's
    headline config deleted, verified evidence:complete. Every (tool, variant, config) the build shipped is
    asked now."""
    s = quick / "sanitize"
    if which == "the racing cell":
        cells = [_race_in_wgmma(quick)]
        forge(quick, claims=True)
        assert json.loads((quick / "pack.json").read_text())["label"] == "evidence:failed"
    else:
        cells = sorted(p.name.removesuffix(".log") for p in s.glob("*.wgmma.m192n128w16s2.log"))
        assert len(cells) == 4
    _drop_cells(s, cells)
    forge(quick, claims=True)
    assert json.loads((quick / "pack.json").read_text())["label"] == "evidence:complete"  # the forger's claim
    problems = _problems(quick)
    assert {f"stage sanitize: no cell {c} (every sanitizer runs on every config the build shipped)"
            for c in cells} <= set(problems), problems


def test_the_benchmark_record_cannot_be_emptied_of_its_gpu(quick):
    """The step around the GPU check: bench/run.json's device.name removed, the GPU renamed elsewhere."""
    _edit_json(quick / "bench" / "run.json", lambda run: run["device"].pop("name"))
    _edit_pack_json(quick, _gpu)
    forge(quick, claims=True)
    assert any(p.startswith("bench/run.json names no GPU") for p in _problems(quick))


def test_pack_json_lists_only_stages_evpack_derives(quick):
    """Before: `report` drew a Stages row for every pack.json entry, derived or not: a second `bench ` row
    claiming 9.99x and a `memcheck_fuzz` stage that never ran showed in a verified pack's report."""
    entry = {"status": "pass", "reason": "9.99x SDPA default", "duration_s": 1.0}
    _edit_pack_json(quick, lambda raw: raw["stages"].update({"bench ": entry, "memcheck_fuzz": entry}))
    forge(quick, claims=True)
    problems = _problems(quick)
    for name in ("bench ", "memcheck_fuzz"):
        assert f"pack.json lists stage {name!r}, which is no stage evpack derives" in problems, problems


def test_a_stage_folder_renamed_and_dropped_from_pack_json_is_named(quick):
    """The step around the unlisted-stage check: the failing sanitize folder renamed Sanitize/ (its outcome.json
    removed) and dropped from pack.json. Every top-level folder must be a stage pack.json lists."""
    _race_in_wgmma(quick)

    _edit_pack_json(quick, _without_sanitize)
    (quick / "sanitize" / "outcome.json").unlink()
    (quick / "sanitize").rename(quick / "Sanitize")
    forge(quick, claims=True)
    assert "folder Sanitize/ is not a stage pack.json lists (its files would go unread)" in _problems(quick)
