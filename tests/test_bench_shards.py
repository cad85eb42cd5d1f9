"""The benchmark sharded over GPUs: shape assignment, and derive() of a sharded bench folder.

The sharded folders are made by splitting the bench stage of a committed H200 reference pack (real
samples, ceilings and A/B) by shape into shards, exactly as shard processes would have written them:
each shard's summary.json and ab.json rebuilt from its own samples with the pipeline's functions.
"""
from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
import reference

from evpack.model import ERROR, PASS
from evpack.packfs import read_stored, write_stored
from evpack.stages import bench, bench_shards
from evpack.timing import ab, ceilings, plots
from evpack.timing import summary as sm
from evpack.timing.shards import SHARDS_FILE
from evpack.timing.suites import load_suite

REPO = Path(__file__).resolve().parents[1]
COPIED = ("ceilings.json", "clocks.json", "binary.json", "canary_bench.json", "integrity.json", "bench.log",
          "ab_binary.json")


def _single_gpu_bench_with_ab() -> Path:
    """The newest reference pack whose benchmark ran on one GPU with an A/B (bench/ab.json)."""
    for pack in reversed(reference.PACKS):
        b = pack / "bench"
        if (b / "ab.json").is_file() and not (b / SHARDS_FILE).is_file():
            return b
    pytest.skip("no single-GPU reference pack with an A/B")


def _subset_samples(src: Path, dst: Path, keys: set[str]) -> None:
    rows = list(csv.reader(io.StringIO(read_stored(src).decode("utf-8"), newline="")))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(rows[0])
    w.writerows(r for r in rows[1:] if r[0] in keys)
    write_stored(dst, buf.getvalue().encode("utf-8"))  # the form dst's suffix names (.xz, as the writer)


def shard_bench(src: Path, dst: Path, groups: list[list[str]]) -> None:
    """Write dst as the sharded layout of the single-GPU bench folder src, shard k holding groups[k]'s shapes."""
    written = json.loads((src / "summary.json").read_text())
    run = json.loads((src / "run.json").read_text())
    ab_written = json.loads((src / ab.AB_FILE).read_text())
    meta = {k: written[k] for k in bench.META_KEYS}
    schema = written.get("schema", 1)  # the reference packs' summaries are schema 1: rebuilt with their own rules
    rates = ceilings.rates(json.loads((src / "ceilings.json").read_text()))
    samples = sm.read_samples(sm.samples_file(src))
    base_samples = sm.read_samples(sm.samples_file(src, ab.BASE_SAMPLES))
    dst.mkdir(parents=True)
    shards, rows, procs = [], [], {}
    for k, shapes in enumerate(groups):
        d = dst / f"shard{k}"
        d.mkdir()
        for name in COPIED:
            if (src / name).is_file():
                shutil.copyfile(src / name, d / name)
        shutil.copytree(src / "ab_build", d / "ab_build")
        records = [r for r in sm.records_of(written) if r["shape"] in shapes]
        keys = {r["key"] for r in records}
        _subset_samples(sm.samples_file(src), d / sm.SAMPLES_FILE, keys)
        summary = sm.build_summary(meta, records, {k2: v for k2, v in samples.items() if k2 in keys}, rates,
                                   schema=schema)
        (d / "summary.json").write_text(json.dumps(summary))
        plots.make_all(summary["rows"], d, summary["primary_mode"])  # as each shard's bench process draws them
        (d / "run.json").write_text(json.dumps(dict(run, shapes=shapes)))
        base_records = [r for r in ab_written["base_records"] if r["shape"] in shapes]
        base_keys = {r["key"] for r in base_records}
        _subset_samples(sm.samples_file(src, ab.BASE_SAMPLES), d / ab.BASE_SAMPLES_FILE, base_keys)
        ab_meta = {m: ab_written[m] for m in ("status", "reason", "base_ref", "base_commit", "head_commit",
                                              "head_dirty", "self_check", "base_so_sha256", "head_so_sha256",
                                              "base_build")}
        part = ab.build_ab(ab_meta, summary["rows"], {k2: v for k2, v in samples.items() if k2 in keys},
                           base_records, {k2: v for k2, v in base_samples.items() if k2 in base_keys},
                           ab_written["rule"])
        (d / ab.AB_FILE).write_text(json.dumps(part))
        rows += summary["rows"]
        shards.append({"dir": d.name, "shapes": shapes})
        procs[d.name] = {"cmd": [], "env": {}, "returncode": 0, "timed_out": False, "duration_s": 1.0,
                         "gpu": {"index": k, "uuid": f"GPU-{k:08d}"}}
        (dst / f"{d.name}.log").write_text("")
    (dst / SHARDS_FILE).write_text(json.dumps({"schema": 1, "shards": shards}))
    (dst / "summary.json").write_text(json.dumps(sm.summary_from_rows(meta, rows, schema=schema)))
    plots.make_all(rows, dst, meta["primary_mode"])  # as the stage draws them over the merged rows
    (dst / "procs.json").write_text(json.dumps(procs))
    for name in ("binary.json", "bench.log"):
        shutil.copyfile(src / name, dst / name)
    (dst / "run.json").write_text(json.dumps(dict(run, shards=shards)))


@pytest.fixture(scope="module")
def _sharded_once(tmp_path_factory):
    """The sharded folder, made once per module (splitting and re-plotting takes seconds)."""
    src = _single_gpu_bench_with_ab()
    shapes = json.loads((src / "run.json").read_text())["shapes"]
    groups = [shapes[0::2], shapes[1::2]]
    dst = tmp_path_factory.mktemp("sharded") / "pack" / "bench"
    shard_bench(src, dst, groups)
    return src, dst


@pytest.fixture()
def sharded(_sharded_once, tmp_path):
    """A copy of it of the test's own: a test may edit its copy."""
    src, made = _sharded_once
    dst = tmp_path / "pack" / "bench"
    shutil.copytree(made, dst)
    return src, dst


def test_sharded_derive_equals_the_single_gpu_one(sharded):
    src, dst = sharded
    one, two = bench.derive(src, src.parent), bench.derive(dst, dst.parent)
    assert one.status == two.status == PASS, two.reason
    for key in ("rows", "rows_ok", "canonical_speedup", "canonical_best", "regressions"):
        assert two.data[key] == one.data[key], key
    assert two.data["ab"]["counts"] == one.data["ab"]["counts"]
    assert two.data["ab"]["same_rate"] == pytest.approx(one.data["ab"]["same_rate"])
    assert [g["uuid"] for g in two.data["gpus"]] == ["GPU-00000000", "GPU-00000001"]
    assert two.data["canaries"][0]["caught"] and "2 of 2 GPUs" in two.data["canaries"][0]["observed"]
    required = bench.required_files(dst)
    assert "shard1/samples.csv.*" in required and (dst / "shard1" / "samples.csv.xz").is_file()
    assert all(any(dst.glob(f)) for f in required)  # globs, as verify reads them


def _edit_json(path: Path, fn) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def test_a_shard_sample_edited_is_an_error(sharded):
    _, dst = sharded
    f = dst / "shard1" / sm.SAMPLES_FILE
    lines = read_stored(f).decode("utf-8").splitlines()
    head, _, t = lines[1].rpartition(",")
    lines[1] = f"{head},{float(t) * 0.5}"
    write_stored(f, ("\n".join(lines) + "\n").encode("utf-8"))
    out = bench.derive(dst, dst.parent)
    assert out.status == ERROR and "shard1" in out.reason


def test_merged_summary_must_match_the_shards(sharded):
    _, dst = sharded
    def halve(d):
        row = next(r for r in d["rows"] if r["median_us"] is not None)
        row["median_us"] *= 0.5

    _edit_json(dst / "summary.json", halve)
    out = bench.derive(dst, dst.parent)
    assert out.status == ERROR and "summary.json disagrees" in out.reason


def test_every_shape_once(sharded):
    _, dst = sharded
    _edit_json(dst / SHARDS_FILE, lambda d: d["shards"][0]["shapes"].pop())
    assert "exactly once" in bench.derive(dst, dst.parent).reason
    _edit_json(dst / SHARDS_FILE, lambda d: d["shards"][1]["shapes"].extend(d["shards"][0]["shapes"]))
    assert bench.derive(dst, dst.parent).status == ERROR


def test_a_shard_with_rows_of_another_shape(sharded):
    _, dst = sharded
    other = json.loads((dst / "shard0" / "summary.json").read_text())["rows"][0]
    _edit_json(dst / "shard1" / "summary.json", lambda d: d["rows"].append(other))
    out = bench.derive(dst, dst.parent)
    assert out.status == ERROR and "not given" in out.reason


def test_a_shard_that_loaded_another_binary(sharded):
    _, dst = sharded
    _edit_json(dst / "shard1" / "binary.json", lambda d: d.update(sha256="0" * 64))
    out = bench.derive(dst, dst.parent)
    assert out.status == ERROR and "binary" in out.reason


def test_assign_balances_modes_and_keeps_suite_order():
    suite = load_suite("full", REPO)
    parts = bench_shards.assign(list(suite.shapes), 2)
    assert sorted(ss.shape.key for p in parts for ss in p) == sorted(ss.shape.key for ss in suite.shapes)
    loads = [sum(len(ss.modes) for ss in p) for p in parts]
    assert max(loads) - min(loads) <= max(len(ss.modes) for ss in suite.shapes)
    order = [ss.shape.key for ss in suite.shapes]
    for p in parts:
        keys = [ss.shape.key for ss in p]
        assert keys == sorted(keys, key=order.index)
    assert len(bench_shards.assign(list(suite.shapes)[:1], 4)) == 1  # never an empty shard


def test_canaries_and_probe_of_the_shards_combine_per_canary(tmp_path):
    """Each shard times every bench canary on its own GPU: the stage's entry of a canary is caught only when it
    was caught on every GPU; the content probe's flags are the union."""
    from evpack.model import StageOutcome
    from evpack.stages import bench_canaries

    def shard(caught: dict, flagged: list) -> StageOutcome:
        return StageOutcome(PASS, "ok", {
            "canaries": [{"name": n, "expected": "x", "caught": caught[n], "observed": f"{n} seen", "reason": ""}
                         for n in bench_canaries.NAMES],
            "content_probe": {"kernels": 8, "flagged": flagged}, "throttled": False})

    meta = {"suite": "s", "canonical": "c", "primary_mode": "cold"}
    merged = sm.summary_from_rows(meta, [])
    a = shard(dict.fromkeys(bench_canaries.NAMES, True), [])
    b = shard({**dict.fromkeys(bench_canaries.NAMES, True), bench_canaries.TIMING_AWARE: False}, ["mma/x"])
    out = bench_shards._combine(tmp_path, [a, b], merged, {}, [{"dir": "shard0"}, {"dir": "shard1"}], "ab" * 32)
    by = {c["name"]: c for c in out.data["canaries"]}
    assert list(by) == list(bench_canaries.NAMES)
    assert by[bench_canaries.CONTENT_CACHE]["caught"] and "2 of 2 GPUs" in by[bench_canaries.CONTENT_CACHE]["observed"]
    assert not by[bench_canaries.TIMING_AWARE]["caught"] and "1 of 2 GPUs" in by[bench_canaries.TIMING_AWARE]["observed"]
    assert out.data["content_probe"] == {"kernels": 16, "flagged": ["mma/x"]}
