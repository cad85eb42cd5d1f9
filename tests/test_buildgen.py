"""Instantiation files: one per (variant, dtype, head dim), rewritten only when something changed."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import reference

from evpack import buildgen, registry

REPO = Path(__file__).resolve().parents[1]


def _copy_sources(dst: Path) -> Path:
    for d in buildgen.KERNEL_SOURCE_DIRS:
        shutil.copytree(REPO / d, dst / d)
    return dst


def test_one_file_per_variant_dtype_headdim_with_every_config(tmp_path):
    paths = buildgen.generate(REPO, tmp_path, registry.VARIANTS)
    expect = {f"{v.name}_{dt}_d{d}.cu" for v in registry.VARIANTS if v.language == "cuda" for dt in v.dtypes for d in v.head_dims}
    assert {p.name for p in paths} == expect
    wmma = (tmp_path / "wmma_bf16_d128.cu").read_text()
    for cfg in registry.get("wmma").configs:
        assert f"EVPACK_INSTANTIATE(wmma, {cfg.name}, {cfg.block_m}, {cfg.block_n}, {cfg.warps}, {cfg.stages}, " \
               f"__nv_bfloat16, bf16, 128)" in wmma


def test_unchanged_sources_leave_files_untouched(tmp_path):
    out = tmp_path / "gen"
    first = buildgen.generate(REPO, out, registry.VARIANTS)
    mtimes = {p: p.stat().st_mtime_ns for p in first}
    buildgen.generate(REPO, out, registry.VARIANTS)
    assert mtimes == {p: p.stat().st_mtime_ns for p in first}


CUDA = [v for v in registry.VARIANTS + registry.CANARIES if v.language == "cuda"]


def _generate(repo: Path, out: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in buildgen.generate(repo, out, CUDA)}


def _files_of(names) -> set[str]:
    return {n for v in CUDA if v.name in names for n, _ in buildgen.plan([v])}


def test_a_header_edit_rewrites_the_instantiations_that_include_it_and_no_others(tmp_path):
    """The stamp is per variant: an edit to the scalar body rebuilds scalar and the canaries built on it, not
    the tensor-core variants; an edit to a header every body includes rebuilds everything."""
    repo = _copy_sources(tmp_path / "repo")
    out = tmp_path / "gen"
    before = _generate(repo, out)
    header = repo / "csrc" / "variants" / "scalar.cuh"
    header.write_text(header.read_text() + "\n// edited\n")
    after = _generate(repo, out)
    changed = {n for n in before if before[n] != after[n]}
    readers = {v.name for v in CUDA if header.resolve() in buildgen.include_closure(repo, v.source)}
    assert {"scalar", "canary_oob_write", "canary_memo"} <= readers
    assert not readers & {"wmma", "mma", "wgmma", "canary_fp16_accum", "canary_serialized_wgmma"}
    assert changed == _files_of(readers)

    common = repo / "csrc" / "include" / "evpack" / "params.h"
    common.write_text(common.read_text() + "\n// edited\n")
    again = _generate(repo, out)
    assert all(after[n] != again[n] for n in after)


def test_an_include_through_a_macro_falls_back_to_every_header(tmp_path):
    """An #include the scanner cannot follow stamps the body with the digest of every kernel header: an edit
    to any of them rebuilds it."""
    repo = _copy_sources(tmp_path / "repo")
    body = repo / "csrc" / "variants" / "scalar.cuh"
    body.write_text('#define EVPACK_EXTRA "evpack/params.h"\n#include EVPACK_EXTRA\n' + body.read_text())
    assert buildgen.include_closure(repo, "csrc/variants/scalar.cuh") is None
    scalar = registry.get("scalar")
    assert buildgen.variant_digest(repo, scalar) == buildgen.sources_digest(repo)
    out = tmp_path / "gen"
    before = _generate(repo, out)
    other = repo / "csrc" / "variants" / "wmma.cuh"
    other.write_text(other.read_text() + "\n// edited\n")
    after = _generate(repo, out)
    blind = {v.name for v in CUDA if buildgen.include_closure(repo, v.source) is None}
    assert {"scalar", "canary_memo"} <= blind and "mma" not in blind  # the canaries built on scalar too
    readers = {v.name for v in CUDA if v.name not in blind and other.resolve() in buildgen.include_closure(repo, v.source)}
    assert readers == {"wmma"}
    assert {n for n in before if before[n] != after[n]} == _files_of(blind | readers)


def test_every_include_line_counts_and_cycles_end(tmp_path):
    """An include under #if 0 still counts (the set may be larger than one compile reads, never smaller); a
    quoted name is found beside the including file first; headers that include each other end."""
    repo = tmp_path / "repo"
    (repo / "csrc" / "include" / "evpack").mkdir(parents=True)
    (repo / "csrc" / "variants").mkdir(parents=True)
    (repo / "csrc" / "variants" / "body.cuh").write_text(
        '#pragma once\n#if 0\n#  include "near.cuh"\n#endif\n#include <evpack/a.h>\n#include <cuda_fp16.h>\n')
    (repo / "csrc" / "variants" / "near.cuh").write_text("#pragma once\n")
    (repo / "csrc" / "include" / "evpack" / "a.h").write_text('#pragma once\n#include "b.h"\n')
    (repo / "csrc" / "include" / "evpack" / "b.h").write_text('#pragma once\n#include "evpack/a.h"\n')
    got = buildgen.include_closure(repo, "csrc/variants/body.cuh")
    assert [p.relative_to(repo.resolve()).as_posix() for p in got] == [
        "csrc/include/evpack/a.h", "csrc/include/evpack/b.h", "csrc/variants/body.cuh", "csrc/variants/near.cuh"]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit) on PATH")
def test_the_scanned_includes_hold_every_repository_file_nvcc_reads(tmp_path):
    """Held to the compiler: for every CUDA variant and canary, each repository file `nvcc -M` lists for its
    instantiation (for every arch it is built for) is in the scanned set."""
    from concurrent.futures import ThreadPoolExecutor

    repo = REPO.resolve()
    out = tmp_path / "gen"
    buildgen.generate(repo, out, CUDA)
    archs = buildgen.parse_archs(buildgen.DEFAULT_ARCHS)

    def repo_deps(v) -> set[Path]:
        src = out / buildgen.plan([v])[0][0]
        cmd = ["nvcc", "-M", "-std=c++17", "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
               "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr",
               *buildgen.gencode_flags(buildgen.variant_archs(v, archs)), "-I", str(repo / "csrc" / "include"),
               "-I", str(repo), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert proc.returncode == 0, proc.stderr
        words = proc.stdout.replace("\\\n", " ").split(":", 1)[1].split()  # "<object> : <deps>"
        return {Path(w).resolve() for w in words if Path(w).resolve().is_relative_to(repo)}

    with ThreadPoolExecutor(max_workers=4) as pool:
        deps = dict(zip(CUDA, pool.map(repo_deps, CUDA), strict=True))
    for v, got in deps.items():
        scanned = set(buildgen.include_closure(repo, v.source))
        assert (repo / v.source).resolve() in got, f"{v.name}: nvcc -M did not list {v.source}"
        assert got <= scanned, f"{v.name}: nvcc reads {sorted(map(str, got - scanned))}, which the scan missed"


def test_build_stage_names_the_variants_the_build_left_out(tmp_path):
    """A variant the build could not target (an arch not listed, an nvcc without sm_90a) is named in the
    build stage's reason and data, from the skipped.json the build wrote (copied into the pack)."""
    import json
    import shutil

    from evpack.stages import build

    ref = reference.skip_unless(reference.FULL, "FULL")
    pack = tmp_path / "pack"
    shutil.copytree(ref / "build", pack / "build")
    before = build.derive(pack / "build", pack)
    assert before.status == "pass" and "left out" not in before.reason
    (pack / "build" / "skipped__C.json").write_text(json.dumps(
        [{"variant": "wgmma", "reason": "nvcc cannot build sm_90a: unsupported gpu architecture"}]))
    after = build.derive(pack / "build", pack)
    assert after.status == "pass" and "left out: wgmma (nvcc cannot build sm_90a" in after.reason
    assert after.data["skipped_variants"] == [{"variant": "wgmma", "extension": "_C",
                                               "reason": "nvcc cannot build sm_90a: unsupported gpu architecture"}]


def test_only_the_objects_this_build_linked_give_ptxas_logs(tmp_path):
    """Logs left by an earlier build with other settings (other variants, archs, or the canaries of an earlier
    run) are never copied into a pack: only objects listed in the built extensions' objects.json are."""
    import json

    from evpack.stages import build

    temp = tmp_path / "build" / "temp.linux" / "_C"
    temp.mkdir(parents=True)
    for name in ("now", "stale"):
        (temp / f"{name}.o").write_bytes(b"\0")
        (temp / f"{name}.o.ptxas.log").write_text(f"# nvcc {name}\n")
    stale_ext = tmp_path / "build" / "temp.linux" / "_canaries"
    stale_ext.mkdir()
    (stale_ext / "old.o").write_bytes(b"\0")
    (stale_ext / "old.o.ptxas.log").write_text("# nvcc old\n")
    for ext, objs in (("_C", [temp / "now.o"]), ("_canaries", [stale_ext / "old.o"])):
        (tmp_path / "build" / "generated" / ext).mkdir(parents=True)
        (tmp_path / "build" / "generated" / ext / "objects.json").write_text(json.dumps([str(o) for o in objs]))
    build._copy_ptxas_logs(tmp_path, tmp_path / "out", ["_C"])  # this build made _C only
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["_C_now.o.log"]
