"""Stage `bench`: our variants x configs against every SDPA backend, same run, same harness.

run() writes into the stage folder:
  binary.json            the extension this process loaded (evpack.binary.loaded_binary)
  ceilings.json          raw times of the copy and 8192^3 matmul ceilings
  clocks.json            SM clock under load before/after, throttle flag
  samples.csv.gz         one row per timed sample: key, impl, variant, config, shape, mode, sample, time_us
  summary.json           rows (records + statistics), leaderboard, canonical speedup
  run.json               suite, options, device, GPU seconds and $ cost, previous pack id
  previous_summary.json  copy of the previous pack's summary (only with option previous_pack)
  ab.json, ab_samples.csv.gz, ab_binary.json, ab_build/
                         only with --baseline REF: REF's build, its samples and the A/B verdicts
                         (evpack.timing.ab_stage; REF's rows are timed in the same rounds as ours)
  bench.log, *.png       progress log and plots
  integrity.json         what the timing-integrity checks cost (harness: persisting-L2 reset, drain)
  canary_bench.json      the impossible-speed canary timed through the same harness
With a GPU list (options["gpus"]) the suite's shapes are split over the GPUs, one process each, into
shard<k>/ folders that hold the files above (stages/bench_shards.py documents that layout).
derive() recomputes the summary from samples.csv.gz + ceilings.json and requires it to match,
then applies bench/integrity.py (speed of light, device drain, persisting L2, timed outputs) to
the rows, and requires the canary to be caught by those rules.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from pathlib import Path

from ..model import PackFacts
from ..timing import ab_stage, plots, shards
from ..timing import summary as sm
from ..timing.suites import ADHOC, Suite, load_suite, with_adhoc
from . import bench_outcome, bench_shards
from .base import ERROR, FAIL, PASS, SKIPPED, StageContext, StageOutcome, read_json, write_json

NAME = "bench"
NEEDS_GPU = True
TIMEOUT_S = 900  # full suite budget 8 min + ceilings, build load and plots
REQUIRED_FILES = ("bench.log", "run.json", "samples.csv.gz", "summary.json", "ceilings.json", "clocks.json")  # raw files a stage that decided pass/fail keeps (verify requires them)
BINARY_RECORD = "binary.json"  # a passing stage keeps the record of the binary it loaded (verify requires it)
REQUIRED = ("summary.json", sm.SAMPLES_FILE, "ceilings.json", "run.json", "clocks.json", "binary.json")
META_KEYS = bench_outcome.META_KEYS
CANARY = "canary_side_stream"
CANARY_FILE = "canary_bench.json"
INTEGRITY_FILE = "integrity.json"

log = logging.getLogger(__name__)


def resolve_suite(options: dict, repo: Path) -> Suite:
    """The run's suite; in a shard process of a sharded benchmark, only the shapes of that shard."""
    name = options.get("suite") or "quick"
    shapes = options.get("shapes") or []
    suite = with_adhoc(load_suite("quick", repo), shapes, only=True) if name == ADHOC else \
        with_adhoc(load_suite(name, repo), shapes)
    only = options.get("shard_shapes")
    if only is None:
        return suite
    return dataclasses.replace(suite, shapes=tuple(ss for ss in suite.shapes if ss.shape.key in set(only)))


def run_shard(pack_dir: Path, shard_dir: Path, repo: Path, options: dict) -> None:
    """One shard process of a sharded benchmark (bench_shards): the single-GPU run on its shapes, into shard_dir."""
    run(StageContext(pack_dir=pack_dir, dir=shard_dir, repo=repo, options=options))


def _run_sharded(ctx: StageContext, t_start: float) -> None:
    """The suite over options["gpus"] (bench_shards), then the stage folder's plots and run.json."""
    suite = resolve_suite(ctx.options, ctx.repo)
    merged = bench_shards.run(ctx, suite)
    rows = read_json(ctx.dir / "summary.json")["rows"]
    plot_error = _plots(rows, ctx.dir, suite.primary_mode)
    wall = time.perf_counter() - t_start
    # every GPU of the pool is held for the stage's wall time
    _write_run_json(ctx, suite, wall * len(ctx.options["gpus"]), device=merged["device"], shards=merged["shards"],
                    wall_s=wall, **plot_error)
    log.info("bench: done in %.1f s on %d GPU(s)", wall, len(ctx.options["gpus"]))


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
        "schema": 1, "suite": suite.name, "shapes": [s.shape.key for s in suite.shapes],
        "options": {k: v for k, v in ctx.options.items() if isinstance(v, (str, int, float, bool, list, type(None)))},
        **extra, "gpu_seconds": gpu_seconds, "cost_per_hour": rate,
        "cost_usd": None if rate is None else gpu_seconds / 3600 * rate, **prev, **_baseline_commit(ctx.options)})


def cost_per_hour(options: dict) -> float | None:
    rate = options.get("cost_per_hour")
    for var in ("EVPACK_COST_PER_HOUR", "EVPACK_RATE_USD_PER_HOUR"):  # the latter is set by scripts/gpu-session
        if rate is None and os.environ.get(var):
            rate = os.environ[var]
    return float(rate) if rate is not None else None


def _copy_previous(options: dict, stage_dir: Path) -> dict:
    prev = options.get("previous_pack")
    if not prev:
        return {}
    from ..timing.compare import CompareInputError, load

    try:
        data = load(Path(prev))
    except CompareInputError as exc:
        log.warning("previous pack not usable: %s", exc)
        return {"previous_pack": str(prev), "previous_error": str(exc)}
    write_json(stage_dir / "previous_summary.json", data)
    return {"previous_pack": str(prev), "previous_pack_id": Path(prev).resolve().name}


def run(ctx: StageContext) -> None:
    t_start = time.perf_counter()
    handler = logging.FileHandler(ctx.dir / "bench.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    logging.getLogger("evpack").addHandler(handler)
    try:
        if ctx.options.get("gpus") and ctx.options.get("shard_shapes") is None:
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
    from ..timing import ceilings, clocks, harness
    from ..timing.shape_runner import ShapeRunner

    opts = ctx.options
    suite = resolve_suite(opts, ctx.repo)
    head_binary = loaded_binary()
    write_json(ctx.dir / "binary.json", head_binary)
    base, ab_meta = _prepare_base(ctx, head_binary["sha256"])
    dev = torch.cuda.current_device()
    info = harness.device_info(dev)
    uuid = str(getattr(torch.cuda.get_device_properties(dev), "uuid", "") or "") or None
    info["uuid"] = uuid
    stream = torch.cuda.Stream()
    log.info("bench: suite %s, %d shapes, %d timed modes, device %s", suite.name, len(suite.shapes),
             suite.measurements, info["name"])
    with torch.cuda.stream(stream):
        ceilings.busy()
        before = clocks.read(dev, uuid)
        stream.synchronize()
        ceil = ceilings.measure(stream)
        write_json(ctx.dir / "ceilings.json", ceil)
        runner = ShapeRunner(suite, flash_attention, stream, info["l2_bytes"], opts.get("variants"),
                             t_start=time.perf_counter(), base=base)
        for i, ss in enumerate(suite.shapes):
            runner.run_shape(ss)
            log.info("[%d/%d] %s done at %.1f s", i + 1, len(suite.shapes), ss.shape.key,
                     time.perf_counter() - t_start)
        _write_integrity(ctx.dir, runner.records)
        _run_canary(ctx.dir, stream)
        ceilings.busy()
        after = clocks.read(dev, uuid)
        stream.synchronize()
    clk = clocks.judge(before, after)
    write_json(ctx.dir / "clocks.json", clk)
    if clk["throttled"]:
        log.warning("bench: throttled: %s", clk["reason"])
    meta = {"suite": suite.name, "canonical": suite.canonical.key, "primary_mode": suite.primary_mode}
    records, base_records, samples, base_samples = ab_stage.split(runner.records, runner.samples)
    summary = sm.build_summary(meta, records, samples, ceilings.rates(ceil))
    sm.write_samples(ctx.dir / sm.SAMPLES_FILE, records, samples)
    write_json(ctx.dir / "summary.json", summary)
    if ab_meta is not None:
        ab_stage.write(ctx.dir, ab_meta, summary["rows"], samples, base_records, base_samples)
    plot_error = _plots(summary["rows"], ctx.dir, suite.primary_mode)
    secs = time.perf_counter() - t_start
    sleep_rate = harness.sleep_cycles_per_s(stream)
    _write_run_json(ctx, suite, secs, device=info, sleep_cycles_per_s=sleep_rate, **plot_error)
    log.info("bench: done in %.1f s", secs)


def _baseline_commit(opts: dict) -> dict:
    """run.json's record that this run had a baseline (derive then requires ab.json)."""
    spec = opts.get("baseline")
    return {"baseline_commit": spec.get("commit")} if spec else {}


def _prepare_base(ctx: StageContext, head_sha256: str):
    """REF's extension for --baseline (None, None without one); logs the A/B error, never raises for it."""
    if not ctx.options.get("baseline"):
        return None, None
    from ..gitinfo import git_info

    base, meta = ab_stage.prepare(ctx.options, ctx.dir, head_sha256, git_info(ctx.repo).dirty)
    if meta["status"] != "pass":
        log.warning("bench: A/B part %s: %s", meta["status"], meta["reason"])
    else:
        log.info("bench: base %s (%s) loaded, %d kernels", meta["base_ref"], str(meta["base_commit"])[:12],
                 len(base.kernels))
    return base, meta


def _write_integrity(stage_dir: Path, records: list[dict]) -> None:
    """What the integrity checks cost in this run (per batch, from the harness's own counters)."""
    from ..timing import integrity

    ours = [r for r in records if r.get("timed_checks") is not None]
    resets = [r["l2_reset_us_per_batch"] for r in ours if r.get("l2_reset_us_per_batch") is not None]
    drains = sorted(r["drain_us_median"] for r in records if r.get("drain_us_median") is not None)
    write_json(stage_dir / INTEGRITY_FILE, {
        "drain_limit_us": integrity.DRAIN_LIMIT_US, "rows_with_checks": len(ours),
        "timed_checks": sum(r["timed_checks"] for r in ours),
        "l2_reset_us_per_batch_median": sorted(resets)[len(resets) // 2] if resets else None,
        "drain_us_median_of_rows": drains[len(drains) // 2] if drains else None,
        "drain_us_max_of_rows": drains[-1] if drains else None})


def _run_canary(stage_dir: Path, stream) -> None:
    """Time the impossible-speed canary at the canonical shape through the same harness (warm mode, a short
    rule), re-check its output, and record everything derive needs to judge it."""
    import torch

    from ..api import _extension, run_kernel
    from ..timing import baselines, harness
    from ..timing.stats import StopRule
    from ..timing.suites import Shape

    shape = Shape(B=16, H=16, S=512, D=64, dtype="fp16", causal=False)
    rec = {"canary": CANARY, "shape": shape.key, "mode": "warm", "times_us": [], "error": None}
    try:
        gen = torch.Generator(device="cuda").manual_seed(1234)
        q, k, v = (torch.randn((shape.B, shape.H, shape.S, shape.D), generator=gen, device="cuda",
                               dtype=torch.float16) for _ in range(3))
        scale = 1.0 / shape.D ** 0.5

        def fn(q, k, v):
            return run_kernel(q, k, v, causal=False, variant=CANARY)

        def checked(q, k, v):
            out = torch.full(q.shape, float("nan"), dtype=q.dtype, device=q.device)
            _extension(CANARY).forward(q, k, v, out, False, scale, CANARY, registry_config(CANARY), stream.cuda_stream)
            return out

        rule = StopRule(warmup=2, min_samples=20, floor_samples=10, max_samples=40, time_cap_s=0.3, graph_calls=4,
                        max_batch=8)
        with torch.cuda.stream(stream):
            timer = harness.Timer(fn, [(q, k, v)], "warm", rule, stream=stream, name=CANARY)

            def check(i, out):
                again = checked(q, k, v)
                return int(((out.view(torch.int16) != again.view(torch.int16)).sum()
                            + (~torch.isfinite(again)).sum()).item())

            timer.check = check
            try:
                harness.sample_interleaved([timer], rule, rule.time_cap_s)
            finally:
                timer.close()
            rec.update(times_us=[round(t * 1e3, 4) for t in timer.times_ms], stop=timer.stop,
                       error=timer.error or None, **timer.integrity())
            ref = baselines.reference(q, k, v, False)
            out, _ = baselines.probe("default", False, q, k, v)
            bound = baselines.error_bound(baselines.max_abs_err(out, ref), "fp16")
            err = baselines.max_abs_err(checked(q, k, v), ref)  # the caller's stream only, as a caller would
            rec.update(recheck_err=err, err_bound=bound)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - recorded: an uncaught canary is `error` in derive
        rec["error"] = " ".join(f"{type(exc).__name__}: {exc}".split())[:600]
        torch.cuda.synchronize()
    write_json(stage_dir / CANARY_FILE, rec)


def registry_config(name: str) -> str:
    from .. import registry

    return registry.get(name, include_canaries=True).configs[0].name


def canary_outcome(stage_dir: Path, rates: dict[str, float]) -> dict:
    """The canary matrix entry of the impossible-speed canary, judged by bench/integrity.py's rules."""
    from ..timing import integrity

    entry = {"name": CANARY, "expected": f"error ({integrity.IMPOSSIBLE}) or fail", "caught": False}
    try:
        rec = read_json(stage_dir / CANARY_FILE)
    except (FileNotFoundError, ValueError) as exc:
        return dict(entry, observed=f"no readable {CANARY_FILE} ({exc})", reason="not run")
    if rec.get("error") or not rec.get("times_us"):
        return dict(entry, observed=f"did not run: {rec.get('error') or 'no samples'}", reason="not run")
    times = sorted(rec["times_us"])
    row = {"impl": "evpack", "shape": rec["shape"], "mode": rec["mode"], "median_us": times[len(times) // 2],
           **{k: rec.get(k) for k in ("drain_us_median", "l2_violations", "timed_mismatches", "timed_checks")}}
    fired = [p for _, p in integrity.row_problems(row, rates)]
    err, bound = rec.get("recheck_err"), rec.get("err_bound")
    if err is None or bound is None or not err <= bound:
        fired.append(f"re-check after timing: max err {err} > bound {bound}")
    return dict(entry, caught=bool(fired), observed="; ".join(fired) or f"median {row['median_us']:.3g} us, nothing fired",
                reason="; ".join(fired) or "no rule fired")


def _integrity_decision(rows: list[dict], rates: dict[str, float]) -> tuple[list[dict], str, str, dict]:
    """Rows judged by bench/integrity.py, and the status/reason that adds (PASS, '' when nothing broke)."""
    from ..timing import integrity

    judged, summary = integrity.judge(rows, rates)
    if not summary["broken_rows"]:
        return judged, PASS, "", summary
    status = ERROR if any(r["status"] == "error" and r is not o for r, o in zip(judged, rows, strict=True)) else FAIL
    return judged, status, f"{summary['broken_rows']} rows break timing integrity (first {summary['first']})", summary


def _decide(rows: list[dict], throttled: bool) -> tuple[str, str]:
    if not rows:
        return ERROR, "summary has no rows"
    ours, sdpa = sm.OURS, sm.SDPA
    wrong = [r for r in rows if r["impl"] == ours and r["status"] == "fail"]
    not_run = [r for r in rows if r["must_run"] and r["status"] in ("error", "unsupported")]
    broken_sdpa = [r for r in not_run if r["impl"] == sdpa]
    broken_ours = [r for r in not_run if r["impl"] == ours]
    skipped = [r for r in rows if r["must_run"] and r["status"] == "skipped"]
    note = " (throttled: clocks.json)" if throttled else ""
    if broken_sdpa:
        r = broken_sdpa[0]
        return ERROR, f"SDPA default did not run on {len(broken_sdpa)} rows (first {r['key']}: {r['reason'][:150]})"
    if wrong or broken_ours:
        parts = []
        if wrong:
            r = wrong[0]
            parts.append(f"{len(wrong)} rows wrong after timing (first {r['key']}: max err "
                         f"{r.get('max_abs_err')} > bound {r.get('err_bound')})")
        if broken_ours:
            r = broken_ours[0]
            parts.append(f"{len(broken_ours)} rows of ours did not run (first {r['key']}: {r['reason'][:150]})")
        return FAIL, "; ".join(parts) + note
    if skipped:
        r = skipped[0]
        return SKIPPED, f"{len(skipped)} rows not measured (first {r['key']}: {r['reason'][:150]}){note}"
    timed = sum(1 for r in rows if r["median_us"] is not None)
    return PASS, f"{timed} rows timed over {len({r['shape'] for r in rows})} shapes, outputs re-checked{note}"


def derive(stage_dir: Path, pack_dir: Path) -> StageOutcome:
    if shards.is_sharded(stage_dir):  # measured over several GPUs: each shard by the rules below
        return bench_shards.derive(stage_dir, pack_dir, _derive_one)
    return _derive_one(stage_dir, pack_dir)


def required_files(stage_dir: Path) -> tuple[str, ...]:
    """The raw files `verify` requires of a bench stage that decided (REQUIRED_FILES, in every shard's folder
    when the benchmark was sharded over GPUs), and the plots its rows give (unless run.json records that
    plotting failed): no file of the stage can go missing unnoticed."""
    figures = _expected_plots(stage_dir)
    if not shards.is_sharded(stage_dir):
        return REQUIRED_FILES + figures + ab_stage.required_files(stage_dir)
    top = ("bench.log", "run.json", "summary.json", "binary.json", shards.SHARDS_FILE, "procs.json")
    try:
        folders = shards.shard_dirs(stage_dir)
    except (OSError, ValueError, KeyError, TypeError):
        return top + figures  # an unreadable shards.json: derive names it
    return top + figures + tuple(f"{d.name}/{f}" for d in folders
                                 for f in REQUIRED_FILES + ab_stage.required_files(d))


def _expected_plots(stage_dir: Path) -> tuple[str, ...]:
    try:
        run_rec, summary = read_json(stage_dir / "run.json"), read_json(stage_dir / "summary.json")
        if run_rec.get("plot_error"):
            return ()
        return plots.expected_files(summary["rows"], summary["primary_mode"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ()  # unreadable records: the derivation names them


def _derive_one(stage_dir: Path, pack_dir: Path) -> StageOutcome:
    missing = [n for n in REQUIRED if not (stage_dir / n).is_file()]
    if missing:
        return StageOutcome(ERROR, f"missing {', '.join(missing)}")
    try:
        written = read_json(stage_dir / "summary.json")
        ceil, run_info = read_json(stage_dir / "ceilings.json"), read_json(stage_dir / "run.json")
        clk = read_json(stage_dir / "clocks.json")
        samples = sm.read_samples(stage_dir / sm.SAMPLES_FILE)
        from ..timing.ceilings import rates

        meta = {k: written[k] for k in META_KEYS}
        records = sm.records_of(written)
        recomputed = sm.build_summary(meta, records, samples, rates(ceil))
    except (ValueError, KeyError, TypeError, AttributeError, json.JSONDecodeError, OSError) as exc:
        return StageOutcome(ERROR, f"corrupt bench files: {type(exc).__name__}: {exc}")
    diffs = sm.differences(written, recomputed)
    orphans = sorted(set(samples) - {r["key"] for r in records})
    diffs += [f"{k}: samples without a row" for k in orphans]
    if diffs:
        return StageOutcome(ERROR, f"summary.json disagrees with the samples/ceilings in {len(diffs)} "
                                   f"places (first: {diffs[0]})")
    rows = recomputed["rows"]
    status, reason = _decide(rows, bool(clk.get("throttled")))
    new_format = (stage_dir / INTEGRITY_FILE).is_file()  # packs before the integrity checks have no such file
    if new_format:
        ceil_rates = rates(ceil)
        _, i_status, i_reason, i_summary = _integrity_decision(rows, ceil_rates)
        if i_status != PASS:
            reason = i_reason if status == PASS else f"{i_reason}; {reason}"
            status = ERROR if ERROR in (status, i_status) else FAIL
    data = bench_outcome.summary_data(recomputed, throttled=bool(clk.get("throttled")), run_info=run_info,
                                      so_sha256=read_json(stage_dir / "binary.json").get("sha256"))
    if new_format:
        data["integrity"] = i_summary
        data["canaries"] = [canary_outcome(stage_dir, ceil_rates)]
    problem = bench_outcome.add_previous(stage_dir, rows, run_info, data)
    if problem:
        return StageOutcome(ERROR, problem)
    reason += bench_outcome.canonical_note(recomputed)
    ab_data, problem = ab_stage.derive(stage_dir, rows, samples, run_info.get("baseline_commit"))
    if problem:
        return StageOutcome(ERROR, problem)
    if ab_data is not None:
        reason += bench_outcome.add_ab(data, ab_data)
    return StageOutcome(status, reason, data)


def facts(outcome: StageOutcome, pack: PackFacts) -> PackFacts:
    """perf-regression (rows of ours slower than the compared pack beyond noise) and the canonical speedup."""
    return pack.with_(perf_regression=bool(outcome.data.get("regressions")),
                      canonical_speedup=outcome.data.get("canonical_speedup"))


def headline(outcome: StageOutcome) -> dict:
    """The numbers a merged verdict shows for this pack's GPU: the canonical shape, the best of ours there
    and its speedup against each SDPA backend ({} when the benchmark did not decide or has no canonical row)."""
    d = outcome.data
    if outcome.status not in (PASS, FAIL) or d.get("canonical_speedup") is None:
        return {}
    vs = d.get("canonical_speedup_vs") or {"default": d["canonical_speedup"]}
    return {"canonical shape": d.get("canonical_shape"), "best of ours": d.get("canonical_best"),
            **{f"speedup vs SDPA {backend}": value for backend, value in vs.items()}}


def headline_md(stage_dir: Path, outcome: StageOutcome) -> str:
    """The canonical-shape leaderboard, shown near the top of the reports (never for an errored stage)."""
    if outcome.status not in (PASS, FAIL):
        return ""
    from ..reporting.bench_sections import canonical_leaderboard

    return "\n".join(canonical_leaderboard(stage_dir))


def report_md(stage_dir: Path, outcome: StageOutcome) -> str:
    from ..reporting.bench_sections import render

    return render(stage_dir, outcome, leaderboard=False)


def figures(stage_dir: Path) -> list[Path]:
    return [stage_dir / f for f in plots.FILES if (stage_dir / f).is_file()]


__all__ = ["NAME", "NEEDS_GPU", "TIMEOUT_S", "run", "derive", "headline", "headline_md", "report_md", "figures"]
