"""The cheat checks and their canaries, on files of a real H200 evidence run (tests/fixtures/cheats,
see tests/fixtures/README.md) and on small rows built here to hit each rule's edge."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evpack import registry
from evpack.model import REQUIRED_CANARIES, SCHEMA_VERSION
from evpack.parsers.ncu import MARKER_KERNEL, parse_ncu_csv, split_at_markers
from evpack.records.schema import CANARY_GATES
from evpack.stages import bench as bench_stage
from evpack.stages import bench_canaries, correctness, stability, tensor_proof
from evpack.stages import canaries as canaries_stage
from evpack.stages.base import ERROR, FAIL, PASS, SKIPPED, read_json, write_json
from evpack.timing import content_probe, integrity

FIX = Path(__file__).parent / "fixtures" / "cheats"
REPO = Path(__file__).resolve().parents[1]
RATES = {"bandwidth": 4.0e12, "matmul_fp16": 7.5e14, "matmul_bf16": 7.5e14}


def _stage_copy(tmp_path: Path, stage: str, keep: tuple[str, ...], schema: int | None = 2) -> Path:
    """The fixture stage folder with procs.json narrowed to the cells `keep` (the rest were not captured), in a
    pack of `schema` (the fixtures come from a schema-2 pack; None: a pack still being made, the current one)."""
    d = tmp_path / stage
    shutil.copytree(FIX / stage, d)
    procs = read_json(d / "procs.json")
    write_json(d / "procs.json", {k: v for k, v in procs.items() if k in keep})
    if schema is not None:
        write_json(tmp_path / "pack.json", {"schema_version": schema})
    return d


# -- the canary matrix ----------------------------------------------------------------------------------

def test_every_cheat_class_has_a_canary_and_its_gate_has_a_source_stage():
    by_gate: dict[str, list[str]] = {}
    for c in registry.CANARIES:
        by_gate.setdefault(c.expect_caught_by, []).append(c.name)
        assert canaries_stage.source_stage(c.expect_caught_by), c.name
    assert len(registry.CANARIES) >= 13
    for name, gate in (("canary_memo", "stability"), ("canary_wrong_stream", "stability"),
                       ("canary_partial_write", "correctness"), ("canary_input_mutation", "correctness"),
                       ("canary_side_stream", "bench"), ("canary_foreign_work", "tensor_proof"),
                       ("canary_capture_aware", "stability"), ("canary_output_alias", "stability"),
                       ("canary_fp16_accum", "sass"), ("canary_input_family", "correctness"),
                       ("canary_content_cache", "bench"), ("canary_timing_aware", "bench")):
        assert name in by_gate[gate]
    # each stage runs exactly the canaries that target it
    assert set(correctness.CANARIES) == set(by_gate["correctness"])
    assert set(stability.CANARIES) == set(by_gate["stability"])
    assert set(tensor_proof.CANARIES) == set(by_gate["tensor_proof"])
    assert canaries_stage.source_stage("sass") == "sass" and by_gate["sass"] == ["canary_fp16_accum"]
    # packs made now must plant every canary; older schemas keep their own lists
    required = REQUIRED_CANARIES[SCHEMA_VERSION]
    assert {"canary_capture_aware", "canary_output_alias", "canary_fp16_accum", "canary_input_family"} <= set(required)
    assert not {"canary_capture_aware", "canary_fp16_accum"} & (set(REQUIRED_CANARIES[1]) | set(REQUIRED_CANARIES[2]))
    assert set(bench_stage.CANARIES) == set(by_gate["bench"])
    # the gate a pack of today's schema is judged by (records/schema.py) is the one run() writes for each canary,
    # and each schema names a gate for every canary it requires
    assert CANARY_GATES[SCHEMA_VERSION] == {c.name: c.expect_caught_by for c in registry.CANARIES}
    for version, names in REQUIRED_CANARIES.items():
        assert set(names) <= set(CANARY_GATES[version]), version


def test_canary_sources_exist_and_keep_the_symbol_scheme():
    for c in registry.CANARIES:
        text = (REPO / c.source).read_text(encoding="utf-8")
        if c.language == "triton":  # the Triton kernel interface (docs/adding-a-triton-variant.md)
            assert "@triton.jit\ndef fwd_kernel(" in text, c.source
        else:
            assert f"namespace {c.name} {{" in text and "fwd_kernel(FwdParams p)" in text, c.source
        assert "Gate that must fire" in text, c.source


def test_a_canary_whose_stage_is_not_in_the_pack_is_not_run_rather_than_missed(tmp_path):
    (tmp_path / "canaries").mkdir()
    write_json(tmp_path / "canaries" / "expected.json",
               [{"canary": c.name, "caught_by": c.expect_caught_by, "fault": "x"} for c in registry.CANARIES])
    out = canaries_stage.derive(tmp_path / "canaries", tmp_path)
    assert out.status == SKIPPED
    row = next(r for r in out.data["matrix"] if r["canary"] == "canary_side_stream")
    assert row["observed"] == "bench skipped: bench is not in this pack"


# -- 4. inputs that defeat shortcuts ---------------------------------------------------------------------

def test_shortcut_cases_are_a_pure_function_of_the_seed():
    a, b = correctness.shortcut_cases(123), correctness.shortcut_cases(123)
    assert a == b and a != correctness.shortcut_cases(124)
    assert len({c["case"] for c in a}) == len(a) == 9 * len(registry.DTYPES) * len(registry.HEAD_DIMS)
    kinds = {c["case"].split("-")[0] for c in a}
    assert kinds == {"odd", "s1", "large", "sharp", "heavy_tail", "sink", "outlier_channels", "ties"}
    for c in a:
        assert c["S"] == 1 or c["S"] % 16, c  # never a multiple of a tile
        if c["case"].startswith("large"):
            assert c["S"] > 4096
        if c["case"].startswith("sharp"):
            assert 4.0 <= c["scale_mult"] <= 12.0
        kind = c["case"].split("-")[0]
        if kind in correctness.STRUCTURED_FAMILIES:
            assert c["dist"] == kind and c["scale_mult"] == 1.0 and 65 <= c["S"] < 1024
        else:
            assert c["dist"] == ("student_t3" if kind == "heavy_tail" else "normal")
    # every structured family, for every dtype and head dim (so every variant sees each of them)
    for family in correctness.STRUCTURED_FAMILIES:
        assert {(c["dtype"], c["D"]) for c in a if c["dist"] == family} == {
            (dt, d) for dt in registry.DTYPES for d in registry.HEAD_DIMS}


def test_generator_1_still_gives_what_the_h200_pack_recorded():
    rec = read_json(FIX / "correctness" / correctness.SHORTCUT_FILE)
    assert rec["generator"] == 1
    assert correctness.shortcut_cases(rec["seed"], 1) == rec["cases"]
    assert correctness.shortcut_cases(rec["seed"], 2) != rec["cases"]
    with pytest.raises(ValueError, match="unknown"):
        correctness.shortcut_cases(1, 99)


def test_shortcut_cases_need_only_the_standard_library():
    code = ("import sys; sys.path.insert(0, 'python'); from evpack.stages.correctness import shortcut_cases; "
            "shortcut_cases(7); bad = [m for m in ('torch', 'numpy', 'pandas') if m in sys.modules]; "
            "sys.exit(f'imported {bad}' if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr + r.stdout


def test_correctness_run_on_h200_rederives_with_its_shortcut_set_and_catches_both_canaries(tmp_path):
    d = _stage_copy(tmp_path, "correctness", ("scalar", *correctness.CANARIES))
    out = correctness.derive(d, tmp_path)
    assert out.status == PASS, out.reason
    seed = read_json(d / correctness.SHORTCUT_FILE)["seed"]
    assert out.data["shortcut"]["seed"] == seed and not out.data["shortcut"]["problems"]
    assert out.data["shortcut"]["min_ref_ratio"] >= correctness.REF_RATIO_MIN
    caught = {c["name"]: c for c in out.data["canaries"]}
    assert all(c["caught"] for c in caught.values())
    assert "NaN-poisoned output elements unwritten" in caught["canary_partial_write"]["reason"]
    assert "changed q/k/v" in caught["canary_input_mutation"]["reason"]
    assert "out of bound" not in caught["canary_input_mutation"]["reason"]  # its output was right


def test_a_pack_of_the_current_schema_must_have_checked_the_structured_families(tmp_path):
    d = _stage_copy(tmp_path, "correctness", ("scalar", *correctness.CANARIES), schema=None)
    out = correctness.derive(d, tmp_path)  # no pack.json yet: a pack being made now (schema 3)
    assert out.status == ERROR and "predates the structured input families" in out.reason
    write_json(tmp_path / "pack.json", {"schema_version": 3})
    assert correctness.derive(d, tmp_path).status == ERROR
    write_json(tmp_path / "pack.json", {"schema_version": 2})
    assert correctness.derive(d, tmp_path).status == PASS


def test_correctness_errors_when_the_shortcut_set_was_not_fully_checked(tmp_path):
    d = _stage_copy(tmp_path, "correctness", ("scalar",))
    res = read_json(d / "scalar.json")
    dropped = next(r for r in res["rows"] if r.get("set") == "shortcut")
    res["rows"] = [r for r in res["rows"] if r is not dropped]
    write_json(d / "scalar.json", res)
    out = correctness.derive(d, tmp_path)
    assert out.status == ERROR and "shortcut cases not checked" in out.reason


def test_correctness_errors_when_the_seed_does_not_give_the_recorded_cases(tmp_path):
    d = _stage_copy(tmp_path, "correctness", ("scalar",))
    rec = read_json(d / correctness.SHORTCUT_FILE)
    rec["seed"] += 1
    write_json(d / correctness.SHORTCUT_FILE, rec)
    out = correctness.derive(d, tmp_path)
    assert out.status == ERROR and "not what seed" in out.reason


def test_correctness_errors_on_a_case_whose_reference_is_within_reach_of_a_zero_output(tmp_path):
    d = _stage_copy(tmp_path, "correctness", ("scalar",))
    res = read_json(d / "scalar.json")
    row = next(r for r in res["rows"] if r["bound"] > 0)  # S = 1 rows are exact: bound 0
    row["ref_max"] = row["bound"] * (correctness.REF_RATIO_MIN / 2)
    write_json(d / "scalar.json", res)
    out = correctness.derive(d, tmp_path)
    assert out.status == ERROR and "a zero output would pass" in out.reason


def _family_canary(tmp_path: Path, failing_dists: tuple[str, ...]) -> Path:
    """A canary_input_family result built from the H200 scalar rows (its normal grid and its shortcut cases),
    with the rows of `failing_dists` out of bound: each rule's edge, on real row shapes."""
    d = _stage_copy(tmp_path, "correctness", ("scalar",))
    res = read_json(d / "scalar.json")
    rows = [dict(r, variant=correctness.FAMILY_CANARY) for r in res["rows"] if r["dtype"] == "fp16" and r["D"] == 64]
    for fam in correctness.STRUCTURED_FAMILIES:  # the fixture predates them: rows of their shape, passing
        rows.append(dict(rows[-1], dist=fam, case=f"{fam}-fp16-d64-x"))
    for r in rows:
        if r.get("dist", "normal") in failing_dists:
            r.update(max_err=r["bound"] * 40 + 1.0, margin=-(r["bound"] * 39 + 1.0), passed=False)
    write_json(d / f"{correctness.FAMILY_CANARY}.json", {"variant": correctness.FAMILY_CANARY, "rows": rows})
    procs = read_json(d / "procs.json")
    procs[correctness.FAMILY_CANARY] = dict(procs["scalar"])
    write_json(d / "procs.json", procs)
    return d


@pytest.mark.parametrize("failing,caught", [(("outlier_channels",), True), (("sink", "student_t3"), True),
                                            (("student_t3",), False), (("normal",), False), ((), False)])
def test_the_family_canary_counts_only_when_a_structured_family_fails(tmp_path, failing, caught):
    d = _family_canary(tmp_path, failing)
    out = correctness.derive(d, tmp_path)
    (entry,) = [c for c in out.data["canaries"] if c["name"] == correctness.FAMILY_CANARY]
    assert entry["caught"] is caught, entry
    for fam in failing:
        assert fam in entry["observed"]
    assert out.status == PASS, out.reason  # canaries never decide the stage


def _oracle_common():
    import importlib.util

    spec = importlib.util.spec_from_file_location("oracle_common", REPO / "oracles" / "common.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("d", [64, 128])
def test_the_structured_families_are_what_they_claim(dtype, d):
    import torch

    common = _oracle_common()
    scale = common.default_scale(d)
    for s, layout in ((77, "bhsd"), (200, "bshd")):
        q, k, v = (t.double() for t in common.make_inputs(2, 3, s, d, dtype, 5, layout, "sink", device="cpu"))
        p = torch.softmax(q @ k.transpose(-1, -2) * scale, dim=-1)  # non-causal: the hardest rows for the sink
        sink = p[..., 0]
        assert float(sink.min()) > 0.5 and float(sink.max()) < 0.999  # dominant, and the rest still matters
        assert bool((p[..., 1:].max(-1).values < sink).all())

        q, k, v = common.make_inputs(2, 3, s, d, dtype, 6, layout, "ties", device="cpu")
        assert bool((k == k[..., :1, :]).all())
        p = torch.softmax(q.double() @ k.double().transpose(-1, -2) * scale, dim=-1)
        assert torch.allclose(p, torch.full_like(p, 1.0 / s))

        q, k, v = common.make_inputs(2, 3, s, d, dtype, 7, layout, "outlier_channels", device="cpu")
        big = [set(torch.nonzero((t.double().abs() >= 700).any(0).any(0).any(0)).flatten().tolist()) for t in (q, k, v)]
        assert all(len(b) in (2, 3) for b in big) and not (big[0] & big[1] or big[1] & big[2] or big[0] & big[2])
        for t, b in zip((q, k, v), big, strict=True):  # every row of an outlier dim is an outlier
            assert float(t.double()[..., sorted(b)].abs().min()) >= 740 and float(t.double().abs().max()) <= 1000
        # fp16 holds every intermediate of the reference: unscaled scores far below 65504
        assert float((q.double() @ k.double().transpose(-1, -2)).abs().max()) < 65504 / 1.5
        ref = torch.softmax(q.double() @ k.double().transpose(-1, -2) * scale, dim=-1) @ v.double()
        assert float(ref.abs().max()) > 700  # outputs reach the outliers


def test_make_inputs_keeps_normal_and_student_t_as_they_were_and_names_unknown_families():
    import torch

    common = _oracle_common()
    g = torch.Generator().manual_seed(3)
    want = [torch.randn((1, 2, 9, 64), generator=g, dtype=torch.float32).to(torch.float16) for _ in range(3)]
    got = common.make_inputs(1, 2, 9, 64, "fp16", 3, device="cpu")
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
    g = torch.Generator().manual_seed(4)
    want = [common.heavy_tailed((1, 2, 9, 64), g).to(torch.float16) for _ in range(3)]
    got = common.make_inputs(1, 2, 9, 64, "fp16", 4, dist="student_t3", device="cpu")
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
    with pytest.raises(ValueError, match="unknown distribution 'uniform'"):
        common.make_inputs(1, 1, 9, 64, "fp16", 1, dist="uniform", device="cpu")


def test_storage_overlap_catches_inputs_views_and_other_outputs():
    import torch

    common = _oracle_common()
    q, k = torch.zeros(2, 3, 17, 64), torch.zeros(2, 3, 17, 64)
    fresh = torch.empty_like(q)
    assert common.storage_overlaps({"q": q, "k": k, "out": fresh}) == []
    assert common.storage_overlaps({"q": q, "out": q}) == [("q", "out")]  # the input itself
    assert common.storage_overlaps({"q": q, "out": q[:, :, 1:].transpose(1, 2)}) == [("q", "out")]  # a view
    # disjoint slices of one persistent buffer share its storage: what a fresh output never does
    pool = torch.empty(2, 2, 3, 17, 64)
    assert common.storage_overlaps({"out0": pool[0], "out1": pool[1], "q": q}) == [("out0", "out1")]
    assert common.storage_overlaps({"q": q, "out": torch.empty(0)}) == []


# -- 1, 2, 3. stale results, stream semantics, poison and input comparison in stability -----------------------

def test_stability_run_on_h200_passes_scalar_and_catches_memo_and_wrong_stream(tmp_path):
    d = _stage_copy(tmp_path, "stability", ("scalar", *stability.CANARIES))
    out = stability.derive(d, tmp_path)
    assert out.status == PASS, out.reason
    assert "in-place refills" in out.data["variants"]["scalar"]["reason"]
    caught = {c["name"]: c for c in out.data["canaries"]}
    assert all(c["caught"] for c in caught.values()), caught
    memo = read_json(d / "canary_memo.json", allow_nan=True)["rows"][0]  # raw oracle output
    # the memo is invisible to the 1000 identical launches; only the in-place refills expose it
    assert memo["eager"]["mismatched_elements"] == 0 and memo["eager"]["refill"]["bad_rounds"] > 0
    assert "stale result or a launch outside the caller's stream" in caught["canary_memo"]["reason"]
    wrong = read_json(d / "canary_wrong_stream.json", allow_nan=True)["rows"][0]
    assert wrong["eager"]["refill"]["bad_rounds"] > 0  # ran before the side-stream producer had written


def _with_new_checks(rows: list[dict], kernel_of_row, alias=None) -> list[dict]:
    """H200 stability rows with the schema-3 records added (built here to hit each rule's edge): the captured
    graph's nodes (kernel_of_row(row) -> list of nodes) and the aliasing phase."""
    out = []
    for r in rows:
        r = json.loads(json.dumps(r))
        r["graph"].update(nodes=kernel_of_row(r), nodes_error=None,
                          own_kernel={"variant": r["variant"], "config": r["config"], "dtype": r["dtype"], "D": r["D"]})
        r["alias"] = alias or {"calls": 4, "overwritten": [], "wrong": [], "worst_err": 0.0, "overlaps": []}
        out.append(r)
    return out


def _symbol(variant: str, config: str) -> str:
    return f"_ZN6evpack{len(variant)}{variant}10fwd_kernelINS0_{len(config) + 4}cfg_{config}E6__halfLi64EEEvNS_9FwdParamsE"


def _own_node(r: dict) -> list[dict]:
    return [{"type": "kernel", "depth": 0, "name": _symbol(r["variant"], r["config"]), "grid": [5, 8, 1],
             "block": [64, 1, 1], "smem": 0}]


def _planted(d: Path, name: str, rows: list[dict]) -> None:
    write_json(d / f"{name}.json", {"variant": name, "env": {}, "rows": [dict(r, variant=name) for r in rows],
                                    "first_error": None, "binary": None})
    procs = read_json(d / "procs.json")
    procs[name] = dict(procs["scalar"])
    write_json(d / "procs.json", procs)


def test_schema_3_stability_needs_the_graph_nodes_and_the_aliasing_phase(tmp_path):
    d = _stage_copy(tmp_path, "stability", ("scalar",), schema=3)
    out = stability.derive(d, tmp_path)
    assert out.status == FAIL
    assert "captured graph: its nodes were not recorded" in out.reason
    assert "aliasing: the phase was not recorded" in out.reason
    res = read_json(d / "scalar.json")
    res["rows"] = _with_new_checks(res["rows"], _own_node)
    write_json(d / "scalar.json", res)
    out = stability.derive(d, tmp_path)
    assert out.status == PASS, out.reason
    assert "kept outputs rechecked" in out.data["variants"]["scalar"]["reason"]


@pytest.mark.parametrize("nodes,needle", [
    ([], "no kernel node"),
    ([{"type": "memcpy", "depth": 0}], "no kernel node"),
    ([{"type": "kernel", "depth": 0, "name": _symbol("scalar", "m64n64w2s1")},
      {"type": "kernel", "depth": 1, "name": "_Z17cublasGemmKernelv"}], "a kernel of not from the extension"),
    ([{"type": "kernel", "depth": 0, "name": _symbol("mma", "m128n64w4s2")}],
     "a kernel of variant mma (mma/m128n64w4s2/fp16/d64)"),
    ([{"type": "kernel", "depth": 0, "name": None}], "a kernel of no name"),
    ([{"type": "kernel", "depth": 0, "name": _symbol("scalar", "m64n64w2s1")}, {"type": "conditional", "depth": 0}],
     "a conditional node (its body is not inspected)"),
])
def test_a_captured_graph_must_hold_its_own_kernel_and_no_other(tmp_path, nodes, needle):
    d = _stage_copy(tmp_path, "stability", ("scalar",), schema=3)
    res = read_json(d / "scalar.json")
    res["rows"] = _with_new_checks(res["rows"], lambda r: nodes)
    write_json(d / "scalar.json", res)
    out = stability.derive(d, tmp_path)
    assert out.status == FAIL and f"captured graph: {needle}" in out.reason, out.reason
    assert "differ bitwise" not in out.reason  # the replays themselves were right


def test_the_capture_and_alias_canaries_are_caught_only_by_their_own_checks(tmp_path):
    d = _stage_copy(tmp_path, "stability", ("scalar",), schema=3)
    res = read_json(d / "scalar.json")
    scalar = res["rows"]
    res["rows"] = _with_new_checks(scalar, _own_node)
    write_json(d / "scalar.json", res)
    other = {"m64n64w2s1": "m32n64w1s1", "m32n64w1s1": "m64n64w2s1"}
    # capture-aware: each config's graph holds the other config's kernel (rows for both configs)
    rows = [dict(r, config=c) for r in scalar for c in other]
    _planted(d, stability.CAPTURE_CANARY, _with_new_checks(
        [dict(r, variant=stability.CAPTURE_CANARY) for r in rows],
        lambda r: [dict(_own_node(r)[0], name=_symbol(r["variant"], other[r["config"]]))]))
    # output alias: earlier outputs overwritten; its graph (kernel + the copy into the old output) is fine
    _planted(d, stability.ALIAS_CANARY, _with_new_checks(
        [dict(r, variant=stability.ALIAS_CANARY) for r in scalar],
        lambda r: _own_node(r) + [{"type": "memcpy", "depth": 0}],
        alias={"calls": 4, "overwritten": [0, 1, 2], "wrong": [], "worst_err": 0.0, "overlaps": []}))
    out = stability.derive(d, tmp_path)
    assert out.status == PASS, out.reason
    caught = {c["name"]: c for c in out.data["canaries"]}
    cap, alias = caught[stability.CAPTURE_CANARY], caught[stability.ALIAS_CANARY]
    assert cap["caught"] and "failed checks graph_kernel" in cap["observed"]
    assert "canary canary_capture_aware (canary_capture_aware/m32n64w1s1/fp16/d64)" in cap["reason"]
    assert alias["caught"] and alias["observed"] == "fail: failed checks alias"
    assert "outputs of calls [0, 1, 2] of 4 changed after later calls" in alias["reason"]
    # the same canaries failing some other way do not count as caught by their check
    _planted(d, stability.CAPTURE_CANARY, _with_new_checks(
        [dict(r, variant=stability.CAPTURE_CANARY, passed=False,
              eager=dict(r["eager"], mismatched_launches=3, mismatched_elements=96)) for r in rows], _own_node))
    out = stability.derive(d, tmp_path)
    cap = next(c for c in out.data["canaries"] if c["name"] == stability.CAPTURE_CANARY)
    assert not cap["caught"] and cap["observed"] == "fail: failed checks none"
    assert out.status == PASS, out.reason
    # nor does a passed: false flag that the rows' own fields contradict: an error of the stage, naming the row
    _planted(d, stability.CAPTURE_CANARY, _with_new_checks(
        [dict(r, variant=stability.CAPTURE_CANARY, passed=False) for r in rows], _own_node))
    out = stability.derive(d, tmp_path)
    cap = next(c for c in out.data["canaries"] if c["name"] == stability.CAPTURE_CANARY)
    assert not cap["caught"] and cap["observed"] == "error: failed checks none"
    assert out.status == ERROR and "canary_capture_aware: row 0 (" in out.reason, out.reason


@pytest.mark.parametrize("alias,needle", [
    ({"wrong": [2], "worst_err": 3.5}, "outputs of calls [2] out of bound for their own inputs (err 3.5)"),
    ({"overlaps": [["out0", "q0"]]}, "outputs share memory with out0/q0"),
])
def test_aliasing_rules(tmp_path, alias, needle):
    d = _stage_copy(tmp_path, "stability", ("scalar",), schema=3)
    res = read_json(d / "scalar.json")
    res["rows"] = _with_new_checks(res["rows"], _own_node, alias={"calls": 4, "overwritten": [], "wrong": [],
                                                                  "worst_err": 0.0, "overlaps": [], **alias})
    write_json(d / "scalar.json", res)
    out = stability.derive(d, tmp_path)
    assert out.status == FAIL and needle in out.reason, out.reason


# -- 6. work outside the shipped binary ------------------------------------------------------------------

def test_markers_split_the_profiled_range_into_calls():
    kernels = parse_ncu_csv((FIX / "tensor_proof" / "canary_foreign_work.log").read_text(encoding="utf-8"))
    groups = split_at_markers(kernels)
    assert len(groups) == len(read_json(FIX / "tensor_proof" / "canary_foreign_work.manifest.json")["calls"])
    assert all(MARKER_KERNEL not in k.kernel for g in groups for k in g)
    with pytest.raises(ValueError, match="before the first marker"):
        split_at_markers([k for k in kernels if MARKER_KERNEL not in k.kernel])


def test_tensor_proof_counts_only_our_kernels_and_fails_foreign_ones(tmp_path):
    d = _stage_copy(tmp_path, "tensor_proof", ("scalar", "mma", *tensor_proof.CANARIES))
    out = tensor_proof.derive(d, tmp_path)
    assert out.status == PASS, out.reason
    caught = {c["name"]: c for c in out.data["canaries"]}
    assert caught["canary_decoy_hmma"]["caught"] and caught["canary_foreign_work"]["caught"]
    problem, rows = tensor_proof._rows(d, "canary_foreign_work")
    assert problem is None and rows
    for r in rows:  # cuBLAS did the matrix work; none of it is counted
        assert r["foreign_kernels"] and r["foreign_tensor_flops"] >= r["required_flops"]
        assert r["executed_tensor_flops"] == 0 and not r["passed"]


def test_a_foreign_kernel_in_a_real_variants_call_fails_the_gate(tmp_path):
    d = _stage_copy(tmp_path, "tensor_proof", ("mma", *tensor_proof.CANARIES))
    # mma's last call also launched the cuBLAS kernel of the foreign canary's first call (launch 1 there)
    foreign = [ln for ln in (d / "canary_foreign_work.log").read_text(encoding="utf-8").splitlines()
               if ln.startswith('"1",')]
    assert foreign and "evpack" not in foreign[0]
    with open(d / "mma.log", "a", encoding="utf-8") as f:
        f.write("".join(ln.replace('"1",', '"100000",', 1) + "\n" for ln in foreign))
    out = tensor_proof.derive(d, tmp_path)
    assert out.status == FAIL and "kernels not from the extension ran during the call" in out.reason
    _, rows = tensor_proof._rows(d, "mma")
    assert [bool(r.get("foreign_kernels")) for r in rows] == [False] * (len(rows) - 1) + [True]


def test_a_kernel_of_another_variant_in_a_call_is_named_by_its_variant(tmp_path):
    d = _stage_copy(tmp_path, "tensor_proof", ("mma", *tensor_proof.CANARIES))
    # mma's last call also ran the scalar kernel of scalar's first call, and the decoy canary's kernel
    lines = []
    for src in ("scalar", "canary_decoy_hmma"):
        text = (FIX / "tensor_proof" / f"{src}.log").read_text(encoding="utf-8").splitlines()
        first = next(ln for ln in text if ln.startswith('"') and "fwd_kernel" in ln)
        lines.append(first.replace(first.split(",", 1)[0], f'"{100000 + len(lines)}"', 1))
    with open(d / "mma.log", "a", encoding="utf-8") as f:
        f.write("".join(ln + "\n" for ln in lines))
    out = tensor_proof.derive(d, tmp_path)
    assert out.status == FAIL
    assert "kernels of canary canary_decoy_hmma (canary_decoy_hmma/m64n64w2s1/fp16/d64), variant scalar " \
           "(scalar/m64n64w2s1/fp16/d64) ran during the call of mma/" in out.reason, out.reason
    assert "not from the extension" not in out.reason


# -- 5. timing integrity ------------------------------------------------------------------------------------

def _row(**kw):
    row = {"key": "k", "impl": "evpack", "shape": "B=16,H=16,S=512,D=64,dtype=fp16,causal=0", "mode": "cold",
           "status": "ok", "reason": "", "median_us": 100.0}
    row.update(kw)
    return row


def test_a_row_faster_than_the_speed_of_light_is_an_error_for_every_impl():
    fl = integrity.floor_us(_row(), RATES)
    for impl in ("evpack", "sdpa"):
        probs = integrity.row_problems(_row(impl=impl, median_us=fl * 0.99), RATES)
        assert probs and probs[0][0] == "error" and integrity.IMPOSSIBLE in probs[0][1]
        assert integrity.row_problems(_row(impl=impl, median_us=fl * 1.01), RATES) == []


def test_warm_rows_are_held_to_the_flop_floor_only():
    small = "B=1,H=1,S=64,D=64,dtype=fp16,causal=0"  # memory-bound: the byte floor is the larger one
    assert integrity.floor_us(_row(shape=small, mode="warm"), RATES) < integrity.floor_us(_row(shape=small), RATES)


def test_drain_l2_and_timed_output_rules_apply_to_our_rows():
    lim = integrity.DRAIN_LIMIT_US
    assert integrity.row_problems(_row(drain_us_median=lim * 0.9), RATES) == []
    assert integrity.row_problems(_row(drain_us_median=lim * 1.1), RATES)[0][0] == "error"
    assert integrity.row_problems(_row(impl="sdpa", drain_us_median=lim * 10), RATES) == []
    assert integrity.row_problems(_row(l2_violations=1), RATES)[0][0] == "error"
    assert integrity.row_problems(_row(l2_error="cuCtxSetLimit failed"), RATES)[0][0] == "error"
    assert integrity.row_problems(_row(timed_mismatches=3, timed_checks=4), RATES)[0][0] == "fail"
    judged, summary = integrity.judge([_row(), _row(key="b", median_us=0.01)], RATES)
    assert [r["status"] for r in judged] == ["ok", "error"] and summary["impossible_rows"] == 1


def test_the_side_stream_canary_recorded_on_h200_is_caught_and_an_honest_record_is_not(tmp_path):
    from evpack.timing.ceilings import rates

    d = tmp_path / "bench"
    shutil.copytree(FIX / "bench", d)
    rt = rates(read_json(d / "ceilings.json"))
    entry = bench_stage.canary_outcome(d, rt)
    assert entry["caught"] and integrity.IMPOSSIBLE in entry["observed"]
    assert "still busy" in entry["observed"] and "re-check" in entry["observed"]
    rec = read_json(d / bench_stage.CANARY_FILE)
    fl = integrity.floor_us({"shape": rec["shape"], "mode": rec["mode"]}, rt)
    rec.update(times_us=[fl * 3] * 20, drain_us_median=20.0, timed_mismatches=0, recheck_err=0.0)
    write_json(d / bench_stage.CANARY_FILE, rec)
    honest = bench_stage.canary_outcome(d, rt)
    assert not honest["caught"] and honest["reason"] == "no rule fired"


def test_the_h200_run_measured_the_integrity_costs():
    rec = read_json(FIX / "bench" / "integrity.json")
    assert rec["timed_checks"] > 0 and rec["rows_with_checks"] > 0
    assert rec["drain_us_max_of_rows"] < integrity.DRAIN_LIMIT_US
    assert json.dumps(rec)  # plain JSON for the notes


def test_canaries_run_last_but_keep_their_place_in_the_pack_and_report():
    from evpack.stages.order import RUN_ORDER, STAGE_ORDER

    assert RUN_ORDER[-1] == "canaries" and sorted(RUN_ORDER) == sorted(STAGE_ORDER)
    assert STAGE_ORDER.index("canaries") < STAGE_ORDER.index("bench")  # packs before this change render alike


def test_the_bench_refill_keeps_the_pointers_and_changes_every_value():
    import torch

    from evpack.timing.shape_runner import refill_in_place

    qkv = tuple(torch.zeros(2, 3, 17, 64, dtype=torch.float16) for _ in range(3))
    ptrs = [t.data_ptr() for t in qkv]
    refill_in_place(qkv, 5)
    assert [t.data_ptr() for t in qkv] == ptrs
    assert all(bool((t != 0).float().mean() > 0.99) for t in qkv) and not torch.equal(qkv[0], qkv[1])
    again = tuple(torch.zeros_like(t) for t in qkv)
    refill_in_place(again, 5)
    assert all(torch.equal(a, b) for a, b in zip(qkv, again, strict=True))


# -- on a GPU: the oracles themselves catch the four canaries of schema 3 ---------------------------------------

def _built(*names: str) -> None:
    """Skip unless the extensions hold these variants (build with EVPACK_CANARIES=1)."""
    import importlib
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    have = set()
    for module in ("evpack._C", "evpack._canaries"):
        if importlib.util.find_spec(module) is not None:
            have |= {k[0] for k in importlib.import_module(module).kernels()}
    missing = [n for n in names if n not in have]
    if missing:
        pytest.skip(f"not built: {', '.join(missing)} (python setup.py build_ext --inplace with EVPACK_CANARIES=1)")


def _run_oracle_cells(stage_dir: Path, program: str, cells: dict[str, tuple[str, ...]]) -> None:
    from evpack.stages.procs import Job, oracle_cmd, run_jobs

    stage_dir.mkdir(parents=True, exist_ok=True)
    jobs = [Job(name, oracle_cmd(REPO, program, "--variant", name, *args, "--out", str(stage_dir / f"{name}.json")),
                600) for name, args in cells.items()]
    run_jobs(jobs, stage_dir, REPO)


@pytest.mark.gpu
def test_gpu_stability_catches_the_capture_and_alias_canaries_by_their_checks(tmp_path):
    _built("scalar", stability.CAPTURE_CANARY, stability.ALIAS_CANARY)
    d = tmp_path / "stability"
    launches = ("--launches", "50")
    _run_oracle_cells(d, "stability.py", {"scalar": launches, stability.CAPTURE_CANARY: launches,
                                          stability.ALIAS_CANARY: launches})
    write_json(tmp_path / "pack.json", {"schema_version": 3})
    out = stability.derive(d, tmp_path)
    assert out.status == PASS, (out.reason, (d / "scalar.log").read_text()[-2000:])
    for row in read_json(d / "scalar.json")["rows"]:  # the honest graph: one kernel node, the call's own
        kernels = [n for n in row["graph"]["nodes"] if n["type"] == "kernel"]
        assert len(kernels) == 1 and f"cfg_{row['config']}" in kernels[0]["name"], row["graph"]["nodes"]
    caught = {c["name"]: c for c in out.data["canaries"]}
    for name in (stability.CAPTURE_CANARY, stability.ALIAS_CANARY):
        assert caught[name]["caught"], (caught[name], (d / f"{name}.log").read_text()[-2000:])
    cap = read_json(d / f"{stability.CAPTURE_CANARY}.json")["rows"]
    assert all(r["graph"]["mismatched_replays"] == 0 and r["graph"]["refill"]["bad_rounds"] == 0 for r in cap)
    assert "canary_capture_aware/m32n64w1s1" in caught[stability.CAPTURE_CANARY]["reason"]


@pytest.mark.gpu
def test_gpu_correctness_catches_the_family_canary_and_passes_the_fp16_accum_canary(tmp_path):
    _built("mma", correctness.FAMILY_CANARY, "canary_fp16_accum")
    d = tmp_path / "correctness"
    seed = 20261124
    d.mkdir()
    write_json(d / correctness.SHORTCUT_FILE, {"generator": correctness.SHORTCUT_GENERATOR, "seed": seed,
                                               "cases": correctness.shortcut_cases(seed)})
    family = ("--quick", "--shortcut-seed", str(seed))
    _run_oracle_cells(d, "correctness.py", {"mma": family, correctness.FAMILY_CANARY: family,
                                            "canary_fp16_accum": ("--quick",)})
    status, reason, _ = correctness._variant_status(d, "canary_fp16_accum")  # right on the grid: SASS must catch it
    assert status == PASS, reason
    write_json(tmp_path / "pack.json", {"schema_version": 3})
    procs = read_json(d / "procs.json")  # the stage runs the SASS canary nowhere: derive without it
    write_json(d / "procs.json", {k: v for k, v in procs.items() if k != "canary_fp16_accum"})
    out = correctness.derive(d, tmp_path)
    assert out.status == PASS, out.reason  # mma within the bound on every family, incl. the structured ones
    dists = {r.get("dist") for r in read_json(d / "mma.json")["rows"]}
    assert set(correctness.STRUCTURED_FAMILIES) <= dists
    (entry,) = [c for c in out.data["canaries"] if c["name"] == correctness.FAMILY_CANARY]
    assert entry["caught"] and "outlier_channels" in entry["observed"], entry


# -- issue 25: unique timed content, the attention floor, the content probe, the two bench canaries ------
# The records below are built here to hit each rule's edge (the canaries have not run on a GPU in this tree:
# bench/validate_timing.sh runs them, and tests/test_bench_content_gpu.py asserts they are caught there).

PHYSICS = {"sm_count": 132, "capability": "9.0"}


def _physics():
    from evpack.timing.roofline import physics_of

    return physics_of(PHYSICS, 1980)


def _v2_row(**kw):
    row = _row(variant="mma", config="c", n=40, calls_per_sample=1, content_uniqueness="per-call", unique_calls=40,
               timed_content_unique=True)
    row.update(kw)
    return row


def test_v2_rows_need_unique_content_and_reference_clean_timed_outputs():
    ph = _physics()
    assert integrity.row_problems(_v2_row(), RATES, schema=2, physics=ph) == []
    probs = integrity.row_problems(_v2_row(timed_content_unique=False, unique_calls=39), RATES, schema=2, physics=ph)
    assert probs and probs[0][0] == "error" and integrity.NOT_UNIQUE in probs[0][1]
    probs = integrity.row_problems(_v2_row(timed_ref_failures=1, timed_ref_checks=2, timed_ref_worst=7.5), RATES,
                                   schema=2, physics=ph)
    assert probs == [("fail", probs[0][1])] and "fp32 reference" in probs[0][1]
    flags = {("mma", "c"): "identical content ran 5x as fast"}
    probs = integrity.row_problems(_v2_row(), RATES, schema=2, physics=ph, cache_flags=flags)
    assert probs[0][0] == "error" and integrity.CONTENT_CACHE in probs[0][1]
    assert integrity.row_problems(_v2_row(config="other"), RATES, schema=2, physics=ph, cache_flags=flags) == []
    # SDPA rows are timed on the same content, but the rules of ours do not apply to them
    assert integrity.row_problems(_v2_row(impl="sdpa", timed_content_unique=False), RATES, schema=2, physics=ph) == []
    # schema-1 rows (older packs) are judged as before: no content fields needed
    assert integrity.row_problems(_row(), RATES) == []


def test_v2_floor_is_the_largest_of_mma_exp_and_memory():
    ph = _physics()
    fl = integrity.floor_us(_row(), RATES, schema=2, physics=ph)
    assert fl == pytest.approx(17_179_869_184 / RATES["matmul_fp16"] * 1e6)  # D64 at 750 TFLOP/s: mma bound
    probs = integrity.row_problems(_v2_row(median_us=fl * 0.99), RATES, schema=2, physics=ph)
    assert probs[0][0] == "error" and integrity.IMPOSSIBLE in probs[0][1]
    # a matmul ceiling 3x higher (7.6 us): in warm mode the exp floor (16.05 us at 1.98 GHz) bounds the row, in
    # cold mode the bytes at the copy bandwidth (67.1 MB at 4 TB/s = 16.78 us)
    fast = dict(RATES, matmul_fp16=RATES["matmul_fp16"] * 3)
    assert integrity.floor_us(_row(mode="warm"), fast, schema=2, physics=ph) == pytest.approx(16.05, abs=0.01)
    assert integrity.floor_us(_row(), fast, schema=2, physics=ph) == pytest.approx(16.78, abs=0.01)
    warm = _v2_row(mode="warm", median_us=16.0)
    assert integrity.row_problems(warm, fast, schema=2, physics=ph)[0][0] == "error"
    assert integrity.row_problems(warm, fast) == []  # the schema-1 warm floor was the FLOPs alone: 7.6 us
    # without a readable clock there is no exp floor, never a guessed one
    assert integrity.floor_us(_row(mode="warm"), fast, schema=2, physics=None) == pytest.approx(7.63, abs=0.01)


def _canary_rec(name, **kw):
    rec = {"canary": name, "shape": bench_canaries.SHAPE, "mode": "warm", "times_us": [90.0] * 40, "error": None,
           "stop": "max_samples", "timed_checks": 3, "timed_mismatches": 0, "drain_us_median": 20.0,
           "l2_violations": 0, "l2_error": None, "timed_ref_checks": 2, "timed_ref_failures": 0,
           "timed_ref_worst": 0.4, "content_uniqueness": "per-call", "unique_calls": 40, "recheck_err": 1e-4,
           "err_bound": 2e-3, "probe_rule": content_probe.RULE.to_json(),
           "probe": {"impl": "canary", "variant": name, "config": "c", "fresh_us": [900.0] * 12,
                     "repeat_us": [899.0] * 12, "error": None}}
    rec.update(kw)
    return rec


@pytest.mark.parametrize("name", [bench_canaries.CONTENT_CACHE, bench_canaries.TIMING_AWARE])
def test_each_new_bench_canary_is_caught_by_the_rule_of_its_class_and_an_honest_record_is_not(tmp_path, name):
    ph = _physics()
    write_json(tmp_path / bench_canaries.FILES[name], _canary_rec(name))
    honest = bench_stage.canary_outcome(tmp_path, RATES, name, schema=2, physics=ph)
    assert not honest["caught"] and honest["reason"] == "no rule fired"
    if name == bench_canaries.CONTENT_CACHE:  # repeats of identical content 100x faster; everything else honest
        cheat = _canary_rec(name, probe=dict(_canary_rec(name)["probe"], repeat_us=[9.0] * 12))
        rule = integrity.CONTENT_CACHE
    else:  # stale copies in fast loops: kept timed outputs differ from an untimed call on their inputs
        cheat = _canary_rec(name, timed_mismatches=52_000)
        rule = "kept timed outputs differ"
    write_json(tmp_path / bench_canaries.FILES[name], cheat)
    out = bench_stage.canary_outcome(tmp_path, RATES, name, schema=2, physics=ph)
    assert out["caught"] and rule in out["observed"], out
    # another rule firing is not the class's catch: the impossible speed alone does not prove this gate live
    write_json(tmp_path / bench_canaries.FILES[name], _canary_rec(name, times_us=[5.0] * 40))
    other = bench_stage.canary_outcome(tmp_path, RATES, name, schema=2, physics=ph)
    assert not other["caught"] and integrity.IMPOSSIBLE in other["observed"]
    assert "the rule of its class did not fire" in other["reason"]


def test_bench_derive_requires_every_bench_canary_and_the_probe_in_new_packs():
    assert bench_canaries.names_for(1) == (bench_canaries.SIDE_STREAM,)
    assert set(bench_canaries.names_for(2)) == set(bench_stage.CANARIES)
    need = bench_stage._schema_files(2)
    assert content_probe.FILE in need and all(bench_canaries.FILES[n] in need for n in bench_stage.CANARIES)
    assert bench_stage._schema_files(1) == ()


def test_content_probe_flags_a_cache_and_never_an_honest_spread():
    base = {"impl": "evpack", "variant": "mma", "config": "c", "error": None}
    rng = __import__("random").Random(3)
    fresh = [66.0 * (1 + 0.01 * rng.gauss(0, 1)) for _ in range(12)]
    honest = dict(base, fresh_us=fresh, repeat_us=[f * (1 + 0.02 * rng.gauss(0, 1)) for f in fresh])
    assert content_probe.judge(honest)["flagged"] is False
    cache = dict(base, fresh_us=fresh, repeat_us=[f * 0.5 for f in fresh])
    v = content_probe.judge(cache)
    assert v["flagged"] and "2.00x as fast" in v["reason"]
    assert content_probe.judge(dict(base, fresh_us=fresh[:5], repeat_us=fresh[:5]))["flagged"] is None
    assert content_probe.judge(dict(base, error="RuntimeError: x", fresh_us=[], repeat_us=[]))["flagged"] is None
    probe = {"shape": "s", "rule": content_probe.RULE.to_json(), "entries": [honest, cache | {"config": "d"}]}
    assert content_probe.flags(probe) == {("mma", "d"): content_probe.judge(cache | {"shape": "s"})["reason"]}
    assert content_probe.problems(probe) == []
    assert content_probe.problems(dict(probe, rule={"name": "lenient", "max_ratio": 0.0})) != []


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("name", [bench_canaries.CONTENT_CACHE, bench_canaries.TIMING_AWARE])
def test_bench_canaries_build_for_sm90_without_spills(tmp_path, name):
    """The generated instantiation of each new canary compiles with nvcc and passes the PTXAS rules (0 spill
    bytes, 0 stack): only the bench gate is meant to fire on it."""
    from evpack import buildgen
    from evpack.parsers.ptxas import parse_ptxas

    v = registry.get(name, include_canaries=True)
    src = tmp_path / buildgen.instantiation_name(v.name, "fp16", 64)
    src.write_text(buildgen.instantiation_source(v, "fp16", 64))
    cmd = [shutil.which("nvcc"), "-c", "-std=c++17", "-Xptxas", "-v", "-gencode", "arch=compute_90,code=sm_90",
           f"-I{REPO}", f"-I{REPO / 'csrc' / 'include'}", "-D__CUDA_NO_HALF_OPERATORS__",
           "-D__CUDA_NO_HALF_CONVERSIONS__", str(src), "-o", str(tmp_path / "k.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ours = [k for k in parse_ptxas(proc.stderr) if f"{len(name)}{name}" in k.symbol]
    assert ours and all(k.spill_bytes == 0 and k.stack_bytes == 0 for k in ours), ours
