"""SASS parser and stage, on real `cuobjdump --dump-sass` output (tests/fixtures/sass, see fixtures/README.md)."""
from __future__ import annotations

import dataclasses
import gzip
import json
import re
from pathlib import Path

import pytest

from evpack import binary, registry, tools
from evpack.parsers import sass
from evpack.stages import sass as stage
from evpack.stages.base import ERROR, FAIL, PASS, SKIPPED, StageContext

FIX = Path(__file__).parent / "fixtures" / "sass"
MULTI = FIX / "kernels.sm80_89_90.sass.gz"  # kernels.cu for sm_80, sm_89, sm_90 (full dump, gzip)
EXTRA = FIX / "extra.sm90a.sass"  # extra.cu for sm_90a: HGMMA, and an HMMA kernel with STL/LDL

WMMA_F16 = "_ZN6evpack4wmma10fwd_kernelINS0_14cfg_m64n64w4s1E6__halfLi64EEEvNS_9FwdParamsE"
SCALAR = "_ZN6evpack6scalar10fwd_kernelINS0_14cfg_m64n64w2s1E6__halfLi64EEEvNS_9FwdParamsE"
DECOY = "_ZN6evpack17canary_decoy_hmma10fwd_kernelINS0_14cfg_m64n64w2s1E6__halfLi64EEEvNS_9FwdParamsE"
WMMA_LOCAL = "_ZN6evpack4wmma10fwd_kernelINS0_14cfg_m32n64w2s1E6__halfLi64EEEvNS_9FwdParamsE"
PROBE = "_ZN6evpack11hgmma_probe10fwd_kernelINS0_14cfg_m64n64w4s1E6__halfLi64EEEvNS_9FwdParamsE"


def multi_text() -> str:
    with gzip.open(MULTI, "rt", encoding="utf-8") as f:
        return f.read()


def fns_by_key(text: str) -> dict:
    return {(f.symbol, f.arch): f for f in sass.parse_sass(text)}


def grep_count(text: str, symbol: str, arch: str, pattern: str) -> int:
    """Independent count: lines of one function's section whose instruction matches `pattern`."""
    sec = text.split(f"arch = {arch}\n", 1)[1].split("arch = ", 1)[0]
    body = sec.split(f"Function : {symbol}\n", 1)[1].split("Function : ", 1)[0]
    return len(re.findall(pattern, body, flags=re.M))


# ---- parser ------------------------------------------------------------------------------

def test_multi_arch_functions():
    text = multi_text()
    fns = sass.parse_sass(text)
    assert [f.arch for f in fns] == ["sm_80"] * 4 + ["sm_89"] * 4 + ["sm_90"] * 4
    assert {f.symbol for f in fns} == {WMMA_F16, SCALAR, DECOY,
                                      WMMA_F16.replace("6__half", "13__nv_bfloat16")}
    # every instruction line of the dump lands in exactly one function
    assert sum(len(f.instructions) for f in fns) == len(re.findall(r"^\s+/\*[0-9a-f]{4}\*/", text, flags=re.M))


def test_histograms_match_an_independent_count():
    text = multi_text()
    k = fns_by_key(text)
    for arch in ("sm_80", "sm_89", "sm_90"):
        w = k[(WMMA_F16, arch)]
        assert w.histogram()["HMMA"] == grep_count(text, WMMA_F16, arch, r"\*/\s+HMMA\.") == 8
        assert w.full_forms() == {"HMMA.16816.F32": 8}
        assert w.histogram()["LDL"] == w.histogram()["STL"] == 0
        s = k[(SCALAR, arch)]
        assert s.full_forms() == {}
        assert s.histogram()["FFMA"] == grep_count(text, SCALAR, arch, r"\*/\s+(?:@!?P\d\s+)?FFMA[ .]")
        assert s.histogram()["MUFU"] == grep_count(text, SCALAR, arch, r"\*/\s+(?:@!?P\d\s+)?MUFU\.")
        assert k[(DECOY, arch)].full_forms() == {"HMMA.16816.F32": 2}
    bf = k[(WMMA_F16.replace("6__half", "13__nv_bfloat16"), "sm_90")]
    assert bf.full_forms() == {"HMMA.16816.F32.BF16": 8}


def test_hfma2_mma_is_not_tensor_math():
    # the scalar kernel's sm_90 SASS really contains HFMA2.MMA (a CUDA-core instruction)
    text = multi_text()
    s = fns_by_key(text)[(SCALAR, "sm_90")]
    assert s.count_full("HFMA2.MMA") == 1 == grep_count(text, SCALAR, "sm_90", r"HFMA2\.MMA")
    assert s.histogram()["HFMA2"] >= 1
    assert not sass.is_tensor_math("HFMA2.MMA")
    assert s.full_forms() == {} and s.first() == []
    assert "MMA" in "HFMA2.MMA"  # why substring matching would be wrong


def test_predicates_addresses_and_text():
    k = fns_by_key(multi_text())
    s = k[(SCALAR, "sm_80")]
    preds = [i for i in s.instructions if i.predicate]
    assert preds and all(re.fullmatch(r"@!?P\d|@!?PT", i.predicate) for i in preds)
    assert all(not i.opcode.startswith("@") for i in s.instructions)
    nop = next(i for i in s.instructions if i.opcode == "NOP")
    assert nop.text == "NOP ;"
    first = k[(WMMA_F16, "sm_90")].first()
    assert [(f"{i.address:04x}", i.text) for i in first] == [
        ("0260", "HMMA.16816.F32 R12, R8.reuse, R12, RZ ;"),
        ("0270", "HMMA.16816.F32 R8, R8, R4, RZ ;"),
        ("02e0", "HMMA.16816.F32 R12, R4.reuse, R20, R12 ;"),
    ]


def test_hgmma_and_local_memory_on_sm90a():
    k = fns_by_key(EXTRA.read_text())
    assert set(k) == {(WMMA_LOCAL, "sm_90a"), (PROBE, "sm_90a")}
    probe = k[(PROBE, "sm_90a")]
    assert probe.full_forms() == {"HGMMA.64x64x16.F32": 1}
    assert probe.first()[0].text == "HGMMA.64x64x16.F32 R24, gdesc[UR4], RZ, !UPT, gsb0 ;"
    loc = k[(WMMA_LOCAL, "sm_90a")].histogram()
    assert loc["HMMA"] == 2 and loc["STL"] == 2 and loc["LDL"] == 1


@pytest.mark.parametrize("opcode,shape", [
    ("HMMA.16816.F32", (16, 8, 16)), ("HMMA.16816.F32.BF16", (16, 8, 16)), ("HMMA.1688.F32", (16, 8, 8)),
    ("HMMA.884.F32.F32", (8, 8, 4)), ("IMMA.16832.S8.S8", (16, 8, 32)), ("HGMMA.64x64x16.F32", (64, 64, 16)),
    ("HGMMA.64x128x16.F32.BF16", (64, 128, 16)), ("HFMA2.MMA", None), ("FFMA", None), ("HMMA", None),
])
def test_mma_shape(opcode, shape):
    assert sass.mma_shape(opcode) == shape


def test_exact_tensor_opcodes():
    for op in ("HMMA.16816.F32", "HGMMA.64x64x16.F32", "IMMA.16832.S8.S8", "QGMMA.64x64x32.F32.E4M3.E4M3"):
        assert sass.is_tensor_math(op)
    for op in ("HFMA2.MMA", "HFMA2", "FFMA", "UHMMA_LOOKALIKE", "LDSM.16.M88.4", "MMA"):
        assert not sass.is_tensor_math(op)


def test_parse_errors():
    with pytest.raises(sass.SassParseError):
        sass.parse_sass("        /*0000*/                   MOV R1, c[0x0][0x28] ;\n")
    assert sass.parse_sass("") == []


def test_a_parse_kept_for_the_next_caller_is_of_the_same_text_only():
    """parse_sass keeps its last results by the text's SHA-256: the same text gives the same functions in a list of
    the caller's own, and a text that differs by one byte (an opcode edited in place) is parsed again."""
    text = "\n".join(["arch = sm_90", "        Function : k", "        /*0000*/                   HMMA.16816.F32 R0, R2, R4, R0 ;",
                      "                                                                 /* 0x000fe200078e00ff */", ""])
    first = sass.parse_sass(text)
    first.clear()  # the caller's list: the kept parse is not changed through it
    again = sass.parse_sass(text)
    assert [i.opcode for i in again[0].instructions] == ["HMMA.16816.F32"]
    edited = sass.parse_sass(text.replace("HMMA.16816.F32", "HMMA.16816.F16"))
    assert [i.opcode for i in edited[0].instructions] == ["HMMA.16816.F16"]
    assert edited[0].full_forms() == {"HMMA.16816.F16": 1} and edited[0].histogram() == {"HMMA": 1}


# ---- stage (derive on recorded files; run() with the real tool in test_gates_build) --------------

FIXTURE_KERNELS = [
    {"variant": "scalar", "config": "m64n64w2s1", "dtype": "fp16", "head_dim": 64, "threads": 64,
     "dynamic_smem_bytes": 0, "module": "evpack._C"},
    {"variant": "wmma", "config": "m64n64w4s1", "dtype": "fp16", "head_dim": 64, "threads": 128,
     "dynamic_smem_bytes": 0, "module": "evpack._C"},
    {"variant": "wmma", "config": "m64n64w4s1", "dtype": "bf16", "head_dim": 64, "threads": 128,
     "dynamic_smem_bytes": 0, "module": "evpack._C"},
    {"variant": "canary_decoy_hmma", "config": "m64n64w2s1", "dtype": "fp16", "head_dim": 64, "threads": 64,
     "dynamic_smem_bytes": 0, "module": "evpack._C"},
]


def recorded_pack(tmp_path: Path, dump: str, kernels=FIXTURE_KERNELS, sha_seen: str | None = None,
                  gz: bool = False) -> Path:
    """A pack as the build and SASS stages leave it, with a fixture dump standing in for cuobjdump's output."""
    pack = tmp_path / "pack"
    (pack / "build").mkdir(parents=True)
    (pack / "sass").mkdir()
    so = tmp_path / "_C.so"
    so.write_bytes(b"stand-in for the built extension")
    sha = binary.sha256_file(so)
    (pack / "build" / "binary.json").write_text(json.dumps({"module": "evpack._C", "path": str(so), "sha256": sha}))
    (pack / "build" / "kernels.json").write_text(json.dumps(kernels))
    (pack / "sass" / "binary.json").write_text(json.dumps({"module": "evpack._C", "path": str(so),
                                                           "sha256": sha_seen or sha}))
    name = "evpack._C.sass.gz" if gz else "evpack._C.sass"
    (pack / "sass" / name).write_bytes(gzip.compress(dump.encode(), mtime=0) if gz else dump.encode())
    run = {"schema_version": 1, "tools": {"cuobjdump": "cuobjdump"}, "problems": [], "binaries": [
        {"module": "evpack._C", "path": str(so), "build_json": "build/binary.json", "build_sha256": sha,
         "sha256": sha_seen or sha, "dump": name, "dump_bytes": len(dump), "command": "cuobjdump",
         "rc": 0}]}
    (pack / "sass" / "run.json").write_text(json.dumps(run))
    return pack


def derive(pack: Path):
    return stage.derive(pack / "sass", pack)


@pytest.mark.parametrize("gz", [True, False])
def test_stage_passes_and_reports(tmp_path, gz):
    out = derive(recorded_pack(tmp_path, multi_text(), gz=gz))
    assert out.status == PASS, out.reason
    assert out.data["summary"]["rows"] == 9 and out.data["report_arch"] == "sm_90"
    (dec,) = out.data["canaries"]
    assert dec["name"] == "canary_decoy_hmma" and dec["tool"] == "sass" and dec["caught"] is False
    assert dec["status"] == PASS and [r["hmma"] for r in dec["kernels"]] == [2, 2, 2]
    scalar90 = next(r for r in out.data["kernels"] if r["variant"] == "scalar" and r["arch"] == "sm_90")
    assert (scalar90["tensor_math"], scalar90["hmma"], scalar90["hfma2_mma"]) == (0, 0, 1)
    md = stage.report_md(tmp_path, out)
    assert "/*0260*/ HMMA.16816.F32 R12, R8.reuse, R12, RZ ;" in md
    assert "| scalar m64n64w2s1 fp16 d64 | scalar | 232 | 0 | 0 | 1 |" in md


def test_tensor_kernel_with_local_memory_fails_and_unknown_kernel_fails(tmp_path):
    kernels = [{"variant": "wmma", "config": "m32n64w2s1", "dtype": "fp16", "head_dim": 64, "threads": 64,
                "dynamic_smem_bytes": 0, "module": "evpack._C"}]
    out = derive(recorded_pack(tmp_path, EXTRA.read_text(), kernels=kernels))
    assert out.status == FAIL
    rows = {r["symbol"]: r for r in out.data["kernels"]}
    assert rows[WMMA_LOCAL]["status"] == FAIL and rows[WMMA_LOCAL]["reason"] == "local-memory traffic: LDL x1, STL x2"
    assert rows[PROBE]["status"] == FAIL and "unknown kernel" in rows[PROBE]["reason"]


def test_hgmma_counts_for_a_registered_tensor_variant(tmp_path, monkeypatch):
    probe = dataclasses.replace(registry.get("wmma"), name="hgmma_probe", configs=(registry._cfg(64, 64, 4),))
    monkeypatch.setattr(registry, "VARIANTS", registry.VARIANTS + (probe,))
    kernels = [{"variant": "hgmma_probe", "config": "m64n64w4s1", "dtype": "fp16", "head_dim": 64, "threads": 128,
                "dynamic_smem_bytes": 0, "module": "evpack._C"}]
    text = EXTRA.read_text()
    out = derive(recorded_pack(tmp_path, text, kernels=kernels))
    rows = {r["symbol"]: r for r in out.data["kernels"]}
    assert rows[PROBE]["status"] == PASS and rows[PROBE]["hgmma"] == 1
    assert rows[PROBE]["tensor_forms"] == {"HGMMA.64x64x16.F32": 1}
    assert out.data["report_arch"] == "sm_90a"


def test_scalar_label_on_tensor_code_fails(tmp_path, monkeypatch):
    # label wmma 'scalar': its HMMA must now fail the control side of the proof
    flipped = tuple(dataclasses.replace(v, kind="scalar") if v.name == "wmma" else v for v in registry.VARIANTS)
    monkeypatch.setattr(registry, "VARIANTS", flipped)
    out = derive(recorded_pack(tmp_path, multi_text()))
    assert out.status == FAIL
    bad = [r for r in out.data["kernels"] if r["status"] == FAIL]
    assert len(bad) == 6 and all(r["variant"] == "wmma" for r in bad)
    assert "scalar variant with tensor-core math: HMMA.16816.F32 x8" in {r["reason"] for r in bad}


def test_binary_mismatch_fails_with_both_digests(tmp_path):
    out = derive(recorded_pack(tmp_path, multi_text(), sha_seen="0" * 64))
    assert out.status == FAIL
    assert "binary mismatch" in out.reason and "0" * 64 in out.reason
    assert json.loads((tmp_path / "pack" / "build" / "binary.json").read_text())["sha256"] in out.reason


def test_missing_kernel_on_an_arch_is_an_error(tmp_path):
    text = multi_text()
    sm90 = text.index("arch = sm_90")
    start = text.index(f"Function : {WMMA_F16}", sm90)
    end = text.index("Function : ", start + 20)
    cut = text[:start] + text[end:]
    out = derive(recorded_pack(tmp_path, cut))
    assert out.status == ERROR
    assert "wmma/m64n64w4s1/fp16/d64 is not in the evpack._C SASS for sm_90" in out.data["problems"]


def test_no_build_is_skipped_and_no_tool_is_an_error(tmp_path, monkeypatch):
    out = stage.derive(tmp_path / "p" / "sass", tmp_path / "p")
    assert out.status == SKIPPED
    pack = recorded_pack(tmp_path, multi_text())
    for f in (pack / "sass").iterdir():
        f.unlink()
    monkeypatch.setattr(tools, "find_tool", lambda name: None)
    stage.run(StageContext(pack, pack / "sass", tmp_path))
    out = derive(pack)
    assert out.status == ERROR and "cuobjdump not found" in out.reason
    (pack / "sass" / "run.json").unlink()
    assert derive(pack).status == ERROR


def test_empty_dump_is_an_error(tmp_path):
    out = derive(recorded_pack(tmp_path, "\ncuobjdump info    : File '_C.so' does not contain device code\n"))
    assert out.status == ERROR and "no functions" in out.reason


# ---- Hopper-only variants: HGMMA on sm_90a, stubs elsewhere --------------------------------------

CANARY_DUMP = FIX / "canary_serialized_wgmma.sm80_89_90_90a.sass.gz"  # the registry's canary, 4 archs
SERIALIZED = "_ZN6evpack23canary_serialized_wgmma10fwd_kernelINS0_14cfg_m64n64w4s1E6__halfLi64EEEvNS_9FwdParamsE"
CANARY_KERNEL = {"variant": "canary_serialized_wgmma", "config": "m64n64w4s1", "dtype": "fp16", "head_dim": 64,
                 "threads": 128, "dynamic_smem_bytes": 24576, "module": "evpack._C"}


def canary_text() -> str:
    with gzip.open(CANARY_DUMP, "rt", encoding="utf-8") as f:
        return f.read()


def test_wgmma_kernel_has_hgmma_on_sm90a_only():
    text = canary_text()
    fns = fns_by_key(text)
    assert sorted(a for s, a in fns if s == SERIALIZED) == ["sm_80", "sm_89", "sm_90", "sm_90a"]
    hopper = fns[(SERIALIZED, "sm_90a")]
    hist = hopper.histogram()
    assert hist["HGMMA"] == grep_count(text, SERIALIZED, "sm_90a", r"^\s*/\*[0-9a-f]+\*/\s+HGMMA\.") == 8
    assert hist.get("HMMA", 0) == 0 and hist.get("LDL", 0) == hist.get("STL", 0) == 0
    assert hopper.full_forms() == {"HGMMA.64x64x16.F32": 8}  # 4 k-slices of Q.K^T + 4 of P.V
    for arch in ("sm_80", "sm_89", "sm_90"):  # the __trap() stub
        stub = fns[(SERIALIZED, arch)]
        assert not stub.full_forms() and "BPT" in stub.histogram()


def test_stage_counts_hgmma_and_sets_stubs_aside(tmp_path):
    out = derive(recorded_pack(tmp_path, canary_text(), kernels=[CANARY_KERNEL]))
    (c,) = out.data["canaries"]
    (row,) = c["kernels"]
    assert row["arch"] == "sm_90a" and row["status"] == PASS, row["reason"]
    assert (row["hgmma"], row["hmma"]) == (8, 0)
    off = out.data["off_target"]
    assert sorted(r["arch"] for r in off) == ["sm_80", "sm_89", "sm_90"]
    assert all(r["status"] == SKIPPED for r in off)
    assert out.data["problems"] == ["no (non-canary) kernels in the SASS"]  # this dump holds the canary only
    md = stage.report_md(tmp_path, out)
    assert "Opcode counts on sm_90a" in md and "| canary_serialized_wgmma m64n64w4s1 fp16 d64 | tensor (canary) |" in md
    assert "HGMMA.64x64x16.F32" in md


def test_hopper_only_tensor_variant_needs_hgmma_not_hmma(tmp_path, monkeypatch):
    """Declare wmma and the probe Hopper-only: on sm_90a the probe (HGMMA) passes, wmma (HMMA only) fails."""
    probe = dataclasses.replace(registry.get("wmma"), name="hgmma_probe", configs=(registry._cfg(64, 64, 4),),
                                archs=("90a",))
    hopper_wmma = dataclasses.replace(registry.get("wmma"), archs=("90a",))
    monkeypatch.setattr(registry, "VARIANTS", tuple(hopper_wmma if v.name == "wmma" else v
                                                    for v in registry.VARIANTS) + (probe,))
    kernels = [{"variant": "hgmma_probe", "config": "m64n64w4s1", "dtype": "fp16", "head_dim": 64, "threads": 128,
                "dynamic_smem_bytes": 0, "module": "evpack._C"},
               {"variant": "wmma", "config": "m32n64w2s1", "dtype": "fp16", "head_dim": 64, "threads": 64,
                "dynamic_smem_bytes": 0, "module": "evpack._C"}]
    out = derive(recorded_pack(tmp_path, EXTRA.read_text(), kernels=kernels))
    rows = {r["symbol"]: r for r in out.data["kernels"]}
    assert rows[PROBE]["status"] == PASS and rows[PROBE]["hgmma"] == 1
    bad = rows[WMMA_LOCAL]
    assert bad["status"] == FAIL
    assert bad["reason"].startswith(f"wmma is built for 90a only: no HGMMA on sm_90a (HMMA x{bad['hmma']}, HGMMA x0)")
    assert bad["hmma"] > 0


def test_a_hopper_variant_missing_its_arch_is_an_error(tmp_path):
    text = canary_text()
    cut = text[:text.index("arch = sm_90a")]  # the dump without its sm_90a section
    out = derive(recorded_pack(tmp_path, cut, kernels=[CANARY_KERNEL]))
    assert out.status == ERROR
    assert any("targets 90a but the evpack._C SASS holds only sm_80, sm_89, sm_90" in p for p in out.data["problems"])


def test_sm90a_only_in_one_variant_requires_nothing_of_the_others(tmp_path):
    """The dump of one extension whose Hopper-only kernel exists on sm_90a alone (per-object archs)."""
    hopper = canary_text()
    sm90a = hopper[hopper.index("arch = sm_90a"):]
    kernels = [dict(k) for k in FIXTURE_KERNELS] + [CANARY_KERNEL]
    out = derive(recorded_pack(tmp_path, multi_text() + "\n" + sm90a, kernels=kernels))
    assert out.status == PASS, out.reason
    assert out.data["problems"] == [] and "off_target" not in out.data
    (c,) = [c for c in out.data["canaries"] if c["name"] == "canary_serialized_wgmma"]
    assert [(r["arch"], r["hgmma"]) for r in c["kernels"]] == [("sm_90a", 8)]


# ---- accumulator form: a tensor variant's HMMA/HGMMA must accumulate in F32 -------------------------

FP16_ACCUM_DUMP = FIX / "canary_fp16_accum.sm80_89_90.sass.gz"  # the registry's canary, 3 archs
ACCUM = FIX / "accum.sm90a.sass"  # accum.cu: wgmma with fp16 and with fp32 accumulators
FP16_ACCUM = "_ZN6evpack17canary_fp16_accum10fwd_kernelINS0_14cfg_m64n64w4s1E6__halfLi64EEEvNS_9FwdParamsE"
FP16_ACCUM_KERNEL = {"variant": "canary_fp16_accum", "config": "m64n64w4s1", "dtype": "fp16", "head_dim": 64,
                     "threads": 128, "dynamic_smem_bytes": 27648, "module": "evpack._C"}
PROBE_BF16 = PROBE.replace("6__half", "13__nv_bfloat16")


def fp16_accum_text() -> str:
    with gzip.open(FP16_ACCUM_DUMP, "rt", encoding="utf-8") as f:
        return f.read()


@pytest.mark.parametrize("opcode,field", [
    ("HMMA.16816.F32", "F32"), ("HMMA.16816.F32.BF16", "F32"), ("HMMA.16816.F16", "F16"),
    ("HGMMA.64x64x16.F16", "F16"), ("HGMMA.64x128x16.F32.BF16", "F32"), ("HMMA.1684.F32.TF32", "F32"),
    ("HMMA", None), ("IMMA.16832.S8.S8", None), ("HFMA2.MMA", None), ("FFMA", None),
])
def test_accumulator_field(opcode, field):
    assert sass.accumulator(opcode) == field


def test_the_fp16_accum_canary_holds_f16_accumulators_on_every_arch():
    text = fp16_accum_text()
    fns = fns_by_key(text)
    assert sorted(a for s, a in fns if s == FP16_ACCUM) == ["sm_80", "sm_89", "sm_90"]
    for arch in ("sm_80", "sm_89", "sm_90"):
        fn = fns[(FP16_ACCUM, arch)]
        # Q.K^T: 4 key blocks x 2 n-atoms x 4 k-steps, the first k-step with fp16 C/D; P.V: 4 x 4 x 2, fp32
        assert fn.full_forms() == {"HMMA.16816.F16": 8, "HMMA.16816.F32": 24 + 32}
        assert grep_count(text, FP16_ACCUM, arch, r"\*/\s+HMMA\.16816\.F16 ") == 8
        assert stage.low_precision_accumulation(fn).startswith("accumulates in fp16, not fp32: HMMA.16816.F16 x8 in ")


def test_honest_tensor_kernels_of_the_fixtures_accumulate_in_f32():
    dumps = [multi_text(), EXTRA.read_text(), canary_text()]
    tensor = [f for text in dumps for f in sass.parse_sass(text) if f.full_forms()]
    assert len(tensor) >= 10
    assert all(stage.low_precision_accumulation(f) == "" for f in tensor)


def test_stage_fails_fp16_accumulation_naming_the_function_and_the_instruction(tmp_path):
    out = derive(recorded_pack(tmp_path, fp16_accum_text(), kernels=[FP16_ACCUM_KERNEL]))
    (c,) = out.data["canaries"]
    assert c["name"] == "canary_fp16_accum" and c["tool"] == "sass" and c["caught"] is True
    assert registry.get("canary_fp16_accum", include_canaries=True).expect_caught_by == "sass"
    assert [r["status"] for r in c["kernels"]] == [FAIL] * 3
    for r in c["kernels"]:
        first = next(i for i in fns_by_key(fp16_accum_text())[(FP16_ACCUM, r["arch"])].instructions
                     if i.opcode == "HMMA.16816.F16")
        assert (f"accumulates in fp16, not fp32: HMMA.16816.F16 x8 in {FP16_ACCUM} "
                f"(first /*{first.address:04x}*/ {first.text})") == r["reason"]
    assert c["observed"].startswith("sm_80: accumulates in fp16")


def test_hgmma_with_fp16_accumulators_fails_and_fp32_passes(tmp_path, monkeypatch):
    probe = dataclasses.replace(registry.get("wmma"), name="hgmma_probe", configs=(registry._cfg(64, 64, 4),),
                                head_dims=(64,))
    monkeypatch.setattr(registry, "VARIANTS", registry.VARIANTS + (probe,))
    kernels = [{"variant": "hgmma_probe", "config": "m64n64w4s1", "dtype": dt, "head_dim": 64, "threads": 128,
                "dynamic_smem_bytes": 0, "module": "evpack._C"} for dt in ("fp16", "bf16")]
    out = derive(recorded_pack(tmp_path, ACCUM.read_text(), kernels=kernels))
    rows = {r["symbol"]: r for r in out.data["kernels"]}
    assert rows[PROBE_BF16]["status"] == PASS and rows[PROBE_BF16]["tensor_forms"] == {"HGMMA.64x64x16.F32.BF16": 1}
    bad = rows[PROBE]
    assert bad["status"] == FAIL and bad["tensor_forms"] == {"HGMMA.64x64x16.F16": 1}
    assert bad["reason"] == (f"accumulates in fp16, not fp32: HGMMA.64x64x16.F16 x1 in {PROBE} "
                             "(first /*0060*/ HGMMA.64x64x16.F16 R24, gdesc[UR4], RZ, !UPT, gsb0 ;)")
    assert out.status == FAIL and "hgmma_probe/m64n64w4s1/fp16/d64 on sm_90a: accumulates in fp16" in out.reason
