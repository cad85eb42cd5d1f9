"""GPU selection (--gpus) and the cell pool that pins each cell to one GPU (stand-in cells, no GPU needed)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evpack.gpus import Gpu, GpuSelectionError, apply_visible, parse_smi, select
from evpack.stages.procs import PROCS_FILE, Job, gpu_slots, run_jobs

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "nvidia-smi"
TWO = [Gpu(0, "GPU-aaaaaaaa-0000", "NVIDIA H200"), Gpu(1, "GPU-bbbbbbbb-1111", "NVIDIA H200")]

# A cell that records which GPU it was given and when it ran (to see how many ran at once per GPU).
CELL = ("import json, os, sys, time; t0 = time.time(); time.sleep(0.4); "
        "json.dump({'visible': os.environ.get('CUDA_VISIBLE_DEVICES'), 't0': t0, 't1': time.time()}, "
        "open(sys.argv[1], 'w'))")


def test_default_is_no_pool_with_one_gpu_and_all_with_several():
    assert select(None, TWO[:1]) is None
    assert select(None, []) is None
    assert [g["uuid"] for g in select(None, TWO)] == [g.uuid for g in TWO]
    assert [g["index"] for g in select("all", TWO)] == [0, 1]
    assert [g["index"] for g in select("1", TWO)] == [1]
    assert select("0", TWO[:1]) == [TWO[0].to_json()]  # one GPU named: the pool path with one worker


@pytest.mark.parametrize("spec, message", [("2", "GPU 2 is not there"), ("0,0", "named twice"),
                                           ("gpu0", "not a GPU index"), ("0,", "not a GPU index")])
def test_bad_gpus_name_what_is_wrong(spec, message):
    with pytest.raises(GpuSelectionError, match=message):
        select(spec, TWO)


def test_gpus_without_any_visible():
    with pytest.raises(GpuSelectionError, match="no GPU is visible"):
        select("all", [])


def test_cuda_visible_devices_narrows_and_renumbers():
    assert apply_visible(TWO, None) == TWO
    assert apply_visible(TWO, "1") == [Gpu(0, TWO[1].uuid, TWO[1].name)]
    assert apply_visible(TWO, "GPU-bbbbbbbb,0") == [Gpu(0, TWO[1].uuid, "NVIDIA H200"), Gpu(1, TWO[0].uuid, "NVIDIA H200")]
    assert apply_visible(TWO, "0,7,1") == [TWO[0]]  # CUDA stops at the first entry it cannot match
    assert apply_visible(TWO, "") == []


def test_parse_smi_on_real_listings():
    """nvidia-smi's listing as captured on a one-GPU and a two-GPU H200 host (tests/fixtures/README.md)."""
    two = parse_smi((FIXTURES / "query-index-uuid-name-2xh200.csv").read_text())
    assert [(g.index, g.name) for g in two] == [(0, "NVIDIA H200"), (1, "NVIDIA H200")]
    assert all(g.uuid.startswith("GPU-") and len(g.uuid) == 40 for g in two) and two[0].uuid != two[1].uuid
    one = parse_smi((FIXTURES / "query-index-uuid-name-h200.csv").read_text())
    assert len(one) == 1 and select(None, one) is None and len(select(None, two)) == 2
    narrowed = apply_visible(two, two[1].uuid)  # CUDA_VISIBLE_DEVICES=<the second GPU's UUID>
    assert narrowed == [Gpu(0, two[1].uuid, "NVIDIA H200")]
    with pytest.raises(GpuSelectionError, match="GPU 1 is not there"):
        select("1", narrowed)


def _jobs(tmp_path: Path, n: int) -> list[Job]:
    return [Job(f"cell{i}", [sys.executable, "-c", CELL, str(tmp_path / f"cell{i}.json")], 60) for i in range(n)]


def test_pool_pins_each_cell_to_the_gpu_its_record_names(tmp_path):
    gpus = select("all", TWO)
    records = run_jobs(_jobs(tmp_path, 6), tmp_path, REPO, gpus=gpus)
    seen = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in records}
    for name, rec in records.items():
        assert rec["returncode"] == 0
        assert seen[name]["visible"] == rec["gpu"]["uuid"]  # the cell saw exactly the GPU its record names
        assert "CUDA_VISIBLE_DEVICES" not in rec["env"]  # the job's own env is recorded unchanged
    assert {r["gpu"]["index"] for r in records.values()} == {0, 1}
    on_disk = json.loads((tmp_path / PROCS_FILE).read_text())
    assert on_disk == json.loads(json.dumps(records))  # procs.json keeps each cell's GPU
    assert sorted({r["gpu"]["uuid"] for r in on_disk.values()}) == [g.uuid for g in TWO]
    # one slot per GPU: no two cells overlap in time on the same GPU
    for uuid in (g.uuid for g in TWO):
        spans = sorted((s["t0"], s["t1"]) for s in seen.values() if s["visible"] == uuid)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))


def test_pool_runs_parallel_slots_per_gpu(tmp_path):
    assert gpu_slots([{"index": 0, "uuid": "u0"}, {"index": 1, "uuid": "u1"}], 3) == [
        {"index": 0, "uuid": "u0"}] * 3 + [{"index": 1, "uuid": "u1"}] * 3
    assert gpu_slots(None, 2) == [None, None]
    records = run_jobs(_jobs(tmp_path, 8), tmp_path, REPO, parallel=2, gpus=select("all", TWO))
    spans = [json.loads((tmp_path / f"{n}.json").read_text()) for n in records]
    overlapping = max(sum(1 for s in spans if s["t0"] < t < s["t1"]) for t in (x["t0"] + 0.2 for x in spans))
    assert 2 < overlapping <= 4


def test_without_a_pool_nothing_is_pinned(tmp_path):
    records = run_jobs(_jobs(tmp_path, 2), tmp_path, REPO)
    assert all("gpu" not in r for r in records.values())
    assert all("gpu" not in r for r in json.loads((tmp_path / PROCS_FILE).read_text()).values())


def test_cli_refuses_a_gpu_that_is_not_there(tmp_path):
    """On a machine without nvidia-smi (CI) any --gpus is refused before a stage runs, with exit 2."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed: the checkout's build guard refuses first (buildguard.py)")
    bin_dir = tmp_path / "bin"  # git alone, for the build guard's check of the checkout: no nvidia-smi on PATH
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(git)
    env_path = str(bin_dir)
    out = subprocess.run([sys.executable, "-m", "evpack", "evidence", "--gpus", "0,1", "--packs-dir",
                          str(tmp_path / "packs")], capture_output=True, text=True, cwd=REPO,
                         env={"PATH": env_path, "HOME": str(tmp_path)})
    assert out.returncode == 2
    assert "--gpus" in out.stderr and "no GPU is visible" in out.stderr
    assert not (tmp_path / "packs").exists()
