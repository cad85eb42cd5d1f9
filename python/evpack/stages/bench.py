"""Stage `bench`: our variants x configs against every SDPA backend, same run, same harness.

run() writes into the stage folder:
  binary.json            the extension this process loaded (evpack.binary.loaded_binary)
  ceilings.json          raw times of the copy and 8192^3 matmul ceilings
  clocks.json            SM clock under load before/after, throttle flag
  gpu_limits.json        nvidia-smi's power limits, SM/memory clocks and clock event reasons before and after
                         the timed shapes, and the SKU (envlock.gpu_limits; informational, not required)
  samples.csv.xz         one row per timed sample: key, impl, variant, config, shape, mode, sample, time_us
                         (older packs: samples.csv.gz; every samples file likewise)
  summary.json.xz        rows (records + statistics), leaderboard, canonical speedup (older packs: summary.json)
  run.json               suite, options, device, GPU seconds and $ cost, previous pack id
  previous_summary.json.xz  copy of the previous pack's summary (only with option previous_pack)
  ab.json, ab_samples.csv.xz, ab_binary.json, ab_build/
                         only with --baseline REF: REF's build, its samples and the A/B verdicts
                         (evpack.timing.ab_stage; REF's rows are timed in the same rounds as ours)
  bench.log, *.png       progress log and plots
  integrity.json         what the timing-integrity checks cost (harness: persisting-L2 reset, drain)
  canary_bench.json      the impossible-speed canary timed through the same harness
  content_probe.json     (summary schema 2) every kernel of ours at the canonical shape, identical content timed
                         against fresh content (timing/content_probe.py)
  canary_content_cache.json, canary_timing_aware.json
                         (summary schema 2) the two other bench canaries (stages/bench_canaries.py)
  ab_confirm_samples.csv.xz
                         (--baseline, rule version 2 on) the confirmation round of rows the A/B would call SLOWER
                         (version 3: or FASTER)
With a GPU list (RunOptions.gpus) the suite's shapes are split over the GPUs, one process each, into
shard<k>/ folders that hold the files above (stages/bench_shards.py documents that layout).
derive() recomputes the summary from samples.csv.xz + ceilings.json (schema 2: + run.json's device and
clocks.json's clock for the exp floor) and requires it to match, then applies timing/integrity.py (speed of
light, device drain, persisting L2, timed outputs; schema 2: unique timed content, timed outputs against the
reference of their own inputs, the content probe) to the rows, and requires each canary to be caught by the
rule of its class. What a pack must hold follows the summary schema it was written with (1: before issue 25).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from pathlib import Path

from ..model import PackFacts
from ..records.ab import BaselineOption
from ..records.bench import AbRecord, BenchRow, Clocks, ContentProbe
from ..records.bench_stage import (
    BenchOutcomeData,
    HarnessCounters,
    IntegrityVerdict,
    OutcomeExtras,
    StageRow,
    StageRun,
)
from ..records.binary import BinaryRecord
from ..records.stage_options import RunOptions
from ..timing import ab_stage, content_probe, plots, shards
from ..timing import summary as sm
from ..timing.suites import ADHOC, Suite, load_suite, with_adhoc
from . import bench_canaries, bench_outcome, bench_shards
from .base import ERROR, FAIL, PASS, SKIPPED, StageContext, StageOutcome, read_json, write_json
from .order import declared

NAME = "bench"
SPEC = declared(NAME)  # stages/order.py: the one declaration of this stage
NEEDS_GPU, TIMEOUT_S = SPEC.needs_gpu, SPEC.timeout_s
REQUIRED_FILES = SPEC.required_files  # raw files a stage that decided keeps (verify requires them)
BINARY_RECORD = SPEC.binary_record  # the record of the binary a passing stage loaded
REQUIRED = ("ceilings.json", "run.json", "clocks.json", "binary.json")  # and the summary and samples
META_KEYS = bench_outcome.META_KEYS
CANARY = bench_canaries.SIDE_STREAM
CANARY_FILE = bench_canaries.FILES[CANARY]
CANARIES = SPEC.canaries  # every canary whose gate is this stage: bench_canaries.NAMES
INTEGRITY_FILE = "integrity.json"
GPU_LIMITS_FILE = "gpu_limits.json"
PROBE_SEED = 0x9B0BE

log = logging.getLogger(__name__)


def resolve_suite(options: dict, repo: Path) -> Suite:
    """The run's suite; in a shard process of a sharded benchmark, only the shapes of that shard."""
    opts = RunOptions.from_json(options)
    name = opts.suite or "quick"
    shapes = opts.shapes or []
    suite = with_adhoc(load_suite("quick", repo), shapes, only=True) if name == ADHOC else \
        with_adhoc(load_suite(name, repo), shapes)
    only = opts.shard_shapes
    if only is None:
        return suite
    return dataclasses.replace(suite, shapes=tuple(ss for ss in suite.shapes if ss.shape.key in set(only)))


def run_shard(pack_dir: Path, shard_dir: Path, repo: Path, options: dict) -> None:
    """One shard process of a sharded benchmark (bench_shards): the single-GPU run on its shapes, into shard_dir."""
    run(StageContext(pack_dir=pack_dir, dir=shard_dir, repo=repo, options=options))


def _run_sharded(ctx: StageContext, t_start: float) -> None:
    """The suite over RunOptions.gpus (bench_shards), then the stage folder's plots and run.json."""
    suite = resolve_suite(ctx.options, ctx.repo)
    gpus = RunOptions.from_json(ctx.options).gpus
    merged = bench_shards.run(ctx, suite)
    rows = sm.read_summary(ctx.dir)["rows"]
    plot_error = _plots(rows, ctx.dir, suite.primary_mode)
    wall = time.perf_counter() - t_start
    # every GPU of the pool is held for the stage's wall time
    _write_run_json(ctx, suite, wall * len(gpus), device=merged.device, shards=merged.shards, wall_s=wall,
                    **plot_error)
    log.info("bench: done in %.1f s on %d GPU(s)", wall, len(gpus))


def _plots(rows: list[dict], stage_dir: Path, mode: str) -> dict:
    """Draw the plots; {} or {"plot_error": why} for run.json (verify then does not require the plots)."""
    try:
        plots.make_all(rows, stage_dir, mode)
    except Exception as exc:  # noqa: BLE001 - a plot failure must not lose the measurements
        log.warning("plots failed: %s", exc)
        return {"plot_error": f"{type(exc).__name__}: {exc}"[:300]}
    return {}


def _write_run_json(ctx: StageContext, suite: Suite, gpu_seconds: float, **extra) -> None:
    """run.json: suite, shapes, options, what the run cost, the previous pack (copied here) and the baseline,
    plus `extra` (the device, and the shards of a sharded run)."""
    prev = _copy_previous(ctx.options, ctx.dir)
    rate = cost_per_hour(ctx.options)
    write_json(ctx.dir / "run.json", {
        "schema": 1, "suite": suite.name, "canonical": suite.canonical.key, "primary_mode": suite.primary_mode,
        "shapes": [s.shape.key for s in suite.shapes],
        "options": {k: v for k, v in ctx.options.items() if isinstance(v, (str, int, float, bool, list, type(None)))},
        **extra, "gpu_seconds": gpu_seconds, "cost_per_hour": rate,
        "cost_usd": None if rate is None else gpu_seconds / 3600 * rate, **prev, **_baseline_commit(ctx.options)})


def cost_per_hour(options: dict) -> float | None:
    rate = RunOptions.from_json(options).cost_per_hour
    for var in ("EVPACK_COST_PER_HOUR", "EVPACK_RATE_USD_PER_HOUR"):  # the latter is set by scripts/gpu-session
        if rate is None and os.environ.get(var):
            rate = os.environ[var]
    return float(rate) if rate is not None else None


def _copy_previous(options: dict, stage_dir: Path) -> dict:
    prev = RunOptions.from_json(options).previous_pack
    if not prev:
        return {}
    from ..timing.compare import RULE, CompareInputError, load

    try:
        data = load(Path(prev))
    except CompareInputError as exc:
        log.warning("previous pack not usable: %s", exc)
        return {"previous_pack": str(prev), "previous_error": str(exc)}
    sm.write_summary(stage_dir, data, sm.PREVIOUS_FILE)
    return {"previous_pack": str(prev), "previous_pack_id": Path(prev).resolve().name, "compare_rule": RULE}


def prepare(options: dict) -> None:
    """Before the bench's turn (runner.WarmStage, while the GPU checks run): torch, the extension and the
    timing modules loaded, and on one GPU the CUDA context made and cuDNN loaded. Nothing is launched on the
    GPU and nothing is measured: the bench starts, as always, from its turn."""
    import importlib

    import torch

    from .. import api  # noqa: F401
    from ..timing import ceilings, clocks, harness, shape_runner  # noqa: F401

    importlib.import_module("evpack._C")  # the extension the build made (loaded_binary hashes it at the turn)

    if not RunOptions.from_json(options).gpus:
        torch.empty(1, device="cuda")  # the context and the allocator; an allocation, no kernel
        torch.backends.cudnn.version()


def run(ctx: StageContext) -> None:
    t_start = time.perf_counter()
    handler = logging.FileHandler(ctx.dir / "bench.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    logging.getLogger("evpack").addHandler(handler)
    try:
        opts = RunOptions.from_json(ctx.options)
        if opts.gpus and opts.shard_shapes is None:
            _run_sharded(ctx, t_start)
        else:
            _run(ctx, t_start)
    finally:
        logging.getLogger("evpack").removeHandler(handler)
        handler.close()


def _run(ctx: StageContext, t_start: float) -> None:
    import torch

    from ..api import flash_attention  # loads the extension
    from ..binary import loaded_binary
    from ..envlock import gpu_limits
    from ..timing import ceilings, clocks, harness
    from ..timing.shape_runner import ShapeRunner

    opts = ctx.options
    suite = resolve_suite(opts, ctx.repo)
    variants = RunOptions.from_json(opts).variants
    head_binary = loaded_binary()
    write_json(ctx.dir / "binary.json", head_binary)
    base, ab_meta = _prepare_base(ctx, BinaryRecord.from_json(head_binary).sha256)
    dev = torch.cuda.current_device()
    info = harness.device_info(dev)
    uuid = str(getattr(torch.cuda.get_device_properties(dev), "uuid", "") or "") or None
    info["uuid"] = uuid
    stream = torch.cuda.Stream()
    log.info("bench: suite %s, %d shapes, %d timed modes, device %s", suite.name, len(suite.shapes),
             suite.measurements, info["name"])
    with torch.cuda.stream(stream):
        limits_before = gpu_limits()
        ceilings.busy()
        before = clocks.read(dev, uuid)
        stream.synchronize()
        ceil = ceilings.measure(stream)
        write_json(ctx.dir / "ceilings.json", ceil)
        runner = ShapeRunner(suite, flash_attention, stream, info["l2_bytes"], variants, t_start=time.perf_counter(),
                             base=base)
        for i, ss in enumerate(suite.shapes):
            runner.run_shape(ss)
            log.info("[%d/%d] %s done at %.1f s", i + 1, len(suite.shapes), ss.shape.key,
                     time.perf_counter() - t_start)
        t_extra = time.perf_counter()
        confirm_records, confirm_samples = _confirm(runner, suite)
        t_confirm = time.perf_counter() - t_extra
        probe = _probe(runner, suite, stream)
        write_json(ctx.dir / content_probe.FILE, probe)
        t_probe = time.perf_counter() - t_extra - t_confirm
        bench_canaries.run(ctx.dir, stream)
        _write_integrity(ctx.dir, runner.records, {"confirm_s": round(t_confirm, 2), "probe_s": round(t_probe, 2),
                                                   "canaries_s": round(time.perf_counter() - t_extra - t_confirm
                                                                       - t_probe, 2)})
        ceilings.busy()
        after = clocks.read(dev, uuid)
        stream.synchronize()
        write_json(ctx.dir / GPU_LIMITS_FILE, {"schema": 1, "before": limits_before, "after": gpu_limits()})
    clk = clocks.judge(before, after)
    write_json(ctx.dir / "clocks.json", clk)
    judged = Clocks.from_json(clk)
    if judged.throttled:
        log.warning("bench: throttled: %s", judged.reason)
    from ..timing.roofline import physics_of

    physics = physics_of(info, clocks.highest_sm_mhz(clk))
    meta = {"suite": suite.name, "canonical": suite.canonical.key, "primary_mode": suite.primary_mode}
    records, base_records, samples, base_samples = ab_stage.split(runner.records, runner.samples)
    summary = sm.build_summary(meta, records, samples, ceilings.rates(ceil), physics=physics)
    sm.write_samples(ctx.dir / sm.SAMPLES_FILE, records, samples)
    sm.write_summary(ctx.dir, summary)
    if ab_meta is not None:
        ab_stage.write(ctx.dir, ab_meta, summary["rows"], samples, base_records, base_samples, confirm_records,
                       confirm_samples)
    plot_error = _plots(summary["rows"], ctx.dir, suite.primary_mode)
    secs = time.perf_counter() - t_start
    sleep_rate = harness.sleep_cycles_per_s(stream)
    _write_run_json(ctx, suite, secs, device=info, sleep_cycles_per_s=sleep_rate, **plot_error)
    log.info("bench: done in %.1f s", secs)


def _baseline_commit(opts: dict) -> dict:
    """run.json's record that this run had a baseline (derive then requires ab.json)."""
    spec = RunOptions.from_json(opts).baseline
    return {"baseline_commit": BaselineOption.from_json(spec).commit} if spec else {}


def _prepare_base(ctx: StageContext, head_sha256: str):
    """REF's extension for --baseline (None, None without one); logs the A/B error, never raises for it."""
    if not RunOptions.from_json(ctx.options).baseline:
        return None, None
    from ..gitinfo import git_info

    base, meta = ab_stage.prepare(ctx.options, ctx.dir, head_sha256, git_info(ctx.repo).dirty)
    ab = AbRecord.from_json(meta)
    if ab.status != "pass":
        log.warning("bench: A/B part %s: %s", ab.status, ab.reason)
    else:
        log.info("bench: base %s (%s) loaded, %d kernels", ab.base_ref, str(ab.base_commit)[:12], len(base.kernels))
    return base, meta


def _confirm(runner, suite) -> tuple[list[dict], dict]:
    """The A/B's confirmation round (timing/ab_confirm.py); nothing without a base. A failure leaves the candidate
    rows unconfirmed (UNSURE), never the stage broken."""
    if runner.base is None:
        return [], {}
    from ..timing import ab_confirm

    try:
        return ab_confirm.run(runner, suite, runner.records, runner.samples)
    except Exception as exc:  # noqa: BLE001 - an unconfirmed row is UNSURE, the head's benchmark stands
        log.warning("A/B: confirmation round failed: %s", exc)
        import torch

        torch.cuda.synchronize()
        return [], {}


def _probe(runner, suite, stream) -> dict:
    """The content probe (timing/content_probe.py) of every kernel of ours built for the canonical shape."""
    shape = suite.canonical
    kernels = []
    for var in runner.variants:
        if shape.dtype not in var.dtypes:
            continue
        for cfg in var.configs_for(shape.D):
            def fn(q, k, v, _name=var.name, _cfg=cfg.name):
                return runner.op(q, k, v, causal=shape.causal, variant=_name, config=_cfg)
            kernels.append((sm.OURS, var.name, cfg.name, fn))
    return content_probe.run(kernels, shape, stream, PROBE_SEED)


def _write_integrity(stage_dir: Path, records: list[dict], extra_s: dict | None = None) -> None:
    """What the integrity checks cost in this run (per batch, from the harness's own counters)."""
    from ..timing import integrity

    counted = [HarnessCounters.from_json(r) for r in records]
    ours = [c for c in counted if c.timed_checks is not None]
    resets = [c.l2_reset_us_per_batch for c in ours if c.l2_reset_us_per_batch is not None]
    drains = sorted(c.drain_us_median for c in counted if c.drain_us_median is not None)
    write_json(stage_dir / INTEGRITY_FILE, {
        "drain_limit_us": integrity.DRAIN_LIMIT_US, "rows_with_checks": len(ours),
        "timed_checks": sum(c.timed_checks for c in ours),
        "l2_reset_us_per_batch_median": sorted(resets)[len(resets) // 2] if resets else None,
        "drain_us_median_of_rows": drains[len(drains) // 2] if drains else None,
        "drain_us_max_of_rows": drains[-1] if drains else None,
        "timed_ref_checks": sum(c.timed_ref_checks or 0 for c in ours),
        "unique_calls": sum(c.unique_calls or 0 for c in counted),
        "seconds": extra_s or {}})


def registry_config(name: str) -> str:
    return bench_canaries.registry_config(name)


def canary_outcome(stage_dir: Path, rates: dict[str, float], name: str = CANARY, *, schema: int = 1,
                   physics=None) -> dict:
    """The canary matrix entry of one bench canary (stages/bench_canaries.py judges it)."""
    return bench_canaries.outcome(stage_dir, rates, name, schema=schema, physics=physics)


def _integrity_decision(rows: list[dict], rates: dict[str, float], *, schema: int = 1, physics=None,
                        cache_flags: dict | None = None) -> tuple[list[dict], str, str, dict]:
    """Rows judged by timing/integrity.py, and the status/reason that adds (PASS, '' when nothing broke)."""
    from ..timing import integrity

    judged, summary = integrity.judge(rows, rates, schema=schema, physics=physics, cache_flags=cache_flags)
    verdict = IntegrityVerdict.from_json(summary)
    if not verdict.broken_rows:
        return judged, PASS, "", summary
    status = ERROR if any(BenchRow.from_json(r).status == "error" and r is not o
                          for r, o in zip(judged, rows, strict=True)) else FAIL
    return judged, status, f"{verdict.broken_rows} rows break timing integrity (first {verdict.first})", summary


def _decide(rows: list[dict], throttled: bool) -> tuple[str, str]:
    if not rows:
        return ERROR, "summary has no rows"
    rows = [StageRow.from_json(r) for r in rows]
    ours, sdpa = sm.OURS, sm.SDPA
    wrong = [r for r in rows if r.impl == ours and r.status == "fail"]
    not_run = [r for r in rows if r.must_run and r.status in ("error", "unsupported")]
    broken_sdpa = [r for r in not_run if r.impl == sdpa]
    broken_ours = [r for r in not_run if r.impl == ours]
    skipped = [r for r in rows if r.must_run and r.status == "skipped"]
    note = " (throttled: clocks.json)" if throttled else ""
    if broken_sdpa:
        r = broken_sdpa[0]
        return ERROR, f"SDPA default did not run on {len(broken_sdpa)} rows (first {r.key}: {r.reason[:150]})"
    if wrong or broken_ours:
        parts = []
        if wrong:
            r = wrong[0]
            parts.append(f"{len(wrong)} rows wrong after timing (first {r.key}: max err "
                         f"{r.max_abs_err} > bound {r.err_bound})")
        if broken_ours:
            r = broken_ours[0]
            parts.append(f"{len(broken_ours)} rows of ours did not run (first {r.key}: {r.reason[:150]})")
        return FAIL, "; ".join(parts) + note
    if skipped:
        r = skipped[0]
        return SKIPPED, f"{len(skipped)} rows not measured (first {r.key}: {r.reason[:150]}){note}"
    timed = sum(1 for r in rows if r.median_us is not None)
    return PASS, f"{timed} rows timed over {len({r.shape for r in rows})} shapes, outputs re-checked{note}"


def derive(stage_dir: Path, pack_dir: Path) -> StageOutcome:
    if shards.is_sharded(stage_dir):  # measured over several GPUs: each shard by the rules below
        return bench_shards.derive(stage_dir, pack_dir, _derive_one)
    return _derive_one(stage_dir, pack_dir)


def required_files(stage_dir: Path) -> tuple[str, ...]:
    """The raw files `verify` requires of a bench stage that decided (REQUIRED_FILES, in every shard's folder
    when the benchmark was sharded over GPUs), and the plots its rows give (unless run.json records that
    plotting failed) and the previous pack's summary when run.json names that pack: no file of the stage can
    go missing unnoticed."""
    whole = _expected_plots(stage_dir) + _previous_file(stage_dir)  # of the whole stage folder
    each = REQUIRED_FILES + _limits_file(stage_dir.parent)  # what every single-GPU run (or shard) writes
    if not shards.is_sharded(stage_dir):
        return each + whole + ab_stage.required_files(stage_dir)
    top = ("bench.log", "run.json", "summary.json*", "binary.json", shards.SHARDS_FILE, "procs.json")
    try:
        folders = shards.shard_dirs(stage_dir)
    except (OSError, ValueError, KeyError, TypeError):
        return top + whole  # an unreadable shards.json: derive names it
    return top + whole + tuple(f"{d.name}/{f}" for d in folders
                               for f in each + _expected_plots(d) + ab_stage.required_files(d))


def _previous_file(stage_dir: Path) -> tuple[str, ...]:
    """previous_summary.json in a stored form when run.json names the previous pack it was copied from (the
    run writes the two together): without it the comparison with that pack, and its regressions, are gone."""
    try:
        named = StageRun.from_json(read_json(stage_dir / "run.json")).previous_pack_id
    except (OSError, ValueError, AttributeError):
        return ()  # an unreadable run.json is named by the derivation
    return (f"{sm.PREVIOUS_FILE}*",) if named else ()


def _limits_file(pack_dir: Path) -> tuple[str, ...]:
    """(GPU_LIMITS_FILE,) for a pack whose env.json records nvidia-smi's limits (the code that records them
    there writes the file around the timed shapes); () for an older pack."""
    try:
        env = read_json(pack_dir / "env.json")
        return (GPU_LIMITS_FILE,) if "limits" in (env.get("nvidia_smi_query") or {}) else ()
    except (OSError, ValueError, AttributeError, TypeError):
        return ()  # an unreadable env.json is named by the root-file checks


def _expected_plots(stage_dir: Path) -> tuple[str, ...]:
    try:
        run_rec, summary = read_json(stage_dir / "run.json"), sm.read_summary(stage_dir)
        if StageRun.from_json(run_rec).plot_error:
            return ()
        return plots.expected_files(summary["rows"], summary["primary_mode"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ()  # unreadable records: the derivation names them


def _schema_files(schema: int) -> tuple[str, ...]:
    """Files a bench folder written with this summary schema must hold beyond REQUIRED."""
    if schema < 2:
        return ()
    return (INTEGRITY_FILE, content_probe.FILE, *(bench_canaries.FILES[n] for n in bench_canaries.names_for(schema)))


def _probe_problem(probe: dict, rows: list[dict]) -> str:
    """'' when the content probe judged every kernel of ours timed at its shape, else what is missing."""
    bad = content_probe.problems(probe)
    held = ContentProbe.from_json(probe)  # its entries are objects: problems() judged each
    judged = {(e.variant, e.config) for e in held.entries
              if e.impl == sm.OURS and content_probe.verdict(e.raw).flagged is not None}
    timed = sorted({(r.variant, r.config) for r in map(BenchRow.from_json, rows) if r.impl == sm.OURS
                    and r.shape == held.shape and r.median_us is not None})
    bad += [f"{v}/{c}: not probed" for v, c in timed if (v, c) not in judged]
    return f"{content_probe.FILE}: {len(bad)} problems (first: {bad[0]})" if bad else ""


def _derive_one(stage_dir: Path, pack_dir: Path) -> StageOutcome:
    missing = [n for n in REQUIRED if not (stage_dir / n).is_file()]
    if not sm.has_samples(stage_dir):
        missing.insert(0, sm.SAMPLES_FILE)
    if not sm.has_summary(stage_dir):
        missing.insert(0, sm.SUMMARY_FILE)
    if missing:
        return StageOutcome(ERROR, f"missing {', '.join(missing)}")
    try:
        written = sm.read_summary(stage_dir)
        ceil, run_info = read_json(stage_dir / "ceilings.json"), read_json(stage_dir / "run.json")
        clk = read_json(stage_dir / "clocks.json")
        samples = sm.read_samples(sm.samples_file(stage_dir))
        from ..timing.ceilings import rates
        from ..timing.clocks import highest_sm_mhz
        from ..timing.roofline import physics_of

        schema = written.get("schema", 1)
        if schema not in sm.SCHEMAS:
            return StageOutcome(ERROR, f"summary.json: unknown schema {schema!r}")
        physics = physics_of(StageRun.from_json(run_info).device, highest_sm_mhz(clk)) if schema >= 2 else None
        meta = {k: written[k] for k in META_KEYS}
        problem = bench_outcome.meta_problem(written, run_info)
        if problem:
            return StageOutcome(ERROR, problem)
        records = sm.records_of(written)
        recomputed = sm.build_summary(meta, records, samples, rates(ceil), schema=schema, physics=physics)
    except (ValueError, KeyError, TypeError, AttributeError, json.JSONDecodeError, OSError) as exc:
        return StageOutcome(ERROR, f"corrupt bench files: {type(exc).__name__}: {exc}")
    missing = [n for n in _schema_files(schema) if not (stage_dir / n).is_file()]
    if missing:
        return StageOutcome(ERROR, f"missing {', '.join(missing)} (required of a summary of schema {schema})")
    older_may_hold = (INTEGRITY_FILE, CANARY_FILE)  # schema-1 folders after the integrity checks hold these
    newer = [n for n in _schema_files(sm.SCHEMA) if n not in _schema_files(schema) and n not in older_may_hold
             and (stage_dir / n).is_file()]
    if newer:  # files only a newer writer makes: the summary was written as an older schema than the run's
        return StageOutcome(ERROR, f"summary.json is schema {schema} but the folder holds {newer[0]} (schema "
                                   f"{sm.SCHEMA})")
    diffs = sm.key_problems(records) + sm.differences(written, recomputed)
    orphans = sorted(set(samples) - {BenchRow.from_json(r).key for r in records})
    diffs += [f"{k}: samples without a row" for k in orphans]
    if diffs:
        return StageOutcome(ERROR, f"summary.json disagrees with the samples/ceilings in {len(diffs)} "
                                   f"places (first: {diffs[0]})")
    rows = recomputed["rows"]  # the rows as the integrity checks, the comparisons and the A/B take them
    throttled = bool(Clocks.from_json(clk).throttled)
    status, reason = _decide(rows, throttled)
    new_format = (stage_dir / INTEGRITY_FILE).is_file()  # packs before the integrity checks have no such file
    cache_flags, probe = {}, None
    if schema >= 2:
        try:
            probe = read_json(stage_dir / content_probe.FILE)
            problem = _probe_problem(probe, rows)
        except (ValueError, OSError, KeyError, TypeError, AttributeError) as exc:
            return StageOutcome(ERROR, f"corrupt {content_probe.FILE}: {type(exc).__name__}: {exc}")
        if problem:
            return StageOutcome(ERROR, problem)
        cache_flags = content_probe.flags(probe)
    if new_format:
        ceil_rates = rates(ceil)
        _, i_status, i_reason, i_summary = _integrity_decision(rows, ceil_rates, schema=schema, physics=physics,
                                                               cache_flags=cache_flags)
        if i_status != PASS:
            reason = i_reason if status == PASS else f"{i_reason}; {reason}"
            status = ERROR if ERROR in (status, i_status) else FAIL
    data = bench_outcome.summary_data(recomputed, throttled=throttled, run_info=run_info,
                                      so_sha256=BinaryRecord.from_json(read_json(stage_dir / "binary.json")).sha256)
    data.update(OutcomeExtras(
        integrity=i_summary if new_format else None,
        canaries=bench_canaries.outcomes(stage_dir, ceil_rates, schema=schema, physics=physics) if new_format else None,
        content_probe=None if probe is None else {"kernels": len(ContentProbe.from_json(probe).entries),
                                                  "flagged": sorted(f"{v}/{c}" for v, c in cache_flags)},
        physics=None if physics is None else physics.to_json()).to_json())
    problem = bench_outcome.add_previous(stage_dir, rows, run_info, data)
    if problem:
        return StageOutcome(ERROR, problem)
    reason += bench_outcome.canonical_note(recomputed)
    ab_data, problem = ab_stage.derive(stage_dir, rows, samples, StageRun.from_json(run_info).baseline_commit)
    if problem:
        return StageOutcome(ERROR, problem)
    if ab_data is not None:
        reason += bench_outcome.add_ab(data, ab_data)
    return StageOutcome(status, reason, data)


def facts(outcome: StageOutcome, pack: PackFacts) -> PackFacts:
    """perf-regression (rows of ours slower than the compared pack beyond noise) and the canonical speedup."""
    d = BenchOutcomeData.from_json(outcome.data)
    return pack.with_(perf_regression=bool(d.regressions), canonical_speedup=d.canonical_speedup)


def headline(outcome: StageOutcome) -> dict:
    """The numbers a merged verdict shows for this pack's GPU: the canonical shape, the best of ours there
    and its speedup against each SDPA backend ({} when the benchmark did not decide or has no canonical row)."""
    d = BenchOutcomeData.from_json(outcome.data)
    if outcome.status not in (PASS, FAIL) or d.canonical_speedup is None:
        return {}
    vs = d.canonical_speedup_vs or {"default": d.canonical_speedup}
    return {"canonical shape": d.canonical_shape, "best of ours": d.canonical_best,

            **{f"speedup vs SDPA {backend}": value for backend, value in vs.items()}}


__all__ = ["NAME", "NEEDS_GPU", "TIMEOUT_S", "run", "derive", "headline"]
