"""Gates that must fail, on real code built here with the real nvcc (CPU only).

- forced spills: extra nvcc flags through EVPACK_NVCC_FLAGS -> the PTXAS gate fails;
- a `tensor`-labelled kernel whose body has no tensor-core instructions -> the SASS proof fails.

The kernels are the repo's own (csrc/variants/*.cuh), instantiated the way the build's
generated files do (EVPACK_INSTANTIATE). Each test compiles one or two kernels for one arch
(a few seconds each). Skipped, with the reason, where nvcc or cuobjdump is missing.

TODO(lead, setup.py): `_build` compiles with nvcc directly, assembling archs and extra flags
from EVPACK_CUDA_ARCHS / EVPACK_NVCC_FLAGS like setup.py does, and writes the files the build
stage writes (build/ptxas/<object>.log with '# nvcc ...' first, build/kernels.json,
build/binary.json). Once setup.py exposes its flag assembly (e.g. a function returning the
nvcc argument list), call it here instead of `_nvcc_args`, so the test and the build share one
code path; a full `setup.py build_ext` of the torch extension is too slow for this CI budget.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from evpack import binary, registry, tools
from evpack.stages import ptxas as ptxas_stage
from evpack.stages import sass as sass_stage
from evpack.stages.base import FAIL, PASS, StageContext

REPO = Path(__file__).resolve().parents[1]
NVCC = shutil.which("nvcc")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: cannot build real code for the gate tests"),
    pytest.mark.skipif(not (REPO / "csrc" / "variants" / "scalar.cuh").exists(),
                       reason="csrc/variants/scalar.cuh is missing"),
]
needs_cuobjdump = pytest.mark.skipif(
    tools.find_tool("cuobjdump") is None or tools.find_tool("nvdisasm") is None,
    reason="cuobjdump/nvdisasm not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")

# Forced spills. The kernels declare __launch_bounds__(threads, 1), and for such kernels ptxas
# ignores a plain -maxrregcount ("Overriding global maxrregcount 32 with entry-specific value 255
# computed using thread count"); --override-directive-values makes the cap apply.
FORCE_SPILLS = "-maxrregcount=32 -Xptxas --override-directive-values"
ARCH = "90"


def _archs() -> list[str]:
    """EVPACK_CUDA_ARCHS as setup.py reads it: '90', '80;89;90', '8.0 9.0', 'sm_90a'."""
    raw = os.environ.get("EVPACK_CUDA_ARCHS", ARCH)
    out = []
    for tok in re.split(r"[;,\s]+", raw.strip()):
        tok = tok.removeprefix("sm_").replace(".", "")
        if tok:
            out.append(tok)
    return out


def _nvcc_args() -> list[str]:
    args = ["-Xptxas", "-v", "-std=c++17", f"-I{REPO / 'csrc'}", f"-I{REPO / 'csrc' / 'include'}"]
    for a in _archs():
        args += ["-gencode", f"arch=compute_{a},code=sm_{a}"]
    return args + shlex.split(os.environ.get("EVPACK_NVCC_FLAGS", ""))


def _build(pack: Path, variant: str, dtype: str = "fp16", head_dim: int = 64) -> Path:
    """Compile one registry kernel into an object; leave build/ as the build stage would."""
    v = registry.get(variant)
    cfg = v.configs[0]
    ctype = {"fp16": "__half", "bf16": "__nv_bfloat16"}[dtype]
    work = pack.parent / "work"
    work.mkdir(parents=True, exist_ok=True)
    src = work / f"{variant}_{dtype}_d{head_dim}.cu"
    src.write_text(f'#include "{Path(v.source).relative_to("csrc").as_posix()}"\n'
                   f"EVPACK_INSTANTIATE({v.name}, {cfg.name}, {cfg.block_m}, {cfg.block_n}, {cfg.warps}, "
                   f"{cfg.stages}, {ctype}, {dtype}, {head_dim})\n")
    obj = src.with_suffix(".o")
    cmd = [NVCC, "-c", *_nvcc_args(), str(src), "-o", str(obj)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (pack / "build" / "ptxas").mkdir(parents=True, exist_ok=True)
    (pack / "build" / "ptxas" / f"{obj.name}.log").write_text(f"# {' '.join(cmd)}\n{proc.stderr}")
    kj = pack / "build" / "kernels.json"
    rows = json.loads(kj.read_text()) if kj.exists() else []
    # dynamic shared memory comes from the built extension in a real pack; these gates do not depend on it
    rows.append({"variant": variant, "config": cfg.name, "dtype": dtype, "head_dim": head_dim,
                 "dynamic_smem_bytes": 0, "threads": cfg.threads, "module": "evpack._C"})
    kj.write_text(json.dumps(rows))
    (pack / "build" / "binary.json").write_text(json.dumps(
        {"module": "evpack._C", "path": str(obj), "sha256": binary.sha256_file(obj)}))
    return obj


def _stage(pack: Path, mod) -> object:
    d = pack / mod.NAME
    d.mkdir(exist_ok=True)
    mod.run(StageContext(pack, d, REPO))
    return mod.derive(d, pack)


def test_forced_spills_fail_the_ptxas_gate(tmp_path, monkeypatch):
    monkeypatch.setenv("EVPACK_CUDA_ARCHS", ARCH)
    monkeypatch.delenv("EVPACK_NVCC_FLAGS", raising=False)
    clean = tmp_path / "clean" / "pack"
    _build(clean, "scalar")
    out = _stage(clean, ptxas_stage)
    assert out.status == PASS, out.reason

    monkeypatch.setenv("EVPACK_NVCC_FLAGS", FORCE_SPILLS)
    forced = tmp_path / "forced" / "pack"
    _build(forced, "scalar")
    out = _stage(forced, ptxas_stage)
    assert out.status == FAIL
    (row,) = out.data["kernels"]
    assert row["registers"] <= 32 and row["max_registers"] == 32
    assert row["spill_store_bytes"] > 0 and row["stack_bytes"] > 0
    assert re.search(r"spills \d+ B \(stores \d+ \+ loads \d+\) > budget 0 B", row["reason"])
    log = next((forced / "build" / "ptxas").glob("*.log")).read_text()
    assert log.startswith("# ") and "-maxrregcount=32" in log.splitlines()[0]


def test_plain_maxrregcount_is_ignored_under_launch_bounds(tmp_path, monkeypatch):
    # documents why FORCE_SPILLS carries --override-directive-values
    monkeypatch.setenv("EVPACK_CUDA_ARCHS", ARCH)
    monkeypatch.setenv("EVPACK_NVCC_FLAGS", "-maxrregcount=32")
    pack = tmp_path / "pack"
    _build(pack, "scalar")
    out = _stage(pack, ptxas_stage)
    (row,) = out.data["kernels"]
    assert row["registers"] > 32 and row["spill_store_bytes"] == 0


@needs_cuobjdump
def test_tensor_label_without_tensor_instructions_fails_the_sass_proof(tmp_path, monkeypatch):
    monkeypatch.setenv("EVPACK_CUDA_ARCHS", ARCH)
    monkeypatch.delenv("EVPACK_NVCC_FLAGS", raising=False)
    pack = tmp_path / "pack"
    obj = _build(pack, "scalar")
    out = _stage(pack, sass_stage)
    assert out.status == PASS, out.reason  # the scalar body, labelled scalar: no tensor-core math
    assert json.loads((pack / "sass" / "binary.json").read_text())["sha256"] == binary.sha256_file(obj)
    for name in ("run.json", "table.json", "table.csv", "histogram.json", sass_stage.HISTOGRAM_CSV):
        assert (pack / "sass" / name).stat().st_size > 0, name
    dump = pack / "sass" / "evpack._C.sass.xz"
    text = sass_stage.read_dump(dump)
    assert "Function : _ZN6evpack6scalar10fwd_kernel" in text
    assert len(text.encode()) == json.loads((pack / "sass" / "run.json").read_text())["binaries"][0]["dump_bytes"]

    # the same binary, its variant relabelled `tensor` in a patched registry
    relabelled = tuple(dataclasses.replace(v, kind="tensor") if v.name == "scalar" else v
                       for v in registry.VARIANTS)
    monkeypatch.setattr(registry, "VARIANTS", relabelled)
    out = sass_stage.derive(pack / "sass", pack)
    assert out.status == FAIL
    (row,) = out.data["kernels"]
    assert row["kind"] == "tensor" and row["hmma"] == 0 and row["hgmma"] == 0
    assert row["reason"].startswith("tensor variant without HMMA/HGMMA")


@needs_cuobjdump
def test_real_tensor_kernel_passes_and_is_told_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("EVPACK_CUDA_ARCHS", ARCH)
    monkeypatch.delenv("EVPACK_NVCC_FLAGS", raising=False)
    pack = tmp_path / "pack"
    _build(pack, "wmma")
    out = _stage(pack, sass_stage)
    assert out.status == PASS, out.reason
    (row,) = out.data["kernels"]
    assert row["hmma"] > 0 and row["ldl"] == row["stl"] == 0
    assert all(q["text"].startswith("HMMA.") for q in row["first_tensor_lines"])
    # the control side: the wmma body labelled scalar fails
    relabelled = tuple(dataclasses.replace(v, kind="scalar") if v.name == "wmma" else v for v in registry.VARIANTS)
    monkeypatch.setattr(registry, "VARIANTS", relabelled)
    assert sass_stage.derive(pack / "sass", pack).status == FAIL


@needs_cuobjdump
def test_rebuilt_binary_after_disassembly_fails_one_binary(tmp_path, monkeypatch):
    monkeypatch.setenv("EVPACK_CUDA_ARCHS", ARCH)
    pack = tmp_path / "pack"
    obj = _build(pack, "scalar")
    _stage(pack, sass_stage)
    # the build records a different object than the one disassembled
    rec = json.loads((pack / "build" / "binary.json").read_text())
    rec["sha256"] = "f" * 64
    (pack / "build" / "binary.json").write_text(json.dumps(rec))
    out = sass_stage.derive(pack / "sass", pack)
    assert out.status == FAIL and "binary mismatch" in out.reason and binary.sha256_file(obj) in out.reason


@needs_cuobjdump
def test_sass_reuses_the_dump_of_unchanged_device_code_byte_for_byte(tmp_path, monkeypatch):
    """A rebuild with nothing changed is another file (nvcc's temporary names) with the same device code: the
    SASS stage hands the pack cuobjdump's earlier output, byte for byte what a fresh run writes, says so in
    run.json, and still hashes the file it was given (the one-binary check is unchanged)."""
    monkeypatch.setenv("EVPACK_CUDA_ARCHS", ARCH)
    monkeypatch.delenv("EVPACK_NVCC_FLAGS", raising=False)
    monkeypatch.setenv("EVPACK_TOOL_CACHE", str(tmp_path / "cache"))
    packs = {}
    for name in ("first", "second", "fresh"):
        if name == "fresh":
            monkeypatch.setenv("EVPACK_TOOL_CACHE", "off")
        pack = tmp_path / name / "pack"
        obj = _build(pack, "scalar")
        packs[name] = (pack, obj, _stage(pack, sass_stage))
    (first, obj1, out1), (second, obj2, out2), (fresh, _, out3) = packs.values()
    assert binary.sha256_file(obj1) != binary.sha256_file(obj2)
    runs = {n: json.loads((p / "sass" / "run.json").read_text())["binaries"][0] for n, (p, _, _) in packs.items()}
    assert "reused" not in runs["first"] and "reused" not in runs["fresh"]
    assert len(runs["second"]["reused"]["key"]) == 64
    dumps = {n: (p / "sass" / "evpack._C.sass.xz").read_bytes() for n, (p, _, _) in packs.items()}
    assert dumps["first"] == dumps["second"] == dumps["fresh"]
    assert json.loads((second / "sass" / "binary.json").read_text())["sha256"] == binary.sha256_file(obj2)
    assert out1.status == out2.status == out3.status == PASS
    assert out2.data["kernels"] == out3.data["kernels"] and out2.data["summary"] == out3.data["summary"]
