"""The rules that make `verify` require a file a stage keeps only sometimes: a record in the pack says the
stage wrote it, so deleting it (and re-writing index.json) is noticed. Found by
tests/test_pack_completeness.py on the full-suite pack of 2026-11-24, where these four could go unnoticed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import reference

from evpack.stages import bench, build, build_triton, sass


def _write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def test_build_requires_the_tools_record_its_result_names(tmp_path):
    d = tmp_path / "build"
    _write(d / "result.json", {"returncode": 0})
    assert build.BUILD_TOOLS not in build.required_files(d)  # packs made before result.json named it
    _write(d / "result.json", {"returncode": 0, "build_tools": build.BUILD_TOOLS})
    assert build.BUILD_TOOLS in build.required_files(d)
    _write(d / "result.json", {"returncode": 2, "build_tools": build.BUILD_TOOLS})
    assert build.BUILD_TOOLS not in build.required_files(d)  # a failed build keeps its log, not its records


@pytest.mark.parametrize("variants,wanted", [(["scalar", "wgmma"], False), (["scalar", "triton"], True),
                                             (["canary_triton_decoy"], True), (["no_such_variant"], False)])
def test_build_requires_the_triton_record_when_it_built_triton_kernels(tmp_path, variants, wanted):
    d = tmp_path / "build"
    _write(d / "result.json", {"returncode": 0})
    _write(d / "kernels.json", [{"variant": v, "config": "c", "module": "evpack._C"} for v in variants])
    assert (build_triton.RECORD in build.required_files(d)) is wanted


def test_sass_requires_the_stderr_file_its_run_record_names(tmp_path):
    d = tmp_path / "sass"
    _write(d / "run.json", {"binaries": [{"module": "evpack._C", "stderr": "evpack._C.stderr.txt"},
                                         {"module": "evpack._canaries"},
                                         {"module": "x", "stderr": "../outside.txt"},
                                         {"module": "y", "stderr": "*.txt"}]})
    named = sass.required_files(d)[len(sass.REQUIRED_FILES):]
    assert named == ("evpack._C.stderr.txt", "[*].txt")  # never a path; a name with glob characters is literal
    (d / "other.txt").write_text("")
    assert not list(d.glob(named[1]))  # verify globs each name: another file never stands in for it
    (d / "*.txt").write_text("")
    assert [p.name for p in d.glob(named[1])] == ["*.txt"]
    (d / "run.json").write_text("not json")
    assert sass.required_files(d) == sass.REQUIRED_FILES


def test_bench_requires_the_limits_file_when_env_json_records_the_limits(tmp_path):
    d = tmp_path / "bench"
    d.mkdir()
    _write(tmp_path / "env.json", {"nvidia_smi_query": {}})
    assert bench.GPU_LIMITS_FILE not in bench.required_files(d)
    _write(tmp_path / "env.json", {"nvidia_smi_query": {"limits": {"gpus": []}}})
    assert bench.GPU_LIMITS_FILE in bench.required_files(d)


@reference.needs("FULL")
def test_the_full_suite_pack_is_held_to_every_rule_it_can_be():
    full = reference.FULL
    assert build_triton.RECORD in build.required_files(full / "build")
    assert bench.GPU_LIMITS_FILE in bench.required_files(full / "bench")
    assert any(f.endswith(".stderr.txt") for f in sass.required_files(full / "sass"))
