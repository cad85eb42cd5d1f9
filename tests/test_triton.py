"""The Triton variant under the build-time gates: AOT compile for explicit targets (no GPU), the ptxas
report of that compile through the PTXAS gate, the real cuobjdump's SASS of the cubins (and of a shared
object that embeds them the way the extension does) through the SASS gate, the launcher's C++, the pin,
and the pack-side checks. The GPU half (correctness, timing) is .gpu/triton_check.sh and test_triton_gpu."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evpack import registry, triton_aot, triton_cpp
from evpack.parsers import ptxas as ptxas_parser
from evpack.parsers import sass, symbols
from evpack.stages import build_triton
from evpack.stages import ptxas as ptxas_stage
from evpack.stages import sass as sass_stage
from evpack.triton_pin import TritonPin, pin_in

REPO = Path(__file__).resolve().parents[1]
TRITON = registry.get("triton")
DECOY = registry.get("canary_triton_decoy", include_canaries=True)
ARCHS = ["80", "89", "90a"]


def _tool(name: str) -> str | None:
    from evpack import tools

    return tools.find_tool(name)


def _cuda_bin(name: str) -> str | None:
    from evpack import tools

    home = tools.cuda_home()
    path = Path(home) / "bin" / name if home else None
    return str(path) if path and path.is_file() else shutil.which(name)


# ---- pure ------------------------------------------------------------------------------------------

def test_symbol_is_the_cuda_scheme_and_maps_to_the_registry():
    for v, cfg, dtype, d in registry.kernel_grid(include_canaries=True):
        if v.language != "triton":
            continue
        kid = symbols.identify(triton_aot.symbol(v.name, cfg.name, dtype, d))
        assert kid is not None and kid.key == (v.name, cfg.name, dtype, d) and kid.kind == "tensor"


def test_registry_triton_entries():
    assert TRITON.language == "triton" and TRITON.kind == "tensor" and (REPO / TRITON.source).is_file()
    assert DECOY.expect_caught_by == "tensor_proof" and (REPO / DECOY.source).is_file()
    assert all(v.language in registry.LANGUAGES for v in registry.variants(include_canaries=True))
    assert {c.name for c in TRITON.configs} == {"m128n64w8s3", "m64n64w4s3"}


def test_pin_reads_exact_pins_only():
    reqs = ['triton==3.7.1; platform_system == "Linux" and python_version < "3.15"', "sympy>=1.13"]
    assert pin_in(reqs, "triton") == "3.7.1"
    assert pin_in(["triton>=3.0"], "triton") is None
    assert pin_in(["pytorch-triton==3.7.1"], "triton") is None


def test_pin_problem_names_both_versions():
    assert TritonPin("3.7.1", "3.7.1", "2.13.0", "x").problem == ""
    p = TritonPin("3.8.0", "3.7.1", "2.13.0+cpu", "pyproject")
    assert "3.8.0" in p.problem and "triton==3.7.1" in p.problem and "\n" not in p.problem
    assert "not installed" in TritonPin(None, "3.6.0", "2.11.0", "x").problem
    assert "cannot tell" in TritonPin("3.7.1", None, "2.12.0", "x").problem


def test_project_pin_is_what_torch_2_13_requires():
    from evpack.triton_pin import project_pins

    assert project_pins(REPO) == ("2.13.0", "3.7.1")


def test_ptx_params_reads_the_entry_list_and_refuses_a_missing_entry():
    ptx = ".visible .entry f(\n .param .u64 .ptr .global .align 1 f_param_0,\n .param .u32 f_param_1,\n" \
          " .param .f32 f_param_2\n)\n{\n}"
    assert triton_aot.ptx_params(ptx, "f") == ("u64", "u32", "f32")
    with pytest.raises(triton_aot.AotError):
        triton_aot.ptx_params(ptx, "g")


# ---- AOT build (real Triton, no GPU) ---------------------------------------------------------------



@pytest.fixture(scope="module")
def aot(tmp_path_factory):
    pytest.importorskip("triton")
    fatbin = _cuda_bin("fatbinary")
    if fatbin is None:
        pytest.skip("fatbinary (CUDA toolkit) not found")
    out = tmp_path_factory.mktemp("triton_aot")
    manifests = {}
    for ext, v in (("_C", TRITON), ("_canaries", DECOY)):
        manifests[ext] = triton_aot.build(REPO, out / ext, ext, [v], ARCHS, fatbin)
    return out, manifests


@pytest.mark.slow
def test_every_config_compiles_for_every_arch_with_hashes(aot):
    out, manifests = aot
    m = manifests["_C"]
    want = {(c.name, dt, d, a) for c in TRITON.configs for dt in TRITON.dtypes for d in TRITON.head_dims
            for a in ("sm_90a",)}
    assert {(k["config"], k["dtype"], k["head_dim"], k["arch"]) for k in m["kernels"]} == want
    assert m["triton_version"] == m["triton_required"]
    for k in m["kernels"]:
        for kind, f in k["files"].items():
            data = (out / "_C" / f["path"]).read_bytes()
            assert data and triton_aot.sha256(data) == f["sha256"], (kind, f["path"])
        assert (out / "_C" / k["files"]["cubin"]["path"]).read_bytes()[:4] == b"\x7fELF"
        cfg = next(c for c in TRITON.configs if c.name == k["config"])
        assert k["shared"] > 0 and k["num_warps"] == cfg.warps  # the registered warps, as compiled
    for fb in m["fatbins"]:
        data = (out / "_C" / fb["path"]).read_bytes()
        assert triton_aot.sha256(data) == fb["sha256"]


@pytest.mark.slow
def test_ptxas_rows_of_every_triton_kernel_pass_the_gate(aot):
    out, manifests = aot
    rows = []
    for ext, m in manifests.items():
        built = {(k["variant"], k["config"], k["dtype"], k["head_dim"]): {"dynamic_smem_bytes": k["shared"],
                                                                           "threads": 32 * k["num_warps"]}
                 for k in m["kernels"]}
        for k in m["kernels"]:
            log = ptxas_parser.parse_ptxas_log((out / ext / k["files"]["ptxas.log"]["path"]).read_text())
            assert log.extension == ext and len(log.kernels) == 1
            res = log.kernels[0]
            assert res.symbol == k["symbol"] and res.arch == k["arch"]
            # a kernel of its own: its dynamic smem is the one for this arch
            built[(k["variant"], k["config"], k["dtype"], k["head_dim"])]["dynamic_smem_bytes"] = k["shared"]
            rows.append(ptxas_stage._row(k["files"]["ptxas.log"]["path"], res, built))
    assert len(rows) == 2 * 2 * 2 * 1 + 3  # triton: sm_90a; the canary: sm_80, sm_89, sm_90a
    bad = [(r["symbol"], r["arch"], r["reason"]) for r in rows if r["status"] != "pass"]
    assert not bad
    assert all(r["spill_store_bytes"] == 0 and r["stack_bytes"] == 0 and r["registers"] > 0 for r in rows)


def _sass_rows(path: Path, module: str) -> list[dict]:
    cuobjdump = _tool("cuobjdump")
    if cuobjdump is None or _tool("nvdisasm") is None:
        pytest.skip("cuobjdump/nvdisasm not found")
    from evpack import tools

    proc = subprocess.run([cuobjdump, "--dump-sass", str(path)], capture_output=True, text=True, timeout=300,
                          env=tools.tool_env())
    assert proc.returncode == 0, proc.stderr
    return [sass_stage.kernel_row(module, fn, symbols.identify(fn.symbol)) for fn in sass.parse_sass(proc.stdout)]


@pytest.mark.slow
def test_sass_of_each_cubin_proves_f32_tensor_math_and_hgmma_on_sm90a(aot):
    out, manifests = aot
    for k in manifests["_C"]["kernels"]:
        rows = _sass_rows(out / "_C" / k["files"]["cubin"]["path"], "evpack._C")
        assert len(rows) == 1
        r = rows[0]
        assert r["status"] == "pass", r["reason"]
        assert r["variant"] == "triton" and r["arch"] == k["arch"]
        assert all(".F32" in f for f in r["tensor_forms"]), r["tensor_forms"]
        if k["arch"] == "sm_90a":
            assert r["hgmma"] > 0
        else:
            assert r["hmma"] > 0


@pytest.mark.slow
def test_decoy_canary_sass_holds_tensor_instructions_so_only_the_executed_work_can_catch_it(aot):
    out, manifests = aot
    for k in manifests["_canaries"]["kernels"]:
        r = _sass_rows(out / "_canaries" / k["files"]["cubin"]["path"], "evpack._canaries")[0]
        assert r["canary"] and r["variant"] == "canary_triton_decoy"
        # the SASS gate passes it: HMMA/HGMMA in F32 -- the decoy fools the static proof ...
        assert r["status"] == "pass" and r["tensor_math"] > 0
        # ... while the real math is CUDA-core FFMA (the tensor proof's executed FLOPs catch it on a GPU)
        assert r["ffma"] > r["tensor_math"]


def _so(tmp: Path, manifest: dict, out: Path) -> Path:
    """The extension's Triton part, linked the way setup.py links it: registration files + launcher."""
    cxx = shutil.which("g++") or shutil.which("c++")
    home = _cuda_bin("nvcc")
    if cxx is None or home is None:
        pytest.skip("no host compiler or CUDA toolkit")
    inc = Path(home).resolve().parents[1] / "include"
    lib = Path(home).resolve().parents[1] / "lib64"
    objs = []
    srcs = [REPO / "csrc" / "triton_launch.cpp", REPO / "csrc" / "registry.cpp"]
    for name, text in triton_cpp.plan(manifest, out):
        (tmp / name).write_text(text)
        srcs.append(tmp / name)
    for src in srcs:
        obj = tmp / (src.name + ".o")
        subprocess.run([cxx, "-std=c++17", "-O1", "-fPIC", "-Wall", "-Werror", "-c", str(src), "-o", str(obj),
                        f"-I{REPO / 'csrc' / 'include'}", f"-I{inc}"], check=True)
        objs.append(str(obj))
    so = tmp / "triton_part.so"
    subprocess.run([cxx, "-shared", *objs, "-o", str(so), f"-L{lib}", "-lcudart", f"-Wl,-rpath,{lib}"], check=True)
    return so


@pytest.mark.slow
def test_embedded_fatbins_are_the_cubins_and_cuobjdump_of_the_shared_object_sees_every_kernel(aot, tmp_path):
    out, manifests = aot
    m = manifests["_C"]
    so = _so(tmp_path, m, out / "_C")
    data = so.read_bytes()
    for k in m["kernels"]:
        assert (out / "_C" / k["files"]["cubin"]["path"]).read_bytes() in data
    rows = _sass_rows(so, "evpack._C")
    assert {(r["symbol"], r["arch"]) for r in rows} == {(k["symbol"], k["arch"]) for k in m["kernels"]}
    assert all(r["status"] == "pass" for r in rows)
    # the registrations run at load (no driver needed) and hold the manifest's launch shapes
    out_json = subprocess.run([sys.executable, "-c", "import ctypes,sys; ctypes.CDLL(sys.argv[1]); print('ok')",
                               str(so)], capture_output=True, text=True)
    assert out_json.stdout.strip() == "ok", out_json.stderr


def test_launcher_compiles_against_torch_headers():
    cxx = shutil.which("g++") or shutil.which("c++")
    nvcc = _cuda_bin("nvcc")
    if cxx is None or nvcc is None:
        pytest.skip("no host compiler or CUDA toolkit")
    cpp_ext = pytest.importorskip("torch.utils.cpp_extension")
    inc = Path(nvcc).resolve().parents[1] / "include"
    cmd = [cxx, "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", f"-I{REPO / 'csrc' / 'include'}",
           f"-I{inc}", *(f"-I{p}" for p in cpp_ext.include_paths()), str(REPO / "csrc" / "triton_launch.cpp")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# ---- attacks on the pack side -----------------------------------------------------------------------

def _pack(tmp: Path, aot, so: Path) -> Path:
    out, _ = aot
    repo = tmp / "repo"
    shutil.copytree(out / "_C", repo / "build" / "triton" / "_C")
    dest = tmp / "pack" / "build"
    (dest / "ptxas").mkdir(parents=True)
    build_triton.keep(repo, dest, {"_C": so})
    return dest


@pytest.mark.slow
def test_pack_check_passes_then_catches_a_swapped_cubin_and_a_binary_without_it(aot, tmp_path):
    out, manifests = aot
    so = _so(tmp_path, manifests["_C"], out / "_C")
    so_sha = triton_aot.sha256(so.read_bytes())
    dest = _pack(tmp_path / "a", aot, so)
    assert build_triton.check(dest, {"_C": so_sha})[0] == []
    assert len(list((dest / "ptxas").glob("triton__C_*.ptxas.log"))) == len(manifests["_C"]["kernels"])
    # another binary than the one recorded
    assert any("not the recorded" in p for p in build_triton.check(dest, {"_C": "0" * 64})[0])
    # a cubin swapped in the pack after the build
    k = manifests["_C"]["kernels"][0]
    other = manifests["_C"]["kernels"][1]
    base = dest / "triton" / "_C"
    assert not (base / k["files"]["cubin"]["path"]).exists()  # kept inside xz, hashed as raw bytes
    shutil.copyfile(base / f"{other['files']['cubin']['path']}.xz", base / f"{k['files']['cubin']['path']}.xz")
    assert any("does not hash" in p for p in build_triton.check(dest, {"_C": so_sha})[0])
    # a shared object that does not embed the cubins
    empty = tmp_path / "empty.so"
    empty.write_bytes(b"\x7fELF not these kernels")
    dest2 = _pack(tmp_path / "b", aot, empty)
    problems = build_triton.check(dest2, {"_C": triton_aot.sha256(empty.read_bytes())})[0]
    assert any("is not in empty.so" in p for p in problems)


@pytest.mark.slow
def test_an_unchanged_build_reuses_its_files_and_any_change_builds_again(tmp_path, capsys):
    """The second build of the same inputs compiles nothing; an edited kernel source, a file changed in the
    output, a missing inputs record or other archs each make a real build (whose files are then reused)."""
    pytest.importorskip("triton")
    fatbin = _cuda_bin("fatbinary")
    if fatbin is None:
        pytest.skip("fatbinary (CUDA toolkit) not found")
    repo = tmp_path / "repo"
    (repo / DECOY.source).parent.mkdir(parents=True)
    shutil.copy(REPO / "pyproject.toml", repo / "pyproject.toml")
    shutil.copy(REPO / DECOY.source, repo / DECOY.source)
    out = tmp_path / "out"

    def run(archs="80") -> bool:
        rc = triton_aot.main(["--repo", str(repo), "--out", str(out), "--ext", "_canaries", "--variants",
                              DECOY.name, "--archs", archs, "--fatbinary", fatbin])
        assert rc == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])["reused"]

    assert run() is False
    manifest = (out / "manifest.json").read_text()
    assert run() is True and (out / "manifest.json").read_text() == manifest

    src = repo / DECOY.source
    src.write_text(src.read_text() + "\n# edited\n")
    assert run() is False and run() is True

    ptxas_log = next(out.rglob("*.ptxas.log"))
    ptxas_log.write_text(ptxas_log.read_text() + "edited\n")
    assert run() is False and run() is True

    (out / triton_aot.INPUTS).unlink()
    assert run() is False
    assert run("89") is False and run("89") is True


def test_a_triton_other_than_the_pinned_one_stops_the_build_with_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(triton_aot, "triton_pin", lambda repo: TritonPin("3.8.0", "3.7.1", "2.13.0", "test"))
    rc = triton_aot.main(["--repo", str(REPO), "--out", str(tmp_path), "--ext", "_C", "--variants", "triton",
                          "--archs", "90a"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "triton==3.7.1" in err[0]
    assert not any(tmp_path.iterdir())


def test_a_cuda_variant_is_refused_by_the_triton_build(capsys, tmp_path):
    rc = triton_aot.main(["--repo", str(REPO), "--out", str(tmp_path), "--ext", "_C", "--variants", "mma",
                          "--archs", "90a"])
    assert rc == 2 and "not Triton variants: mma" in capsys.readouterr().err


def test_a_kernel_without_the_interface_is_refused(tmp_path):
    pytest.importorskip("triton")
    src = tmp_path / "k.py"
    src.write_text("import triton\n\n@triton.jit\ndef fwd_kernel(Q, K):\n    pass\n")
    v = registry.Variant("bad", "tensor", str(src), TRITON.configs, archs=("90a",), language="triton")
    with pytest.raises(triton_aot.AotError, match="not the interface"):
        triton_aot.load_kernel(tmp_path, v)


def test_manifest_json_roundtrip_is_plain(aot):
    out, manifests = aot
    assert json.loads((out / "_C" / "manifest.json").read_text()) == manifests["_C"]


def _registration_manifest(sha256: str) -> dict:
    """A one-kernel manifest of the shape triton_aot.build writes (values made up; only plan() reads them)."""
    return {"fatbins": [{"variant": "triton", "config": "m64n64w4s3", "dtype": "fp16", "head_dim": 64,
                         "symbol": "evpack_triton_fwd", "path": "triton/m64n64w4s3_fp16_d64.fatbin", "sha256": sha256,
                         "num_warps": 4, "num_stages": 3, "block_m": 64, "block_n": 64}],
            "kernels": [{"variant": "triton", "config": "m64n64w4s3", "dtype": "fp16", "head_dim": 64,
                         "arch": "sm_90a", "shared": 32768}]}


def test_a_new_fat_binary_changes_what_a_compiler_cache_keys_on(tmp_path):
    """A compiler cache (sccache, ccache's preprocessor mode) keys a registration file on its preprocessed text,
    which drops comments, and the fat binary that .incbin pulls in is no part of it. Before, the digest stood in
    a comment only: a rebuild with new Triton cubins reused the object of the old ones, and the build stage found
    the cubins missing from _C. The digest now stands in the asm text, which the preprocessor keeps."""
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("cpp")
    if cxx is None:
        pytest.skip("no host preprocessor")

    def preprocessed(sha: str) -> str:
        (name, text), = triton_cpp.plan(_registration_manifest(sha), tmp_path)
        body = "\n".join(ln for ln in text.splitlines() if not ln.startswith("#include"))
        return subprocess.run([cxx, "-E", "-P", "-x", "c++", "-"], input=body, capture_output=True, text=True,
                              check=True).stdout

    a, b = preprocessed("a" * 64), preprocessed("b" * 64)
    assert a != b and "a" * 64 in a and "b" * 64 in b


def test_a_fat_binary_digest_that_is_not_hex_is_refused(tmp_path):
    with pytest.raises(ValueError, match="is not 64 hex digits"):
        triton_cpp.plan(_registration_manifest('0" ; .incbin "/etc/passwd'), tmp_path)
