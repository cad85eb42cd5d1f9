"""Claims of an unsigned pack against its own files: a forger edits a reference pack, re-writes every stored claim
as the edited files give it (tests/forger.py), re-indexes it and drops the signature. `verify` without signature
options must still see that a claim is not what the raw files say. Each test was an attack that verified before
the check it names (the signature check refuses them all: index.json is signed).
"""
from __future__ import annotations

import csv
import json
import lzma
import re
import shutil

import pytest
import reference
from conftest import copy_pack, run_cli
from forger import forge

from evpack import packfs
from evpack.jsonio import read_member_json
from evpack.model import ERROR
from evpack.packfs import write_stored
from evpack.timing import ab, ab_stage
from evpack.timing import summary as sm
from evpack.verify import verify_all

CANONICAL = "B=16,H=16,S=512,D=64,dtype=fp16,causal=0"


def _problems(pack) -> list[str]:
    problems, _ = verify_all(pack)
    return problems


def _bench_refuses(pack, needle: str) -> None:
    """The bench stage derives an error naming the edit: a pack that claims it passed does not verify, and one
    whose claims were re-derived says evidence:failed (the forger gains nothing either way)."""
    from evpack.stages import bench

    out = bench.derive(pack / "bench", pack)
    assert out.status == ERROR and needle in out.reason, (out.status, out.reason)
    problems = _problems(pack)
    label = json.loads((pack / "pack.json").read_text())["label"]
    assert problems or label == "evidence:failed", (problems, label)


def _summary(pack) -> dict:
    return json.loads(lzma.decompress((pack / "bench" / "summary.json.xz").read_bytes()))


def _write_summary(pack, data: dict) -> None:
    write_stored(pack / "bench" / "summary.json.xz", (json.dumps(data) + "\n").encode())


@pytest.fixture
def quick(tmp_path):
    pack = copy_pack(reference.DEFAULT, tmp_path)
    assert _problems(pack) == []
    return pack


@reference.needs("DEFAULT")
def test_the_forger_alone_leaves_a_verifying_pack(quick):
    """The control: re-deriving, re-indexing and unsigning an unedited pack verifies (unsigned), so each test
    below fails on its edit, not on the forgery's mechanics."""
    forge(quick, claims=True)
    assert _problems(quick) == []


@reference.needs("DEFAULT")
def test_speedups_against_other_backends_are_derived(quick):
    """Before: summary.json's canonical_speedup_vs (the report's '4.20x flash, 3.50x cudnn') was never compared."""
    data = _summary(quick)
    assert data["canonical_speedup_vs"]["cudnn"] < 2.0 and data["canonical_speedup_vs"]["flash"] < 3.0  # not the claim
    data["canonical_speedup_vs"] = dict(data["canonical_speedup_vs"], cudnn=3.5, flash=4.2)
    _write_summary(quick, data)
    forge(quick)
    _bench_refuses(quick, "canonical_speedup_vs")
    assert _problems(quick)


@reference.needs("DEFAULT")
def test_a_row_cannot_take_another_rows_samples_by_its_key(quick):
    """Before: swapping the keys of our canonical row and SDPA default's gave our kernel SDPA's samples (the
    samples are joined to rows by key), and the pack verified as 1.04x SDPA default (measured 0.96x)."""
    data = _summary(quick)
    at = [r for r in data["rows"] if r["shape"] == CANONICAL and r["mode"] == data["primary_mode"]]
    ours = next(r for r in at if r["impl"] == "evpack" and r["status"] == "ok")
    sdpa = next(r for r in at if r["impl"] == "sdpa" and r["variant"] == "default")
    ours["key"], sdpa["key"] = sdpa["key"], ours["key"]
    _write_summary(quick, data)
    forge(quick, claims=True)
    _bench_refuses(quick, "the key does not name the row's impl")


@reference.needs("DEFAULT")
def test_a_sample_line_counts_for_the_row_its_columns_name():
    """The samples file's own columns (impl .. mode) must be the ones its key names: a line re-keyed to another
    row is refused when read."""
    path = sm.samples_file(reference.DEFAULT / "bench")
    lines = packfs.read_stored(path, packfs.MAX_INFLATED_BYTES).decode().splitlines()
    first = lines[1]
    key = first.split('"')[1] if first.startswith('"') else first.split(",", 1)[0]
    other = "sdpa|default||" + key.split("|", 3)[3]
    forged = "\n".join([lines[0], first.replace(key, other, 1), *lines[2:5]]) + "\n"
    with pytest.raises(ValueError, match="key is not its impl"):
        list(sm._sample_fields(forged.splitlines()[1:], list(sm.SAMPLE_COLUMNS)))
    assert next(sm._sample_fields([first], list(sm.SAMPLE_COLUMNS)))[0] == key


@reference.needs("DEFAULT")
def test_the_headline_is_taken_at_the_suites_canonical_shape(quick):
    """Before: moving summary.json's canonical shape to where our kernel looks best (1.12x instead of 0.96x) and
    re-deriving the leaderboard verified."""
    data = _summary(quick)
    assert data["suite"] == "quick" and data["canonical"] == CANONICAL
    moved = sm.summary_from_rows({"suite": "quick", "canonical": "B=4,H=16,S=512,D=64,dtype=fp16,causal=1",
                                  "primary_mode": data["primary_mode"]}, data["rows"], schema=data["schema"])
    assert moved["canonical_speedup"] > data["canonical_speedup"]
    _write_summary(quick, moved)
    forge(quick, claims=True)
    _bench_refuses(quick, "canonical shape and primary mode")


@reference.needs("COMPAT")
def test_the_previous_packs_summary_cannot_be_deleted(tmp_path):
    """Before: with previous_summary.json deleted (and the outcome's comparison emptied) the comparison with the
    previous pack, and any regression it found, was gone; run.json still named that pack."""
    pack = copy_pack(reference.COMPAT, tmp_path)
    bench = pack / "bench"
    assert json.loads((bench / "run.json").read_text()).get("previous_pack_id")
    (bench / "previous_summary.json").unlink()
    forge(pack, claims=True)
    assert any("previous_summary.json" in p for p in _problems(pack))


@reference.needs("DEFAULT")
def test_the_content_digest_is_the_one_the_files_give(quick):
    """Before: a forged content_digest (and zero_delta 'same as pack X') verified; only the two stored digests
    were compared with each other."""
    pj = json.loads((quick / "pack.json").read_text())
    pj["zero_delta"] = {"previous_pack": "20261124T193258Z-1c68af8b650c", "previous_digest": "ab" * 32, "same": True}
    pj["content_digest"] = "ab" * 32
    (quick / "pack.json").write_text(json.dumps(pj, indent=2) + "\n")
    forge(quick)
    assert any(p.startswith("content_digest: pack.json says") for p in _problems(quick))


def test_the_digest_check_holds_the_packs_own_outcomes_not_todays_derivation(tmp_path, monkeypatch):
    """A field a newer derivation adds must not break an older pack: the digest verify checks is that of the
    pack's outcome.json files, so a stage that derives one more data field still verifies a schema-3 pack."""
    from evpack.stages import tensor_proof

    pack = copy_pack(reference.DEFAULT, tmp_path)
    derive = tensor_proof.derive

    def grown(stage_dir, pack_dir):
        out = derive(stage_dir, pack_dir)
        return type(out)(out.status, out.reason, {**out.data, "a_field_added_later": 1})

    monkeypatch.setattr(tensor_proof, "derive", grown)
    from evpack.derivation import derive_all
    from evpack.pack import stage_names_of
    from evpack.records.migrations import read_pack

    raw = json.loads((pack / "pack.json").read_text())
    today = derive_all(pack, stage_names_of(read_pack(raw)), parallel=True)
    assert today.stages["tensor_proof"].data["a_field_added_later"] == 1  # the stage did grow ...
    assert today.digest != raw["content_digest"]  # ... so today's digest is not the one the pack holds
    assert _problems(pack) == []


@reference.needs("FULL")
def test_an_ab_cannot_be_relabelled_an_error_while_its_base_was_timed(tmp_path):
    """Before: re-writing ab.json as status error (no rows, so no SLOWER verdict) verified, with the base's
    binary record and timed samples still in the pack."""
    pack = copy_pack(reference.FULL, tmp_path)
    bench = pack / "bench"
    written = read_member_json(bench, ab.AB_FILE)
    meta = dict({k: written[k] for k in ab_stage.META_KEYS}, status="error", reason="base extension did not load")
    relabelled = ab.build_ab(meta, [], {}, written["base_records"], {}, ab.RULES[written.get("rule_version", 1)])
    relabelled["confirm_records"] = written.get("confirm_records", [])
    for p in bench.glob("ab.json*"):
        p.unlink()
    ab_stage.write_ab(bench, relabelled)
    forge(pack, claims=True)
    _bench_refuses(pack, "timed rows of the base")


@reference.needs("DEFAULT")
@pytest.mark.parametrize("field,value", [("warnings", 5), ("warnings", [3]), ("zero_delta", [1]),
                                         ("signing", "yes")])
def test_pack_record_fields_the_reports_read_have_their_types(quick, field, value):
    """Before: these verified, and `report` then failed with an internal error (a list iterated, .get called on
    a string); `signing: "yes"` verified as a pack that claims a signature and has none."""
    pj = json.loads((quick / "pack.json").read_text())
    pj[field] = value
    (quick / "pack.json").write_text(json.dumps(pj, indent=2) + "\n")
    forge(quick)
    assert any(p.startswith(f"pack.json {field}:") for p in _problems(quick))
    proc = run_cli("report", str(quick))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "internal error" not in out and "Traceback" not in out, out[-800:]


@pytest.mark.parametrize("suite,run_info,problem", [
    ("quick", {"suite": "quick"}, ""),
    ("full", {"suite": "full"}, ""),
    ("my-suite", {"suite": "my-suite"}, ""),  # a user's suite in an older pack: nothing recorded to hold it to
    ("quick", {"suite": "quick", "canonical": CANONICAL, "primary_mode": "cold"}, ""),
    ("quick", {"suite": "full"}, "is not run.json's 'full'"),
    ("quick", {"suite": "quick", "canonical": CANONICAL, "primary_mode": "warm"}, "are not run.json's"),
    ("my-suite", {"suite": "my-suite", "canonical": "B=1,H=1,S=64,D=64,dtype=fp16,causal=0", "primary_mode": "cold"},
     "are not run.json's"),
])
def test_the_summarys_headline_fields_are_the_runs(suite, run_info, problem):
    from evpack.stages.bench_outcome import meta_problem

    found = meta_problem({"suite": suite, "canonical": CANONICAL, "primary_mode": "cold"}, run_info)
    assert (problem in found) if problem else found == "", found


def test_run_json_records_the_suites_headline_fields(tmp_path):
    """Packs written from now on hold the canonical shape and primary mode in run.json (what meta_problem checks)."""
    from evpack.stages import bench
    from evpack.stages.base import StageContext
    from evpack.timing.suites import load_suite

    suite = load_suite("quick", reference.REPO)
    ctx = StageContext(pack_dir=tmp_path, dir=tmp_path, repo=reference.REPO, options={"suite": "quick"})
    bench._write_run_json(ctx, suite, 1.0)
    run = json.loads((tmp_path / "run.json").read_text())
    assert (run["suite"], run["canonical"], run["primary_mode"]) == ("quick", CANONICAL, "cold")


@reference.needs("DEFAULT")
def test_report_shows_what_the_files_give_not_what_outcome_json_leaves_out(quick, tmp_path):
    """Before: a stored outcome could leave a field out (verify compares the fields both sides hold: a field of one
    side only is schema growth) and `report` rendered the stored outcome, so a forger hid the correctness table's
    rows. `report` now renders the outcomes verify derived: the forged pack's report is the original's."""
    def report_of(pack) -> list[str]:
        proc = run_cli("report", str(pack))
        assert proc.returncode == 0, proc.stderr
        return [ln for ln in proc.stdout.splitlines() if "signed" not in ln and "provenance" not in ln.lower()]

    before = report_of(quick)
    stored = json.loads((quick / "correctness" / "outcome.json").read_text())
    assert stored["data"]["variants"]
    del stored["data"]["variants"]
    (quick / "correctness" / "outcome.json").write_text(json.dumps(stored, indent=2) + "\n")
    pj = json.loads((quick / "pack.json").read_text())  # the forger's digest of the edited outcomes
    from evpack.derivation import content_digest
    from evpack.model import StageOutcome

    outcomes = {s: StageOutcome.from_json(json.loads((quick / s / "outcome.json").read_text())) for s in pj["stages"]}
    gates = {g: StageOutcome(v["status"], "") for g, v in pj["gates"].items()}
    pj["content_digest"] = content_digest(outcomes, gates, pj["label"])
    (quick / "pack.json").write_text(json.dumps(pj, indent=2) + "\n")
    forge(quick)
    assert _problems(quick) == []  # a field left out is not a mismatch (older packs lack newer fields) ...
    assert report_of(quick) == before  # ... and it cannot hide anything from the report
    from evpack.reporting.common import load_view
    from evpack.reporting.report_md import render_md

    derived: dict = {}
    verify_all(quick, derived_out=derived)
    assert render_md(quick) != render_md(quick, load_view(quick, derived))  # the stored outcome would have hidden it


GPU_STAGES = ("correctness", "sanitize", "stability", "tensor_proof")


def _unbatch(stage_dir) -> None:
    """The forger's first step on a pack whose tensor proof ran as one ncu batch: the batch's output and record
    deleted and every cell made to look like its own process's (each cell's log is a whole ncu output), so that
    derive does not split a batch output the edits below would no longer match. What the tests then edit is
    judged as in a pack of one process per cell."""
    for f in [*stage_dir.glob("ncu-batch*"), stage_dir / "batches.json"]:
        f.unlink(missing_ok=True)
    procs = json.loads((stage_dir / "procs.json").read_text())
    for rec in procs.values():
        rec.pop("batch", None)
    (stage_dir / "procs.json").write_text(json.dumps(procs, indent=2) + "\n")


def _drop_variant(stage_dir, variant: str) -> None:
    """Every cell of `variant` out of a stage: its procs.json entry and its files."""
    procs = json.loads((stage_dir / "procs.json").read_text())
    cells = [c for c in procs if c == variant or c.startswith(f"{variant}.") or f".{variant}." in c]
    assert cells
    for c in cells:
        del procs[c]
        for f in stage_dir.glob(f"{c}.*"):
            f.unlink()
    (stage_dir / "procs.json").write_text(json.dumps(procs, indent=2) + "\n")


@reference.needs("DEFAULT")
@pytest.mark.parametrize("stages", [(s,) for s in GPU_STAGES] + [GPU_STAGES], ids=[*GPU_STAGES, "all"])
def test_a_shipped_variant_cannot_be_left_out_of_a_gpu_stage(quick, stages):
    """Before: with every wgmma cell removed from a GPU stage (or all four) and the claims re-derived, the pack
    verified as evidence:complete, and wgmma, which the build shipped, appeared in no GPU table."""
    pj = json.loads((quick / "pack.json").read_text())
    assert pj["options"]["variants"] is None and not pj["incremental"]["carried"]
    _unbatch(quick / "tensor_proof")
    for s in stages:
        _drop_variant(quick / s, "wgmma")
    forge(quick, claims=True)
    problems = _problems(quick)
    assert sorted(p for p in problems if "no cell of variant wgmma" in p) == [
        f"stage {s}: no cell of variant wgmma, which the build shipped and the run selected or "
        f"the benchmark timed" for s in sorted(stages)]


@reference.needs("INCREMENTAL")
def test_carried_cells_count_as_cells(tmp_path):
    """A variant whose cells an incremental run carried from an earlier pack is covered by them."""
    from evpack.coverage import coverage_problems
    from evpack.model import StageOutcome

    pack = reference.INCREMENTAL
    pj = json.loads((pack / "pack.json").read_text())
    assert pj["incremental"]["carried"]
    outcomes = {s: StageOutcome.from_json(json.loads((pack / s / "outcome.json").read_text())) for s in GPU_STAGES}
    assert coverage_problems(pack, pj["options"], outcomes) == []


# ---- raw tool logs that say two things: the worst of them decides ----------------------------------------

SANITIZED_CELL = "wgmma.m128n128w12s2"


def _sanitizer_lines(log) -> str:
    """The `=========` lines of a canary's sanitizer log (its records, their stacks and its summaries), no banner."""
    text = log.read_text().split("Traceback")[0]
    return "".join(ln for ln in text.splitlines(True) if ln.startswith("=========") and "COMPUTE-SANITIZER" not in ln)


def _records_above_a_zero_summary(sanitize) -> None:
    """The memcheck canary's `Invalid __global__ write` record and its stack, under the cell's own
    `LEAK SUMMARY: 0 bytes ...` / `ERROR SUMMARY: 0 errors`."""
    log = sanitize / f"memcheck.{SANITIZED_CELL}.log"
    head, *rest = log.read_text().splitlines(True)
    records = "".join(ln for ln in _sanitizer_lines(sanitize / "memcheck.canary_oob_write.m64n64w2s1.log")
                      .splitlines(True) if "SUMMARY" not in ln)
    assert "Invalid __global__ write" in records and "ERROR SUMMARY: 0 errors" in "".join(rest)
    log.write_text(head + records + "".join(rest))


def _a_second_racecheck_summary(sanitize) -> None:
    """The racecheck canary's race records and its `RACECHECK SUMMARY: N hazards ...` after the cell's 0-hazard one."""
    log = sanitize / f"racecheck.{SANITIZED_CELL}.log"
    assert "RACECHECK SUMMARY: 0 hazards" in log.read_text()
    log.write_text(log.read_text() + _sanitizer_lines(sanitize / "racecheck.canary_smem_race.m64n64w2s1.log"))


@reference.needs("DEFAULT")
@pytest.mark.parametrize("tool,edit,reason", [
    ("memcheck", _records_above_a_zero_summary,
     "0 errors: Invalid __global__ write; the log holds problem records (Invalid __global__ write) under a summary of 0"),
    ("racecheck", _a_second_racecheck_summary, "{n} errors, {n} hazards: Race reported; 2 RACECHECK SUMMARY lines "
     "disagree (0 hazards (0 errors, 0 warnings); {n} hazards ({n} errors, 0 warnings)): the worst is counted"),
], ids=["memcheck_records_under_a_zero_summary", "racecheck_two_summaries"])
def test_a_sanitizer_log_that_reports_errors_is_not_clean(quick, tool, edit, reason):
    """Before: `clean` read the summaries only (never the records), and the first RACECHECK / LEAK SUMMARY
    line, so a cell's log could carry a canary's error records, or a second summary with 4 hazards, and pass."""
    from evpack.stages import sanitize

    # the canary's hazard count, as its own log in the pack says it (4 or 6, with the sanitizers' shapes of the day)
    canary = (quick / "sanitize" / "racecheck.canary_smem_race.m64n64w2s1.log").read_text()
    hazards = re.findall(r"RACECHECK SUMMARY: (\d+) hazards displayed \((\d+) errors", canary)
    assert len(hazards) == 1 and hazards[0][0] == hazards[0][1] != "0", hazards
    reason = reason.format(n=hazards[0][0])
    edit(quick / "sanitize")
    forge(quick, claims=True)
    cell = next(c for c in sanitize.derive(quick / "sanitize", quick).data["cells"]
                if (c["tool"], f"{c['variant']}.{c['config']}") == (tool, SANITIZED_CELL))
    assert (cell["status"], cell["reason"]) == ("fail", reason), cell
    labels = json.loads((quick / "pack.json").read_text())["labels"]
    assert _problems(quick) or "sanitizer-clean" not in labels, labels


# the PTXAS log of wgmma fp16 D64; packs of cf8515a on prefix it with the extension's build folder ("_C_")
PTXAS_LOG = "*build_generated__C_wgmma_fp16_d64.o.log"
WGMMA_SYMBOL = "_ZN6evpack5wgmma10fwd_kernelINS0_17cfg_m128n128w12s2E6__halfLi64EEEvNS_9FwdParamsENS0_7TmaMapsE"
NO_SPILL = "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
SERIALISED = ("ptxas info    : (C7518) Potential Performance Loss: wgmma.mma_async instructions are serialized due "
              f"to program dependence on compiler-inserted WG.DP in divergent path in the function '{WGMMA_SYMBOL}'\n")


def _a_second_properties_block(text: str) -> str:
    """The kernel spills; a second `Function properties` block for it says it does not (the log may hold other
    kernels' blocks: wgmma's other configs)."""
    block = f"ptxas info    : Function properties for {WGMMA_SYMBOL}\n"
    assert text.count(block + NO_SPILL) == 1
    spilled = block + "    512 bytes stack frame, 256 bytes spill stores, 256 bytes spill loads\n"
    return text.replace(block + NO_SPILL, spilled + block + NO_SPILL)


def _an_advisory_after_the_last_entry(text: str) -> str:
    return text + SERIALISED


@reference.needs("DEFAULT")
@pytest.mark.parametrize("edit,status,reason", [
    (_a_second_properties_block, ERROR, f"two 'Function properties' blocks for {WGMMA_SYMBOL} on sm_90a"),
    (_an_advisory_after_the_last_entry, "fail", "ptxas C7518 wgmma serialised (printed after the log's last entry"),
], ids=["repeated_properties_block", "advisory_after_the_last_entry"])
def test_a_ptxas_log_that_reports_a_spill_or_a_serialised_wgmma_does_not_pass(quick, edit, status, reason):
    """Before: a repeated properties block overwrote the first (the last one won), and an advisory printed after
    the log's last entry had no arch block, so advisories_for gave it to no kernel: resources-clean either way."""
    from evpack.stages import ptxas

    log = next((quick / "build" / "ptxas").glob(PTXAS_LOG))
    assert WGMMA_SYMBOL in log.read_text()
    log.write_text(edit(log.read_text()))
    forge(quick, claims=True)
    out = ptxas.derive(quick / "ptxas", quick)
    assert out.status == status and reason in out.reason, (out.status, out.reason)
    labels = json.loads((quick / "pack.json").read_text())["labels"]
    assert _problems(quick) or "resources-clean" not in labels, labels


@reference.needs("DEFAULT")
def test_a_canary_is_caught_by_the_gate_its_schema_names(quick):
    """Before: the gate each canary must be caught by was read from the pack's canaries/expected.json (the schema
    named only the canaries). Here memcheck did not catch canary_oob_write (a clean log, exit 0), and expected.json
    says racecheck must catch it, beside a racecheck cell of it copied from the smem_race canary's: gates_live
    passed and the pack was sanitizer-clean. The gate now comes from the schema (records/schema.py canary_gates)."""
    s = quick / "sanitize"
    clean = (s / "memcheck.scalar.m64n64w2s1.log").read_text().replace("scalar/", "canary_oob_write/")
    (s / "memcheck.canary_oob_write.m64n64w2s1.log").write_text(clean)
    procs = json.loads((s / "procs.json").read_text())
    procs["memcheck.canary_oob_write.m64n64w2s1"]["returncode"] = 0
    exp_path = quick / "canaries" / "expected.json"
    expected = json.loads(exp_path.read_text())
    for e in expected:
        if e["canary"] == "canary_oob_write":
            e["caught_by"] = "racecheck"
    exp_path.write_text(json.dumps(expected, indent=2) + "\n")
    shutil.copy(s / "racecheck.canary_smem_race.m64n64w2s1.log", s / "racecheck.canary_oob_write.m64n64w2s1.log")
    procs["racecheck.canary_oob_write.m64n64w2s1"] = dict(procs["racecheck.canary_smem_race.m64n64w2s1"])
    (s / "procs.json").write_text(json.dumps(procs, indent=2) + "\n")
    forge(quick, claims=True)
    from evpack.stages import canaries

    out = canaries.derive(quick / "canaries", quick)
    assert out.status == ERROR and "canary_oob_write must be caught by memcheck, expected.json says racecheck" \
        in out.reason, out.reason
    pj = json.loads((quick / "pack.json").read_text())
    assert _problems(quick) or (pj["gates"]["gates_live"]["status"] != "pass" and pj["label"] == "evidence:failed")


_TENSOR_COUNTERS = ("sm__ops_path_tensor", "sm__inst_executed_pipe_tensor_op_gmma",
                    "sm__inst_executed_pipe_tensor_op_hmma.sum")


def _scale_tensor_counters(log, factor: float) -> None:
    """The ncu log of wgmma's kernels doing `factor` of their matrix work on the tensor pipe."""
    out = []
    for ln in log.read_text().splitlines(True):
        if ln.startswith('"') and "wgmma" in ln and any(c in ln for c in _TENSOR_COUNTERS):
            row = next(csv.reader([ln]))
            row[-1] = str(int(float(row[-1].replace(",", "")) * factor))
            ln = ",".join(f'"{x}"' for x in row) + "\n"
        out.append(ln)
    log.write_text("".join(out))


def _smaller_required(calls: list[dict]) -> None:
    for c in calls:
        c["required_flops"] //= 10
        c["tile_padded_flops"] //= 10


def _scalar_kind(calls: list[dict]) -> None:
    for c in calls:
        c["kind"] = "scalar"


def _config_past_the_split_suffix(calls: list[dict]) -> None:
    """A config name with more after the tile than the one suffix the registry makes ("t", a tail_split config)."""
    for c in calls:
        c["config"] += "tx"


@reference.needs("DEFAULT")
@pytest.mark.parametrize(("factor", "edit", "needle"), [
    (0.1, _smaller_required, "the manifest says required_flops"),
    (0.0, _scalar_kind, "the manifest says kind 'scalar', the registry 'tensor'"),
    (1.0, _config_past_the_split_suffix, "the manifest does not give the call's config")],
    ids=["required_flops", "kind", "config_suffix"])
def test_a_tensor_call_is_judged_by_the_registry_and_its_shape_not_its_manifest(quick, factor, edit, needle):
    """Before: tensor_proof took each call's kind and required FLOPs from the target's manifest. With wgmma's tensor
    counters scaled to 10% (0%) of the work, dividing the manifest's required_flops by 10 (calling its calls
    scalar) left executed_tensor_work passing and the pack tensor-cores-verified. The kind is now the registry's,
    the FLOPs those the call's shape gives (parsers/ncu.py), and a manifest that disagrees is an error naming it."""
    t = quick / "tensor_proof"
    _unbatch(t)
    _scale_tensor_counters(t / "wgmma.log", factor)
    mf = t / "wgmma.manifest.json"
    manifest = json.loads(mf.read_text())
    edit(manifest["calls"])
    mf.write_text(json.dumps(manifest, indent=2) + "\n")
    forge(quick, claims=True)
    from evpack.stages import tensor_proof

    out = tensor_proof.derive(t, quick)
    assert out.status == ERROR and "wgmma: call wgmma/" in out.reason and needle in out.reason, out.reason
    labels = json.loads((quick / "pack.json").read_text())["labels"]
    assert _problems(quick) or "tensor-cores-verified" not in labels, labels


def _non_causal_called_causal(calls: list[dict]) -> None:
    """What a lying tensor target writes when it proves the causal path with a non-causal launch: each
    non-causal call says causal, with the FLOPs (required and tile-padded) a causal call of its shape must do."""
    from evpack.parsers.ncu import required_flops, tile_padded_flops

    for c in calls:
        if not c["causal"]:
            m, n = (int(x) for x in re.fullmatch(r"m(\d+)n(\d+)w\d+s\d+t?", c["config"]).groups())
            c["causal"] = True
            c["required_flops"] = required_flops(c["B"], c["H"], c["S"], c["D"], True)
            c["tile_padded_flops"] = tile_padded_flops(c["B"], c["H"], c["S"], c["D"], True, m, n)


@reference.needs("DEFAULT")
@pytest.mark.parametrize("variant", ["wgmma", "mma"])
def test_a_call_that_ran_more_work_than_its_claimed_causality_allows_fails(quick, variant):
    """Before: the executed tensor FLOPs had only a floor (>= 95% of the call's matrix FLOPs). A target that labels
    its non-causal launches causal (a causal path that is never profiled, or a scalar one) passed with a coverage
    of 200%: the counters cannot see the causal flag. The launch's tensor FLOPs may now be at most 1.10x the
    tile-padded FLOPs of the shape and causality the call names; a whole square read as a causal call is >= 1.6x.
    (A launch that does only part of its work on tensor cores and says causal is not caught by this bound.)"""
    t = quick / "tensor_proof"
    _unbatch(t)
    mf = t / f"{variant}.manifest.json"
    manifest = json.loads(mf.read_text())
    _non_causal_called_causal(manifest["calls"])
    mf.write_text(json.dumps(manifest, indent=2) + "\n")
    forge(quick, claims=True)
    from evpack.stages import tensor_proof

    out = tensor_proof.derive(t, quick)
    assert out.status == "fail" and f"{variant}/" in out.reason and "the launch did other work than the call " \
        "says" in out.reason, out.reason
    over = [r for r in out.data["calls"] if r["variant"] == variant and not r["passed"]]
    assert over and all(r["coverage"] >= 1.9 for r in over), over  # the floor alone would pass every one
    labels = json.loads((quick / "pack.json").read_text())["labels"]
    assert _problems(quick) or "tensor-cores-verified" not in labels, labels


def _derived(pack, stage: str) -> tuple[dict, list[str]]:
    """The stage's outcome and the labels, as the forged pack stores them (its claims re-derived from its files)."""
    return (json.loads((pack / stage / "outcome.json").read_text()),
            json.loads((pack / "pack.json").read_text())["labels"])


def _rewrite_rows(path, edit) -> None:
    """An oracle result edited: plain JSON, or the xz-stored form (packfs.write_stored)."""
    if path.name.endswith(".xz"):
        data = json.loads(lzma.decompress(path.read_bytes()))
        edit(data["rows"])
        write_stored(path, (json.dumps(data) + "\n").encode())
    else:
        data = json.loads(path.read_text())
        edit(data["rows"])
        path.write_text(json.dumps(data, indent=2) + "\n")


@reference.needs("DEFAULT")
@pytest.mark.parametrize("err", ["over_bound", "nan"])
def test_a_correctness_row_over_its_bound_is_not_within_it_whatever_its_passed_flag_says(quick, err):
    """Before: correctness counted a case by its stored `passed` flag, so a row whose max_err was 50x its bound (or
    NaN) but said passed: true was 'within the bound' and the pack correctness-verified. The verdict is now
    re-computed as the oracle computes it, and a flag that contradicts the row's numbers is an error naming it."""
    def edit(rows):
        row = rows[5]
        assert row["passed"] is True
        row["max_err"] = row["bound"] * 50 + 1.0 if err == "over_bound" else float("nan")
        row["margin"] = row["bound"] - row["max_err"]  # passed left true

    _rewrite_rows(quick / "correctness" / "wgmma.json.xz", edit)
    forge(quick, claims=True)
    assert _problems(quick) == []  # the claims are what the files give ...
    outcome, labels = _derived(quick, "correctness")
    assert outcome["status"] == ERROR and "wgmma: row 5 (" in outcome["reason"], outcome["reason"]
    assert "records passed=True but its numbers give False" in outcome["reason"]
    assert "correctness-verified" not in labels and "evidence:failed" in labels, labels  # ... and they say so


@reference.needs("DEFAULT")
def test_a_correctness_canary_within_the_bound_is_not_caught_by_a_passed_false_flag(quick):
    """Before: canary_wrong_result counted as caught when its rows said passed: false, even with every error within
    the bound (the planted fault not seen). A canary is caught only when its numbers show the failure."""
    def edit(rows):
        for row in rows:
            assert row["passed"] is False and row["nonfinite"] == 0 and row["inputs_changed"] == 0
            row["max_err"] = row["bound"] / 4
            row["margin"] = row["bound"] - row["max_err"]

    _rewrite_rows(quick / "correctness" / "canary_wrong_result.json", edit)
    forge(quick, claims=True)
    assert _problems(quick) == []
    outcome, labels = _derived(quick, "correctness")
    (entry,) = [c for c in outcome["data"]["canaries"] if c["name"] == "canary_wrong_result"]
    assert not entry["caught"] and entry["observed"] == ERROR, entry
    assert outcome["status"] == ERROR and "canary_wrong_result: row 0 (" in outcome["reason"], outcome["reason"]
    assert "evidence:complete" not in labels and "evidence:failed" in labels, labels


def _unstable(row):
    row["eager"].update(mismatched_launches=37, mismatched_elements=4096, inputs_changed=5)
    row["eager"]["refill"]["bad_rounds"] = 2
    row["graph"].update(mismatched_replays=12, mismatched_elements=512)


def _crashed(row):
    row["error"] = "CUDA error: an illegal memory access was encountered"  # first_error left null


@reference.needs("DEFAULT")
@pytest.mark.parametrize("edit", [_unstable, _crashed], ids=["mismatched_launches", "cuda_error"])
def test_an_unstable_or_crashed_stability_row_is_not_stable_whatever_its_passed_flag_says(quick, edit):
    """Before: stability counted a row by its stored `passed` flag, so one recording 37 eager launches and 12 graph
    replays that differed bitwise (or a CUDA error) but saying passed: true was stable. The verdict is now
    re-computed from the row's fields as the oracle computes it; a contradicting flag is an error naming the row."""
    def rows_edit(rows):
        assert rows[0]["passed"] is True
        edit(rows[0])  # passed left true

    _rewrite_rows(quick / "stability" / "wgmma.json", rows_edit)
    forge(quick, claims=True)
    assert _problems(quick) == []
    outcome, labels = _derived(quick, "stability")
    assert outcome["status"] == ERROR and "wgmma: row 0 (" in outcome["reason"], outcome["reason"]
    assert "records passed=True but its fields give False" in outcome["reason"]
    assert "correctness-verified" not in labels and "evidence:failed" in labels, labels


@reference.needs("FULL", "SIGNERS")
def test_the_compare_rule_a_pack_records_cannot_be_swapped(tmp_path, needs_ssh_keygen):
    """The attack, with only a copy of a signed pack: its bench compared with a previous pack by one rule (run.json's
    `compare_rule`; none: rule 1); the forger writes the other rule to have that comparison judged by it.
    Re-indexed, the pack no longer carries its signature. A rule this code does not know is no way around it: the
    bench stage derives an error naming it."""
    from forger import rehash

    pack = copy_pack(reference.FULL, tmp_path)
    run_path = pack / "bench" / "run.json"
    run = json.loads(run_path.read_text())
    assert run.get("previous_pack_id") and run.get("compare_rule", 1) in (1, 2)
    assert verify_all(pack, allowed_signers=reference.SIGNERS, require_signature=True)[0] == []  # the control
    other = 2 if run.get("compare_rule", 1) == 1 else 1
    run_path.write_text(json.dumps({**run, "compare_rule": other}, indent=2) + "\n")
    rehash(pack)
    problems, _ = verify_all(pack, allowed_signers=reference.SIGNERS, require_signature=True)
    assert any("provenance" in p or "signature" in p for p in problems), problems
    run_path.write_text(json.dumps({**run, "compare_rule": 99}, indent=2) + "\n")
    forge(pack, claims=True)
    _bench_refuses(pack, "unknown compare rule 99")


def _cut_blocks(log: str, marker: str) -> str:
    """A PTXAS log without the entries (from `Compiling entry function` to its `Compile time`) of kernels whose
    symbol holds `marker`."""
    out, cutting = [], False
    for line in log.splitlines(keepends=True):
        if line.startswith("ptxas info    : Compiling entry function"):
            cutting = marker in line
        if not cutting:
            out.append(line)
        elif line.startswith("ptxas info    : Compile time"):
            cutting = False
    return "".join(out)


@reference.needs("DEFAULT")
def test_a_config_cut_from_the_build_record_its_ptxas_logs_and_its_oracle_rows_is_still_seen(quick):
    """The attack, with only a copy of a pack: one wgmma config is cut out of build/kernels.json, out of the raw
    PTXAS logs and out of the correctness rows (say its cases failed), and the claims are re-derived. Before the SASS
    stage held the dump to kernels.json both ways this verified as evidence:complete: the shortcut rule asks for
    the configs of the pack's own build (so a config added to the registry later asks nothing of an older pack),
    and nothing else tied kernels.json to the binary. The binary's SASS dump still holds the config's kernels."""
    built = json.loads((quick / "build" / "kernels.json").read_text())
    configs = sorted({r["config"] for r in built if r["variant"] == "wgmma"})
    assert len(configs) >= 2, "the attack needs a variant the pack built in two configs"
    cut = configs[-1]
    (quick / "build" / "kernels.json").write_text(
        json.dumps([r for r in built if not (r["variant"] == "wgmma" and r["config"] == cut)], indent=2) + "\n")
    marker = f"cfg_{cut}E"
    logs = [p for p in (quick / "build" / "ptxas").glob("*wgmma*.log") if marker in p.read_text()]
    assert logs
    for log in logs:
        log.write_text(_cut_blocks(log.read_text(), marker))
        assert marker not in log.read_text()
    def drop(rows: list) -> None:
        rows[:] = [r for r in rows if r["config"] != cut]
    _rewrite_rows(packfs.member(quick / "correctness", "wgmma.json"), drop)
    forge(quick, claims=True)
    sass, labels = _derived(quick, "sass")
    assert sass["status"] == ERROR, sass["reason"]
    assert f"wgmma/{cut}/" in sass["reason"] and "SASS but not in build/kernels.json" in sass["reason"]
    assert "evidence:complete" not in labels, labels
    # the other stages alone would have passed it: PTXAS and correctness as the forger left them
    assert _derived(quick, "ptxas")[0]["status"] == "pass" and _derived(quick, "correctness")[0]["status"] == "pass"


@reference.needs("DEFAULT")
def test_an_edited_sass_dump_is_parsed_again_in_the_same_process(quick):
    """verify keeps its parse of a SASS dump for the next reader in the process (parsers/sass). The attack, with only a
    copy of a pack: after the pack verified (the `quick` fixture, in this process), one HGMMA of its dump is edited to
    accumulate in F16 (the same length, so the same text size) and the index re-hashed, the claims left as they were.
    verify in the same process must parse the edited text, not hand back the parse it kept: the sass stage's files
    now give a failure that pack.json does not claim."""
    dump = quick / "sass" / "evpack._C.sass.xz"
    text = lzma.decompress(dump.read_bytes()).decode()
    m = re.search(r"HGMMA\.\d+x\d+x\d+\.F32", text)
    assert m, "the attack needs an HGMMA with F32 accumulation in the dump"
    edited = text[:m.end() - 3] + "F16" + text[m.end():]
    assert len(edited) == len(text) and edited != text
    write_stored(dump, edited.encode())
    forge(quick)  # re-indexed, unsigned; the claims as the pack had them
    problems = _problems(quick)
    assert "stage sass: pack.json says pass but its files give fail" in problems, problems
    assert any(p.startswith("gate sass_tensor_proof: pack.json says pass") for p in problems), problems
