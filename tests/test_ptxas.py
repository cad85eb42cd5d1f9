"""PTXAS parser and stage, on real `ptxas -v` output (tests/fixtures/ptxas, see fixtures/README.md)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from evpack import registry
from evpack.parsers import ptxas
from evpack.stages import ptxas as stage
from evpack.stages.base import ERROR, FAIL, PASS, SKIPPED, StageContext

FIX = Path(__file__).parent / "fixtures" / "ptxas"
CUDA13 = FIX / "kernels.cuda13.0.sm80_89_90.log"
CUDA12 = FIX / "kernels.cuda12.4.sm80_90.log"
SPILL13 = FIX / "spill.cuda13.0.maxrreg32.sm80_90.log"
SPILL12 = FIX / "spill.cuda12.4.maxrreg32.sm80.log"
EXTRA = FIX / "extra.cuda13.0.sm90a.log"

WMMA_F16 = "_ZN6evpack4wmma10fwd_kernelINS0_14cfg_m64n64w4s1E6__halfLi64EEEvNS_9FwdParamsE"
WMMA_BF16 = "_ZN6evpack4wmma10fwd_kernelINS0_14cfg_m64n64w4s1E13__nv_bfloat16Li64EEEvNS_9FwdParamsE"
SCALAR = "_ZN6evpack6scalar10fwd_kernelINS0_14cfg_m64n64w2s1E6__halfLi64EEEvNS_9FwdParamsE"
DECOY = "_ZN6evpack17canary_decoy_hmma10fwd_kernelINS0_14cfg_m64n64w2s1E6__halfLi64EEEvNS_9FwdParamsE"

# threads and dynamic shared memory of the fixture kernels (what build/kernels.json would say)
FIXTURE_KERNELS = [
    {"variant": "scalar", "config": "m64n64w2s1", "dtype": "fp16", "head_dim": 64, "threads": 64,
     "dynamic_smem_bytes": 0, "module": "evpack._C"},
    {"variant": "wmma", "config": "m64n64w4s1", "dtype": "fp16", "head_dim": 64, "threads": 128,
     "dynamic_smem_bytes": 0, "module": "evpack._C"},
    {"variant": "wmma", "config": "m64n64w4s1", "dtype": "bf16", "head_dim": 64, "threads": 128,
     "dynamic_smem_bytes": 0, "module": "evpack._C"},
    {"variant": "canary_decoy_hmma", "config": "m64n64w2s1", "dtype": "fp16", "head_dim": 64, "threads": 64,
     "dynamic_smem_bytes": 0, "module": "evpack._canaries"},
]


def by_key(rows):
    return {(k.symbol, k.arch): k for k in rows}


# ---- parser ------------------------------------------------------------------------------

def test_cuda13_multi_arch():
    log = ptxas.parse_ptxas_log(CUDA13.read_text())
    assert log.command.startswith("nvcc -c -Xptxas -v -gencode arch=compute_80,code=sm_80")
    assert log.built_archs == ("sm_80", "sm_89", "sm_90")
    assert len(log.kernels) == 12  # 4 kernels x 3 archs
    k = by_key(log.kernels)
    bf16_89 = k[(WMMA_BF16, "sm_89")]
    assert (bf16_89.registers, bf16_89.static_smem_bytes, bf16_89.barriers) == (40, 4096, 1)
    assert (bf16_89.stack_bytes, bf16_89.spill_bytes, bf16_89.gmem_bytes) == (0, 0, 0)
    assert bf16_89.cmem_bytes == {0: 400} and bf16_89.report_format == "cuda13"
    assert k[(WMMA_F16, "sm_90")].registers == 32 and k[(WMMA_F16, "sm_90")].cmem_bytes == {}
    assert k[(SCALAR, "sm_80")].static_smem_bytes == 0 and k[(SCALAR, "sm_80")].barriers == 0
    assert k[(DECOY, "sm_89")].registers == 38
    assert all(r.max_registers is None for r in log.kernels)


def test_cuda12_register_format():
    log = ptxas.parse_ptxas_log(CUDA12.read_text())
    assert log.built_archs == ("sm_80", "sm_90")  # two ptxas runs, one '#' line each
    assert len(log.kernels) == 8
    assert all(r.report_format == "cuda12" and r.barriers is None for r in log.kernels)
    k12 = by_key(log.kernels)
    k13 = by_key(ptxas.parse_ptxas(CUDA13.read_text()))
    # the same PTX gives the same resources on sm_80 under ptxas 12.4 and 13.0
    for sym in (WMMA_F16, WMMA_BF16, SCALAR, DECOY):
        a, b = k12[(sym, "sm_80")], k13[(sym, "sm_80")]
        assert (a.registers, a.static_smem_bytes, a.stack_bytes) == (b.registers, b.static_smem_bytes, b.stack_bytes)
    assert k12[(WMMA_F16, "sm_80")].static_smem_bytes == 4096


@pytest.mark.parametrize("path,archs,stack", [(SPILL13, ("sm_80", "sm_90"), 912), (SPILL12, ("sm_80",), 896)])
def test_spills_stack_and_maxrregcount(path, archs, stack):
    log = ptxas.parse_ptxas_log(path.read_text())
    assert log.built_archs == archs
    k = by_key(log.kernels)
    for a in archs:
        s = k[(SCALAR, a)]
        assert (s.registers, s.max_registers) == (32, 32)
        assert (s.spill_store_bytes, s.spill_load_bytes, s.spill_bytes) == (1120, 1120, 2240)
        assert s.stack_bytes == stack and s.cumulative_stack_bytes == stack
        assert k[("stray_kernel", a)].spill_bytes == 0
    # the non-inlined device function has a "Function properties" block but is no entry
    assert not any("helper" in r.symbol for r in log.kernels)
    assert len(log.kernels) == 2 * len(archs)


def test_arch_suffix_and_stack_frame():
    log = ptxas.parse_ptxas_log(EXTRA.read_text())
    assert log.built_archs == ("sm_90a",)
    assert {r.arch for r in log.kernels} == {"sm_90a"}
    wmma = next(r for r in log.kernels if "4wmma" in r.symbol)
    assert (wmma.stack_bytes, wmma.spill_bytes, wmma.cumulative_stack_bytes) == (32, 0, 32)


def _arch_blocks(text: str) -> tuple[list[str], list[list[str]]]:
    head, blocks = [], []
    for line in text.splitlines():
        if line.startswith("#"):
            head.append(line)
        elif "bytes gmem" in line:
            blocks.append([line])
        else:
            blocks[-1].append(line)
    return head, blocks


def test_order_of_arch_blocks_does_not_matter():
    # nvcc --threads N prints each arch's block whole, in completion order
    text = CUDA13.read_text()
    head, blocks = _arch_blocks(text)
    assert len(blocks) == 3
    shuffled = "\n".join(head + blocks[2] + blocks[0] + blocks[1]) + "\n"
    def key(k):
        return (k.symbol, k.arch)

    assert sorted(ptxas.parse_ptxas(shuffled), key=key) == sorted(ptxas.parse_ptxas(text), key=key)


def test_incomplete_report_is_an_error():
    lines = CUDA13.read_text().splitlines()
    cut = [ln for ln in lines if not (ln.startswith("ptxas info    : Used") and "4096 bytes smem" in ln)]
    with pytest.raises(ptxas.PtxasParseError, match="no 'Used N registers' line"):
        ptxas.parse_ptxas("\n".join(cut))
    no_frame = [ln for ln in lines if "bytes stack frame" not in ln]
    with pytest.raises(ptxas.PtxasParseError, match="stack frame"):
        ptxas.parse_ptxas("\n".join(no_frame))


@pytest.mark.parametrize("cmd,archs", [
    ("nvcc -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=compute_90 x.cu", ("sm_80",)),
    ("nvcc -gencode arch=compute_90a,code=[sm_90a,compute_90a] x.cu", ("sm_90a",)),
    ("nvcc -gencode=arch=compute_90,code=\"sm_90,compute_90\" x.cu", ("sm_90",)),
    ("nvcc -arch=sm_89 x.cu", ("sm_89",)),
    ("nvcc --generate-code=arch=compute_80,code=[compute_80,sm_80] --generate-code=arch=compute_90,code=[sm_90] x.cu",
     ("sm_80", "sm_90")),
    ("ptxas -v -arch=sm_80 --maxrregcount=32 x.ptx", ("sm_80",)),
    ("nvcc --gpu-architecture sm_90 x.cu", ("sm_90",)),
])
def test_archs_in_command(cmd, archs):
    assert ptxas.archs_in_command(cmd) == archs


# ---- stage ---------------------------------------------------------------------------------

def make_pack(tmp_path: Path, logs=(CUDA13,), kernels=FIXTURE_KERNELS) -> Path:
    pack = tmp_path / "pack"
    (pack / "build" / "ptxas").mkdir(parents=True)
    (pack / stage.NAME).mkdir()
    for i, log in enumerate(logs):
        (pack / "build" / "ptxas" / f"obj{i}_{log.stem}.log").write_text(log.read_text())
    if kernels is not None:
        (pack / "build" / "kernels.json").write_text(json.dumps(kernels))
    return pack


def derive(pack: Path):
    return stage.derive(pack / stage.NAME, pack)


def test_stage_passes_on_clean_build(tmp_path):
    pack = make_pack(tmp_path)
    stage.run(StageContext(pack, pack / stage.NAME, tmp_path))
    out = derive(pack)
    assert out.status == PASS, out.reason
    assert out.data["archs"] == ["sm_80", "sm_89", "sm_90"]
    assert out.data["summary"] == {"rows": 9, "pass": 9, "fail": 0, "error": 0, "skipped": 0}
    # canaries are reported apart from the stage's own kernels
    assert [c["name"] for c in out.data["canaries"]] == ["canary_decoy_hmma"]
    decoy = out.data["canaries"][0]
    assert decoy["status"] == PASS and decoy["caught"] is False and decoy["tool"] == "ptxas"
    assert len(decoy["kernels"]) == 3
    assert not any(r["canary"] for r in out.data["kernels"])
    row = next(r for r in out.data["kernels"] if r["arch"] == "sm_90" and r["dtype"] == "bf16")
    assert row["occ_blocks_per_sm"] == 16 and row["occ_limiter"] == "warps"
    assert row["smem_limit_bytes"] == 232448 and row["total_smem_bytes"] == 4096
    table = json.loads((pack / "ptxas" / "table.json").read_text())
    assert len(table["rows"]) == 12 and table["columns"] == list(stage.ROW_KEYS)
    csv = (pack / "ptxas" / "table.csv").read_text().splitlines()
    assert csv[0].split(",") == list(stage.ROW_KEYS) and len(csv) == 13
    md = stage.report_md(pack / "ptxas", out)
    assert "budget spill/stack" in md and "| sm_90 | wmma m64n64w4s1 bf16 d64 | 32 |" in md
    assert "Canary kernels" in md


def test_stage_fails_on_spills_and_unknown_kernel(tmp_path):
    pack = make_pack(tmp_path, logs=(SPILL13,), kernels=FIXTURE_KERNELS[:1])
    out = derive(pack)
    assert out.status == FAIL
    rows = {(r["variant"], r["arch"]): r for r in out.data["kernels"]}
    scalar = rows[("scalar", "sm_90")]
    assert scalar["status"] == FAIL
    assert "spills 2240 B (stores 1120 + loads 1120) > budget 0 B" in scalar["reason"]
    assert "stack frame 912 B > budget 0 B" in scalar["reason"]
    stray = rows[(None, "sm_80")]
    assert stray["status"] == FAIL and stray["reason"].startswith("unknown kernel")


def test_budget_allows_declared_spills(tmp_path, monkeypatch):
    scalar = registry.get("scalar")
    patched = dataclasses.replace(scalar, budget=registry.ResourceBudget(spill_bytes=2240, stack_bytes=912))
    monkeypatch.setattr(registry, "VARIANTS", tuple(patched if v.name == "scalar" else v for v in registry.VARIANTS))
    pack = make_pack(tmp_path, logs=(SPILL13,), kernels=FIXTURE_KERNELS[:1])
    out = derive(pack)
    rows = [r for r in out.data["kernels"] if r["variant"] == "scalar"]
    assert [r["status"] for r in rows] == [PASS, PASS]
    assert rows[0]["budget_spill_bytes"] == 2240
    assert "2240/912" in stage.report_md(pack / "ptxas", out)
    assert out.status == FAIL  # still: stray_kernel is unknown


def test_shared_memory_limit_per_arch(tmp_path):
    kernels = [dict(k) for k in FIXTURE_KERNELS]
    # 97280 + 4096 static = 101376 = the sm_89 limit exactly; one byte more fails on sm_89 only
    kernels[1]["dynamic_smem_bytes"] = 97281
    out = derive(make_pack(tmp_path, kernels=kernels))
    assert out.status == FAIL
    bad = [r for r in out.data["kernels"] if r["status"] == FAIL]
    assert [(r["arch"], r["dtype"]) for r in bad] == [("sm_89", "fp16")]
    assert "shared memory 101377 B (static 4096 + dynamic 97281) > sm_89 per-block limit 101376 B" in bad[0]["reason"]
    ok80 = next(r for r in out.data["kernels"] if r["arch"] == "sm_80" and r["dtype"] == "fp16" and r["variant"] == "wmma")
    assert ok80["status"] == PASS and ok80["occ_blocks_per_sm"] == 1 and ok80["occ_limiter"] == "smem"


def test_missing_row_for_built_arch_is_an_error(tmp_path):
    text = CUDA13.read_text()
    head, blocks = _arch_blocks(text)
    # drop the bf16 wmma kernel from the sm_90 block only
    blk = blocks[2]
    i = next(j for j, ln in enumerate(blk) if WMMA_BF16 in ln and "Compiling" in ln)
    blocks[2] = blk[:i] + blk[i + 5:]
    src = tmp_path / "cut.log"
    src.write_text("\n".join(head + [ln for b in blocks for ln in b]) + "\n")
    out = derive(make_pack(tmp_path, logs=(src,)))
    assert out.status == ERROR
    assert "no ptxas report for wmma/m64n64w4s1/bf16/d64 on sm_90" in out.data["problems"]


def test_missing_inputs(tmp_path):
    pack = make_pack(tmp_path, kernels=None)
    out = derive(pack)
    assert out.status == ERROR and "build/kernels.json is missing" in out.reason
    empty = tmp_path / "empty"
    (empty / "build").mkdir(parents=True)
    (empty / "build" / "kernels.json").write_text(json.dumps(FIXTURE_KERNELS))
    out = stage.derive(empty / "ptxas", empty)
    assert out.status == ERROR and "no logs" in out.reason
    out = stage.derive(tmp_path / "none" / "ptxas", tmp_path / "none")
    assert out.status == SKIPPED and "no build" in out.reason


def test_unparseable_log_is_an_error(tmp_path):
    bad = tmp_path / "bad.log"
    bad.write_text("\n".join(ln for ln in CUDA13.read_text().splitlines() if "registers" not in ln))
    out = derive(make_pack(tmp_path, logs=(CUDA13, bad)))
    assert out.status == ERROR and "no 'Used N registers' line" in out.reason


# ---- Hopper: ptxas performance advisories (wgmma serialised, setmaxnreg ignored) -------------------

WGMMA = FIX / "wgmma_warnings.cuda13.0.rdc.sm90a.log"
MAXNREG = FIX / "setmaxnreg.cuda13.0.sm90a.log"
MAXNREG_RDC = FIX / "setmaxnreg.cuda13.0.rdc.sm90a.log"
CANARY_LOG = FIX / "canary_serialized_wgmma.cuda13.0.sm80_89_90_90a.log"
SERIALIZED = "_ZN6evpack23canary_serialized_wgmma10fwd_kernelINS0_14cfg_m64n64w4s1E6__halfLi64EEEvNS_9FwdParamsE"
CANARY_KERNEL = {"variant": "canary_serialized_wgmma", "config": "m64n64w4s1", "dtype": "fp16", "head_dim": 64,
                 "threads": 128, "dynamic_smem_bytes": 24576, "module": "evpack._canaries"}
# The kernels fixture log names no extension (its command has no -DTORCH_EXTENSION_NAME): its kernels are
# expected on the archs of the logs that name none; the canary log names _canaries.
WITH_CANARY = [dict(k, module=None) for k in FIXTURE_KERNELS] + [CANARY_KERNEL]


def test_wgmma_advisories_are_classified_and_named():
    log = ptxas.parse_ptxas_log(WGMMA.read_text())
    got = [(a.code, a.kind, a.function) for a in log.advisories]
    assert got == [
        ("C7519", ptxas.NOTE, "_Z14wgmma_no_fencePfmmf"),
        ("C7509", ptxas.WGMMA_SERIALIZED, "_Z17wgmma_extern_callPfmm"),
        ("C7520", ptxas.WGMMA_SERIALIZED, "_Z15wgmma_divergentPfmmi"),
        ("C7519", ptxas.NOTE, "_Z17wgmma_acc_touchedPfmm"),
        ("C7517", ptxas.NOTE, "_Z17wgmma_acc_touchedPfmm"),
        ("C7511", ptxas.WGMMA_SERIALIZED, "_Z17wgmma_acc_touchedPfmm"),
    ]
    assert all(a.arch == "sm_90a" for a in log.advisories)
    assert log.advisories[1].line.startswith("ptxas info    : (C7509) Potential Performance Loss: wgmma.mma_async")
    # the advisory lines are not register reports, nor warnings/errors: the resources are parsed as before
    assert len(log.kernels) == 5 and log.diagnostics == ()
    voided = {k.symbol for k in log.kernels if ptxas.advisories_for(log, k.symbol, k.arch)}
    assert voided == {"_Z17wgmma_extern_callPfmm", "_Z15wgmma_divergentPfmmi", "_Z17wgmma_acc_touchedPfmm"}
    assert not ptxas.advisories_for(log, "_Z11wgmma_cleanPfmm", "sm_90a")
    assert not ptxas.advisories_for(log, "_Z14wgmma_no_fencePfmmf", "sm_90a")  # an injected arrive is a note


@pytest.mark.parametrize("path, code", [(MAXNREG, "C7508"), (MAXNREG_RDC, "C7504")])
def test_setmaxnreg_ignored_names_no_function_so_the_whole_block_is_suspect(path, code):
    log = ptxas.parse_ptxas_log(path.read_text())
    assert {a.code for a in log.advisories} == {code}
    assert all(a.kind == ptxas.SETMAXNREG_IGNORED and a.function is None and a.arch == "sm_90a"
               for a in log.advisories)
    for k in log.kernels:  # ptxas does not say which kernel: both are flagged
        assert [a.code for a in ptxas.advisories_for(log, k.symbol, "sm_90a")][:1] == [code]
    bounded = by_key(log.kernels)[("_Z18setmaxnreg_boundedPf", "sm_90a")]
    assert bounded.registers == (10 if code == "C7504" else 240)  # whole-program build honours it: 240


def test_advisories_belong_to_the_arch_block_they_were_printed_in():
    log = ptxas.parse_ptxas_log(CANARY_LOG.read_text())
    assert log.built_archs == ("sm_80", "sm_89", "sm_90", "sm_90a") and log.extension == "_canaries"
    assert [(a.code, a.arch) for a in log.advisories] == [("C7519", "sm_90a"), ("C7518", "sm_90a")]
    assert [a.code for a in ptxas.advisories_for(log, SERIALIZED, "sm_90a")] == ["C7518"]
    assert all(not ptxas.advisories_for(log, SERIALIZED, a) for a in ("sm_80", "sm_89", "sm_90"))
    k = by_key(log.kernels)
    assert (k[(SERIALIZED, "sm_90a")].registers, k[(SERIALIZED, "sm_90a")].spill_bytes) == (100, 0)
    assert k[(SERIALIZED, "sm_80")].registers == 4  # the __trap() stub of the other archs


def test_classify_by_message_or_code():
    assert ptxas.classify_advisory("C7999", "wgmma.mma_async instructions are serialized due to x") == \
        ptxas.WGMMA_SERIALIZED
    assert ptxas.classify_advisory("C7515", "reworded") == ptxas.WGMMA_SERIALIZED
    assert ptxas.classify_advisory("C7517", "warpgroup.wait is injected") == ptxas.NOTE


def test_stage_fails_a_serialised_wgmma_kernel_and_the_canary_is_caught(tmp_path):
    pack = make_pack(tmp_path, logs=(CUDA13, CANARY_LOG), kernels=WITH_CANARY)
    out = derive(pack)
    assert out.status == PASS, out.reason  # the canary's result is not the stage's
    assert out.data["archs"] == ["sm_80", "sm_89", "sm_90", "sm_90a"]
    assert out.data["summary"]["rows"] == 9
    canary = next(c for c in out.data["canaries"] if c["name"] == "canary_serialized_wgmma")
    assert canary["caught"] is True and canary["status"] == FAIL and canary["tool"] == "ptxas"
    (row,) = canary["kernels"]
    assert row["arch"] == "sm_90a" and row["status"] == FAIL
    assert row["reason"].startswith("ptxas C7518 wgmma serialised: `ptxas info    : (C7518) Potential Performance")
    assert SERIALIZED in row["reason"] and canary["observed"].startswith("sm_90a: ptxas C7518")
    # the stubs on the extension's other archs decide nothing
    off = out.data["off_target"]
    assert sorted(r["arch"] for r in off) == ["sm_80", "sm_89", "sm_90"]
    assert all(r["status"] == SKIPPED and "not a target arch" in r["reason"] for r in off)
    md = stage.report_md(pack / "ptxas", out)
    assert "**voids the design**: `ptxas info    : (C7518)" in md and "note: `ptxas info    : (C7519)" in md


def test_stage_fails_a_registered_kernel_with_an_advisory(tmp_path, monkeypatch):
    """The same rule on a non-canary kernel: the stage fails and the reason quotes the line."""
    hopper = registry.get("canary_serialized_wgmma", include_canaries=True)
    monkeypatch.setattr(registry, "CANARIES", tuple(c for c in registry.CANARIES if c is not hopper))
    monkeypatch.setattr(registry, "VARIANTS", registry.VARIANTS + (dataclasses.replace(hopper, expect_caught_by=""),))
    pack = make_pack(tmp_path, logs=(CUDA13, CANARY_LOG), kernels=WITH_CANARY)
    out = derive(pack)
    assert out.status == FAIL
    assert "canary_serialized_wgmma/m64n64w4s1/fp16/d64 on sm_90a: ptxas C7518 wgmma serialised" in out.reason


def test_a_variant_whose_archs_were_not_compiled_is_an_error(tmp_path):
    """canary_serialized_wgmma targets 90a; an extension built without it holds stubs only."""
    head, blocks = _arch_blocks(CANARY_LOG.read_text())
    head = [head[0].replace(" -gencode=arch=compute_90a,code=sm_90a", "")]  # the command without sm_90a
    kept = [ln for b in blocks[:3] for ln in b if "(C75" not in ln]  # the sm_90a block's advisories precede it
    src = tmp_path / "no90a.log"
    src.write_text("\n".join(head + kept) + "\n")
    out = derive(make_pack(tmp_path, logs=(CUDA13, src), kernels=WITH_CANARY))
    assert out.status == ERROR
    assert any("targets 90a but its extension was compiled only for sm_80, sm_89, sm_90" in p
               for p in out.data["problems"])


def test_canary_matrix_calls_the_ptxas_gate_live_without_a_gpu(tmp_path):
    """A pack whose GPU stages were skipped: the build-time canary is still caught, by name."""
    from evpack import runner
    from evpack.stages import canaries

    pack = make_pack(tmp_path, logs=(CUDA13, CANARY_LOG), kernels=WITH_CANARY)
    (pack / "ptxas" / "runner.json").write_text(json.dumps({"stage": "ptxas", "returncode": 0, "skipped": None,
                                                            "timed_out": False, "exception": None}))
    for name in ("sass", "tensor_proof", "sanitize", "correctness", "stability"):
        runner.record_skip(pack / name, name, "no CUDA device: torch.cuda.is_available() is False")
    (pack / "canaries").mkdir()
    canaries.run(StageContext(pack, pack / "canaries", tmp_path))
    out = canaries.derive(pack / "canaries", pack)
    assert out.status == SKIPPED
    n = len(registry.CANARIES)
    assert out.reason == f"1/{n} canaries caught (canary_serialized_wgmma by ptxas); the rest were not run"
    row = next(r for r in out.data["matrix"] if r["canary"] == "canary_serialized_wgmma")
    assert row["stage"] == "ptxas" and row["caught"] is True and "C7518" in row["observed"]
    # the same pack without the serialisation line: the gate did not fire, so it is not live
    quiet = tmp_path / "quiet.log"
    quiet.write_text("\n".join(ln for ln in CANARY_LOG.read_text().splitlines() if "(C7518)" not in ln) + "\n")
    for f in (pack / "build" / "ptxas").glob("*canary_serialized*"):
        f.write_text(quiet.read_text())
    out = canaries.derive(pack / "canaries", pack)
    assert out.status == ERROR and "gate not live: ptxas did not catch canary_serialized_wgmma" in out.reason


def test_a_hopper_object_compiled_for_sm90a_alone_needs_no_other_kernel_on_sm90a(tmp_path):
    """One extension whose Hopper-only object is built for sm_90a alone and the rest for 80/89/90 (a
    per-object arch choice): the others are not required on sm_90a, the Hopper kernel on nothing else."""
    head, blocks = _arch_blocks(CUDA13.read_text())
    main = tmp_path / "main.log"
    main.write_text("\n".join([head[0] + " -DTORCH_EXTENSION_NAME=_C"] + [ln for b in blocks for ln in b]) + "\n")
    text = CANARY_LOG.read_text().splitlines()
    cmd = text[0].replace("_canaries", "_C")
    for a in ("80", "89", "90"):
        cmd = cmd.replace(f" -gencode=arch=compute_{a},code=sm_{a}", "")
    start = next(i for i, ln in enumerate(text) if "(C7519)" in ln)  # the sm_90a block starts with its advisories
    hopper = tmp_path / "hopper.log"
    hopper.write_text("\n".join([cmd] + text[start:]) + "\n")
    kernels = [dict(k, module="evpack._C") for k in WITH_CANARY]
    out = derive(make_pack(tmp_path, logs=(main, hopper), kernels=kernels))
    assert out.status == PASS, out.reason
    assert out.data["problems"] == [] and "off_target" not in out.data
    assert out.data["archs"] == ["sm_80", "sm_89", "sm_90", "sm_90a"]
    assert next(c for c in out.data["canaries"] if c["name"] == "canary_serialized_wgmma")["caught"] is True


# ---- a log that reports one thing twice, or an advisory outside any arch block -------------------------------
# Real fixture logs edited the way a forger would: a second "Function properties" block for a function already
# reported on that arch, or advisory lines moved from the top of their arch block to the end of the log.

def _second_properties_block(text: str, symbol: str, arch: str, frame: str) -> str:
    """`text` with a second properties block (frame line `frame`) for `symbol`, after its entry's register report
    on `arch` (the entry's own block, with its real frame line, stays)."""
    lines = text.splitlines()
    entry = lines.index(f"ptxas info    : Compiling entry function '{symbol}' for '{arch}'")
    used = next(i for i in range(entry, len(lines)) if lines[i].startswith("ptxas info    : Used"))
    lines[used + 1:used + 1] = [f"ptxas info    : Function properties for {symbol}", frame]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("frame", ["    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads",
                                   "    912 bytes stack frame, 1120 bytes spill stores, 1120 bytes spill loads"],
                         ids=["clean_copy", "same_copy"])
def test_a_second_properties_block_for_a_function_on_an_arch_is_an_error(frame):
    """The spilling scalar kernel of the spill fixture (912 B stack, 1120 + 1120 B of spills on sm_90) with a second
    block, clean or the same: which one ptxas meant cannot be told, so the log does not parse (before, the last won)."""
    text = SPILL13.read_text()
    assert by_key(ptxas.parse_ptxas(text))[(SCALAR, "sm_90")].spill_bytes == 2240
    with pytest.raises(ptxas.PtxasParseError, match=f"two 'Function properties' blocks for {SCALAR} on sm_90"):
        ptxas.parse_ptxas_log(_second_properties_block(text, SCALAR, "sm_90", frame))


def test_a_device_functions_properties_block_repeated_on_an_arch_is_an_error():
    """The non-inlined device function of the spill fixture has one block per arch (sm_80 and sm_90: that is not a
    repeat); a copy of its sm_90 block is."""
    text = SPILL13.read_text()
    helper = "ptxas info    : Function properties for _ZN6evpack6helperEPKfi"
    assert text.count(helper) == 2
    lines = text.splitlines()
    at = len(lines) - 1 - lines[::-1].index(helper)
    with pytest.raises(ptxas.PtxasParseError, match="two 'Function properties' blocks for _ZN6evpack6helperEPKfi"):
        ptxas.parse_ptxas_log("\n".join(lines[:at + 2] + lines[at:]) + "\n")


def _advisories_at_the_end(text: str, codes: tuple[str, ...] = ("C75",)) -> str:
    lines = text.splitlines()
    moved = [ln for ln in lines if any(f"({c}" in ln for c in codes)]
    assert moved
    return "\n".join([ln for ln in lines if ln not in moved] + moved) + "\n"


def test_an_advisory_after_the_last_entry_concerns_the_kernel_it_names_on_every_arch():
    """The canary fixture's C7519 / C7518 lines moved from the top of the sm_90a block to the end of the log: no
    arch block, so the serialised kernel is voided on every arch it was compiled for (before: on none)."""
    log = ptxas.parse_ptxas_log(_advisories_at_the_end(CANARY_LOG.read_text()))
    assert [(a.code, a.arch, a.function) for a in log.advisories] == [("C7519", None, SERIALIZED),
                                                                       ("C7518", None, SERIALIZED)]
    for arch in ("sm_80", "sm_89", "sm_90", "sm_90a"):
        assert [a.code for a in ptxas.advisories_for(log, SERIALIZED, arch)] == ["C7518"]
    assert ptxas.unattributed_advisories(log) == []


def test_advisories_after_the_last_entry_are_given_to_the_kernels_they_name():
    """The wgmma fixture with every advisory moved to the end: the same three kernels are voided as when the
    advisories head their block; the clean kernel and the one with only an injected-arrive note are not."""
    log = ptxas.parse_ptxas_log(_advisories_at_the_end(WGMMA.read_text()))
    assert all(a.arch is None for a in log.advisories) and len(log.advisories) == 6
    voided = {k.symbol for k in log.kernels if ptxas.advisories_for(log, k.symbol, k.arch)}
    assert voided == {"_Z17wgmma_extern_callPfmm", "_Z15wgmma_divergentPfmmi", "_Z17wgmma_acc_touchedPfmm"}
    assert ptxas.unattributed_advisories(log) == []


@pytest.mark.parametrize("path, code", [(MAXNREG, "C7508"), (MAXNREG_RDC, "C7504")])
def test_an_advisory_after_the_last_entry_that_names_no_kernel_is_returned_not_dropped(path, code):
    """setmaxnreg-ignored lines name no function: at the top of a block they void every kernel of it; moved to the
    end of the log they can be pinned on no kernel, and unattributed_advisories returns them."""
    log = ptxas.parse_ptxas_log(_advisories_at_the_end(path.read_text()))
    assert all(not ptxas.advisories_for(log, k.symbol, k.arch) for k in log.kernels)
    lost = ptxas.unattributed_advisories(log)
    assert lost and {a.code for a in lost} == {code} and all(a.function is None for a in lost)


def test_a_trailing_note_is_not_a_problem():
    """An injected warpgroup.arrive (C7519) is a note wherever it is printed."""
    log = ptxas.parse_ptxas_log(_advisories_at_the_end(CANARY_LOG.read_text(), codes=("C7519",)))
    assert [(a.code, a.arch) for a in log.advisories] == [("C7518", "sm_90a"), ("C7519", None)]
    assert ptxas.unattributed_advisories(log) == []


def test_stage_fails_a_kernel_named_by_a_trailing_advisory_and_reports_one_that_names_none(tmp_path):
    """The canary with its advisories at the end of its log is still caught, the reason saying where the line was;
    a setmaxnreg-ignored line at the end of the kernels' log concerns no kernel: an error of the stage."""
    canary = tmp_path / "canary_trailing.log"
    canary.write_text(_advisories_at_the_end(CANARY_LOG.read_text()))
    out = derive(make_pack(tmp_path, logs=(CUDA13, canary), kernels=WITH_CANARY))
    assert out.status == PASS, out.reason  # the canary's result is not the stage's
    (row,) = next(c for c in out.data["canaries"] if c["name"] == "canary_serialized_wgmma")["kernels"]
    assert row["status"] == FAIL and row["reason"].startswith(
        "ptxas C7518 wgmma serialised (printed after the log's last entry: every arch of this kernel): `ptxas info")
    lost = tmp_path / "kernels_trailing.log"
    lost.write_text(CUDA13.read_text() + MAXNREG.read_text().splitlines()[1] + "\n")
    out = derive(make_pack(tmp_path / "b", logs=(lost,)))
    assert out.status == ERROR
    assert out.data["problems"] == ["obj0_kernels_trailing.log: ptxas advisory printed after the last entry concerns "
                                    "no kernel of the log: `ptxas info    : (C7508) Potential Performance Loss: "
                                    "'setmaxnreg' ignored; unable to determine register count at entry.`"]
