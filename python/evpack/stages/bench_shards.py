"""The benchmark over several GPUs: the suite's shapes split into shards, one process per GPU.

Used when the run has a GPU list (RunOptions.gpus: several GPUs visible, or --gpus). Layout of bench/:
  shards.json    {"schema": 1, "shards": [{"dir": "shard0", "shapes": [shape keys]}, ...]}
  shard<k>/      a whole single-GPU bench folder (every file bench.py documents) for its shapes,
                 written by one process pinned to one GPU: its rows, samples, its own GPU's ceilings,
                 clocks, integrity checks, impossible-speed canary and, with --baseline, its A/B
  shard<k>.log   that process's output; procs.json: its command, exit, duration and GPU (index, UUID)
  summary.json   every shard's rows (statistics from the shard's own samples and ceilings), with the
                 leaderboard and canonical speedup over them
  run.json       suite, shapes, options, device (the first shard's), shards (GPU and shapes of each),
                 gpu_seconds (the stage's wall time x GPUs: what was rented), cost
  binary.json, bench.log, *.png, previous_summary.json (as in a single-GPU run)
A shape is measured whole on one GPU, so a row's ratios to SDPA come from its own GPU and process;
nothing is ever compared across GPUs. derive() re-derives each shard with the single-GPU rules,
then requires the merged summary, the shape coverage and the binary to agree.
"""
from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..model import ERROR, PASS, StageOutcome, worst
from ..records.bench import BenchSummary, GpuRef, Shard
from ..records.bench_stage import BenchOutcomeData, OutcomeExtras, ShardGpu, StageRun
from ..records.binary import BinaryRecord
from ..records.canary import canary_records
from ..records.procs import ProcRecord
from ..records.stage_options import RunOptions
from ..timing import summary as sm
from ..timing.ab_stage import load as load_ab
from ..timing.roofline import shape_flops
from ..timing.shards import SHARDS_FILE
from . import bench_outcome
from .base import read_json, write_json
from .procs import Job, run_jobs

SCHEMA = 1
SHARD_TIMEOUT_S = 870  # inside the bench stage's TIMEOUT_S
log = logging.getLogger("evpack.stages")


def assign(shapes, n: int) -> list[list]:
    """Split suite shapes over n shards, longest first onto the least loaded (a shape's weight: its timed
    modes, each about one time cap per implementation, then its FLOPs). Order within a shard follows the suite."""
    n = max(1, min(n, len(shapes)))
    order = sorted(range(len(shapes)), key=lambda i: (-len(shapes[i].modes), -shape_flops(shapes[i].shape), i))
    loads, picks = [0.0] * n, [[] for _ in range(n)]
    for i in order:
        k = min(range(n), key=lambda j: (loads[j], j))
        loads[k] += len(shapes[i].modes) + shape_flops(shapes[i].shape) / 1e13
        picks[k].append(i)
    return [[shapes[i] for i in sorted(p)] for p in picks if p]


@dataclass(frozen=True)
class Merged:
    """The shards' part of run.json (merge): each shard's dir, shapes, GPU, device and gpu_seconds, and the
    device of the first shard that recorded one."""

    shards: list[dict]
    device: Any


def run(ctx, suite) -> Merged:
    """Measure the suite on the run's GPU list (RunOptions.gpus), one shard process per GPU; write shards.json,
    the merged summary.json and binary.json. Returns the shards' part of run.json."""
    from .logfollow import LogFollower  # shows each shard's log on the terminal as it grows

    gpus = RunOptions.from_json(ctx.options).gpus
    parts = assign(list(suite.shapes), len(gpus))
    shards = [{"dir": f"shard{k}", "shapes": [ss.shape.key for ss in part]} for k, part in enumerate(parts)]
    write_json(ctx.dir / SHARDS_FILE, {"schema": SCHEMA, "shards": shards})
    specs = [Shard.from_json(s) for s in shards]
    jobs = []
    for s in specs:
        (ctx.dir / s.dir).mkdir()
        opts = dict(ctx.options, shard_shapes=s.shapes, previous_pack=None)
        cmd = [sys.executable, "-m", "evpack", "_bench-shard", "--pack", str(ctx.pack_dir), "--dir",
               str(ctx.dir / s.dir), "--options", json.dumps(opts)]
        jobs.append(Job(s.dir, cmd, SHARD_TIMEOUT_S))
    log.info("bench: %d shapes in %d shard(s) over GPU(s) %s", len(suite.shapes), len(shards),
             ", ".join(str(GpuRef.from_json(g).index) for g in gpus))
    followers = [LogFollower(ctx.dir / f"{s.dir}.log", f"bench/{s.dir}") for s in specs]
    for f in followers:
        f.start()
    try:
        procs = run_jobs(jobs, ctx.dir, ctx.repo, gpus=gpus)
    finally:
        for f in followers:
            f.stop.set()
            f.join()
    return merge(ctx.dir, shards, suite, procs)


def merge(stage_dir: Path, shards: list[dict], suite, procs: dict) -> Merged:
    """summary.json and binary.json of the stage folder from the shards that finished (a shard that did not:
    derive says so). Returns the shards' part of run.json (dir, shapes, GPU, device, gpu_seconds of each)."""
    rows, runs, devices = [], [], []
    for s in map(Shard.from_json, shards):
        d = stage_dir / s.dir
        if sm.has_summary(d):
            rows += sm.read_summary(d)["rows"]
        if (d / "binary.json").is_file() and not (stage_dir / "binary.json").is_file():
            write_json(stage_dir / "binary.json", read_json(d / "binary.json"))
        info = StageRun.from_json(read_json(d / "run.json") if (d / "run.json").is_file() else {})
        runs.append({"dir": s.dir, "shapes": s.shapes, "gpu": ProcRecord.from_json(procs.get(s.dir, {})).gpu,
                     "device": info.device, "gpu_seconds": info.gpu_seconds})
        devices.append(info.device)
    meta = {"suite": suite.name, "canonical": suite.canonical.key, "primary_mode": suite.primary_mode}
    sm.write_summary(stage_dir, sm.summary_from_rows(meta, rows))
    return Merged(runs, next((device for device in devices if device), None))


def _outside(stage_dir: Path, s: Shard) -> str | None:
    """A shard holding rows of shapes it was not given (None when it holds only its own)."""
    d = stage_dir / s.dir
    if not d.is_dir():
        return f"{s.dir}: missing"
    rows = BenchSummary.from_json(sm.read_summary(d)).rows if sm.has_summary(d) else ()
    outside = sorted({r.shape for r in rows} - set(s.shapes))
    return f"{s.dir}: rows of shapes it was not given ({outside[0]})" if outside else None


def derive(stage_dir: Path, pack_dir: Path, derive_single) -> StageOutcome:
    """Each shard by the single-GPU rules, then the merged summary, coverage and binary."""
    try:
        shards = read_json(stage_dir / SHARDS_FILE)["shards"]
        run_info = read_json(stage_dir / "run.json")
        written = sm.read_summary(stage_dir)
        binary = read_json(stage_dir / "binary.json").get("sha256")
        procs = read_json(stage_dir / "procs.json")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return StageOutcome(ERROR, f"corrupt sharded bench files: {type(exc).__name__}: {exc}")
    specs = [Shard.from_json(s) for s in shards]
    names = ["" if s.dir is None else s.dir for s in specs]
    if not shards or len(set(names)) != len(names) or any("/" in n or not n.startswith("shard") for n in names):
        return StageOutcome(ERROR, f"{SHARDS_FILE}: bad shard list {names}")
    given = [k for s in specs for k in s.shapes]
    if sorted(given) != sorted(StageRun.from_json(run_info).shapes or []) or len(set(given)) != len(given):
        return StageOutcome(ERROR, "the shards do not cover run.json's shapes exactly once")
    outcomes, rows, gpus = [], [], []
    for s in specs:
        problem = _outside(stage_dir, s)
        if problem:
            return StageOutcome(ERROR, problem)
        d = stage_dir / s.dir
        out = derive_single(d, pack_dir)
        rec = ProcRecord.from_json(procs.get(s.dir))
        if not isinstance(procs.get(s.dir) or {}, dict) or not isinstance(rec.gpu or {}, dict):
            return StageOutcome(ERROR, f"procs.json: the record of {s.dir}, or its GPU, is not an object")
        gpu = rec.gpu_ref
        gpus.append({"dir": s.dir, "index": gpu.index, "uuid": gpu.uuid, "status": out.status,
                     "shapes": len(s.shapes)})
        if out.status == ERROR:
            return StageOutcome(ERROR, f"{s.dir} (GPU {gpu.index}, {gpu.uuid}): {out.reason}", {"gpus": gpus})
        if BinaryRecord.from_json(read_json(d / "binary.json")).sha256 != binary:
            return StageOutcome(ERROR, f"{s.dir}: loaded a binary other than bench/binary.json's")
        outcomes.append(out)
        rows += sm.read_summary(d)["rows"]
    meta = {k: written[k] for k in bench_outcome.META_KEYS}
    problem = bench_outcome.meta_problem(written, run_info)
    if problem:
        return StageOutcome(ERROR, problem)
    merged = sm.summary_from_rows(meta, rows)
    diffs = sm.differences(written, merged)
    if diffs:
        return StageOutcome(ERROR, f"summary.json disagrees with the shards' rows in {len(diffs)} places "
                                   f"(first: {diffs[0]})")
    return _combine(stage_dir, outcomes, merged, run_info, gpus, binary)


def _combine(stage_dir: Path, outcomes: list[StageOutcome], merged: dict, run_info: dict, gpus: list[dict],
             binary: str | None) -> StageOutcome:
    rows = merged["rows"]  # as the previous-pack comparison takes them
    datas = [o.data for o in outcomes]
    views = [BenchOutcomeData.from_json(d) for d in datas]
    status = worst(o.status for o in outcomes)
    data = bench_outcome.summary_data(merged, throttled=any(v.throttled for v in views), run_info=run_info,
                                      so_sha256=binary)
    integrity = canaries = probe = None
    if all("integrity" in d for d in datas):
        counted = [k for k in views[0].integrity.raw if k != "first"]
        integrity = {**{k: sum(v.integrity.raw.get(k) or 0 for v in views) for k in counted},
                     "first": next((v.integrity.first for v in views if v.integrity.first), None)}
    if all(v.canaries for v in views):
        canaries = []
        per_gpu = [canary_records(d) for d in datas]
        for name in dict.fromkeys(c.name for records in per_gpu for c in records):
            entries = [c for records in per_gpu for c in records if c.name == name]
            caught = len(entries) == len(datas) and all(c.caught for c in entries)
            first = next((c for c in entries if c.caught == caught), entries[0])
            canaries.append(replace(first, caught=caught, observed=f"{first.observed} (caught on "
                                    f"{sum(c.caught for c in entries)} of {len(datas)} GPUs)").to_json())
    if all("content_probe" in d for d in datas):
        probe = {"kernels": sum(v.content_probe.kernels for v in views),
                 "flagged": sorted({f for v in views for f in v.content_probe.flagged})}
    data.update(OutcomeExtras(gpus=gpus, integrity=integrity, canaries=canaries, content_probe=probe).to_json())
    timed = BenchSummary.from_json(merged).rows
    bad = [(ShardGpu.from_json(g), o) for g, o in zip(gpus, outcomes, strict=True) if o.status != PASS]
    reason = (f"{sum(1 for r in timed if r.median_us is not None)} rows timed over {len({r.shape for r in timed})} "
              f"shapes on {len(gpus)} GPU(s), outputs re-checked")
    if bad:
        reason = "; ".join(f"{g.dir}: {o.reason}" for g, o in bad)

    problem = bench_outcome.add_previous(stage_dir, rows, run_info, data)
    if problem:
        return StageOutcome(ERROR, problem)
    reason += bench_outcome.canonical_note(merged)
    full = load_ab(stage_dir)
    if full is not None:  # each shard's ab.json was re-derived from its samples above
        reason += bench_outcome.add_ab(data, full)
    return StageOutcome(status, reason, data)
