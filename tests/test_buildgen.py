"""Instantiation files: one per (variant, dtype, head dim), rewritten only when something changed."""
from __future__ import annotations

import shutil
from pathlib import Path

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


def test_a_changed_kernel_header_rewrites_the_instantiations(tmp_path):
    """ninja's CUDA rule has no depfile: the digest stamp is what makes a header edit rebuild."""
    repo = _copy_sources(tmp_path / "repo")
    out = tmp_path / "gen"
    before = {p.name: p.read_text() for p in buildgen.generate(repo, out, registry.VARIANTS)}
    header = repo / "csrc" / "variants" / "scalar.cuh"
    header.write_text(header.read_text() + "\n// edited\n")
    after = {p.name: p.read_text() for p in buildgen.generate(repo, out, registry.VARIANTS)}
    assert all(before[n] != after[n] for n in before)


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
