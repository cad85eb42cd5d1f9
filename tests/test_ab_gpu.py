"""A/B on a GPU (skipped without CUDA): two copies of the extension in one ShapeRunner, and the quick-suite
self-check end to end (`bench --suite quick --self-check`), which is how the rule's false-positive rate
is measured on the machine."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, run_cli, scratch_checkout

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from evpack.jsonio import read_member_json  # noqa: E402
from evpack.timing import ab, harness  # noqa: E402
from evpack.timing.stats import StopRule  # noqa: E402
from evpack.timing.suites import Shape, SuiteShape, load_suite  # noqa: E402

RULE = StopRule(warmup=2, min_samples=30, floor_samples=10, max_samples=600, time_cap_s=0.3, min_time_s=0.1,
                graph_calls=8)


def _head_so() -> Path:
    try:
        import evpack._C as ext
    except ImportError as exc:
        pytest.skip(f"extension not built ({exc}); run `python setup.py build_ext --inplace` first")
    return Path(ext.__file__).resolve()


def test_two_copies_in_one_shape_runner(tmp_path):
    """A copy of the head's .so loaded as the base: both timed in the same rounds, both re-checked."""
    from evpack.api import flash_attention
    from evpack.timing import ab_runner
    from evpack.timing.shape_runner import ShapeRunner

    copy = tmp_path / "base" / _head_so().name
    copy.parent.mkdir()
    shutil.copyfile(_head_so(), copy)  # another file: the dynamic loader maps a second copy
    base = ab_runner.load_base(copy, ["mma"])
    assert base.pairs and all(v == "mma" for v, _ in base.pairs)
    suite = load_suite("quick", REPO)
    shape = Shape(2, 8, 512, 64, "fp16", False)
    suite = type(suite)(suite.name, (SuiteShape(shape, harness.MODES, ("t",)),), RULE, suite.canonical, budget_s=30)
    runner = ShapeRunner(suite, flash_attention, torch.cuda.Stream(), harness.device_info()["l2_bytes"], ["mma"],
                         base=base)
    runner.run_shape(suite.shapes[0])
    heads = [r for r in runner.records if r["impl"] == "evpack" and r["status"] != "unsupported"]
    bases = [r for r in runner.records if r["impl"] == ab.BASE]
    assert len(heads) == len(bases) == len(base.pairs) * len(harness.MODES)
    assert all(r["status"] == "ok" and r["max_abs_err"] <= r["err_bound"] for r in heads + bases), bases
    out = ab.compare_sides(heads, runner.samples, bases, runner.samples)
    assert len(out["rows"]) == len(heads) and not out["new"] and not out["removed"]
    assert out["counts"][ab.SLOWER] == 0 and out["counts"][ab.FASTER] == 0, out["rows"]


def _git_ok() -> bool:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True).returncode == 0
    except OSError:
        return False


@pytest.mark.timeout(1800)
def test_quick_suite_self_check_end_to_end(tmp_path):
    if not _git_ok():
        pytest.skip("not a git checkout: --self-check builds HEAD from a git worktree")
    env = dict(__import__("os").environ, EVPACK_AB_DIR=str(tmp_path / "ab"))
    # `bench` builds first: in a scratch checkout, never in this one (whose build outputs are the user's)
    repo = scratch_checkout(tmp_path / "checkout")
    proc = run_cli("bench", "--suite", "quick", "--self-check", "--packs-dir", str(tmp_path / "packs"), env=env,
                   timeout=1800, repo=repo)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    pack = next(p for p in (tmp_path / "packs").iterdir() if p.is_dir() and not p.is_symlink()
                and not p.name.startswith("."))
    data = read_member_json(pack / "bench", ab.AB_FILE)  # ab.json, or ab.json.xz (a quick suite's is ~0.4 MB)
    assert list((pack / "bench").rglob("samples.csv.xz")) and list((pack / "bench").rglob("ab_samples.csv.xz"))
    assert data["status"] == "pass", data["reason"]
    assert data["self_check"] and data["base_commit"] == data["head_commit"]
    assert len(data["base_so_sha256"]) == 64 and len(data["head_so_sha256"]) == 64
    assert (pack / "bench" / "ab_build" / "build.log").is_file()
    assert not data["new"] and not data["removed"]
    assert all(r["status"] == "ok" and r["max_abs_err"] <= r["err_bound"] for r in data["base_records"])
    assert data["counts"][ab.SLOWER] == 0, [e for e in data["rows"] if e["verdict"] == ab.SLOWER]
    assert ab.same_rate(data) >= 0.95, data["counts"]
    pj = json.loads((pack / "pack.json").read_text())
    assert "perf-regression" not in pj["labels"]
    assert "A/B vs" in pj["gates"]["performance"]["reason"]
    assert not any((tmp_path / "ab").iterdir())  # the worktree was removed
    assert "verify: OK" in proc.stdout
