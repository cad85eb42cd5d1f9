"""The bench stage's canaries: kernels with a planted timing cheat, timed through the same harness as the rows
and judged by the same rules, each one caught only by the rule of its class.

  canary_side_stream     impossible speed: the work runs on a private stream (canary_bench.json); caught when
                         any rule fires (speed of light, device drain, timed outputs, re-check after timing)
  canary_content_cache   a per-CTA output cache keyed on a sample of the input content
                         (canary_content_cache.json); caught when the content probe flags it
  canary_timing_aware    copies its last output when called within 2 ms of the previous call
                         (canary_timing_aware.json); caught when a kept timed output differs from an untimed
                         call on exactly the inputs that call saw (new content every call makes the copy stale)

Each runs at the canonical shape in warm mode through harness.Timer with a ContentPool of one set (every call
sees new content), a short stop rule, kept-output checks (bit for bit against an untimed call, and against the
fp32 reference), the re-check after timing, and (records since summary schema 2) one content-probe entry.
Standard library at import (derive); torch only in run().
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from ..records.bench_canary import BenchCanaryRun
from ..records.canary import CanaryRecord
from ..records.required import as_view
from ..timing import content_probe, integrity
from .base import read_json, write_json

SIDE_STREAM, CONTENT_CACHE, TIMING_AWARE = "canary_side_stream", "canary_content_cache", "canary_timing_aware"
FILES = {SIDE_STREAM: "canary_bench.json", CONTENT_CACHE: "canary_content_cache.json",
         TIMING_AWARE: "canary_timing_aware.json"}
NAMES = tuple(FILES)
EXPECTED = {
    SIDE_STREAM: f"error ({integrity.IMPOSSIBLE}) or fail",
    CONTENT_CACHE: f"error ({integrity.CONTENT_CACHE}: the content probe)",
    TIMING_AWARE: "fail (a kept timed output differs from an untimed call on the inputs it saw)",
}
SHAPE = "B=16,H=16,S=512,D=64,dtype=fp16,causal=0"
SEED = 1234


def names_for(schema: int) -> tuple[str, ...]:
    """The canaries a bench stage of this summary schema runs (schema 1: the side-stream canary alone)."""
    return NAMES if schema >= 2 else (SIDE_STREAM,)


def registry_config(name: str) -> str:
    from .. import registry

    return registry.get(name, include_canaries=True).configs[0].name


# -- run (GPU) ---------------------------------------------------------------------------------------------

def run(stage_dir: Path, stream) -> None:
    """Time every bench canary and write its record (an error is recorded: an uncaught canary is `error`)."""
    for name in NAMES:
        write_json(stage_dir / FILES[name], _time_one(name, stream))


def _time_one(name: str, stream) -> dict:
    import torch

    from ..api import _extension, run_kernel
    from ..timing import baselines, harness
    from ..timing.content import ContentPool
    from ..timing.stats import StopRule
    from ..timing.suites import parse_shape

    shape = parse_shape(SHAPE)
    rec = {"canary": name, "shape": shape.key, "mode": "warm", "times_us": [], "error": None}
    try:
        pool = ContentPool((shape.B, shape.H, shape.S, shape.D), torch.float16, 1, SEED)
        scale = 1.0 / math.sqrt(shape.D)

        def fn(q, k, v):
            return run_kernel(q, k, v, causal=False, variant=name)

        def checked(q, k, v):
            out = torch.full(q.shape, float("nan"), dtype=q.dtype, device=q.device)
            _extension(name).forward(q, k, v, out, False, scale, name, registry_config(name), stream.cuda_stream)
            return out

        def check(inputs, out, reference: bool) -> harness.CheckResult:
            again = checked(*inputs)
            bad = int(((out.view(torch.int16) != again.view(torch.int16)).sum() + (~torch.isfinite(again)).sum()).item())
            if not reference:
                return harness.CheckResult(bad)
            ref = baselines.reference(*inputs, False)
            sdpa, _ = baselines.probe("default", False, *inputs)
            bound = baselines.error_bound(baselines.max_abs_err(sdpa, ref), "fp16")
            return harness.CheckResult(bad, True, baselines.max_abs_err(out, ref), bound)

        rule = StopRule(warmup=2, min_samples=20, floor_samples=10, max_samples=40, time_cap_s=0.3, graph_calls=4,
                        max_batch=8)
        with torch.cuda.stream(stream):
            timer = harness.Timer(fn, pool.sets, "warm", rule, stream=stream, name=name, content=pool)
            timer.check = check
            try:
                harness.sample_interleaved([timer], rule, rule.time_cap_s)
            finally:
                timer.close()
            rec.update(times_us=[round(t * 1e3, 4) for t in timer.times_ms], stop=timer.stop,
                       error=timer.error or None, **timer.integrity(), **timer.content_fields())
            q, k, v = pool.sets[0]
            ref = baselines.reference(q, k, v, False)
            out, _ = baselines.probe("default", False, q, k, v)
            bound = baselines.error_bound(baselines.max_abs_err(out, ref), "fp16")
            err = baselines.max_abs_err(checked(q, k, v), ref)  # the caller's stream only, as a caller would
            rec.update(recheck_err=err, err_bound=bound)
            probe = content_probe.run([("canary", name, registry_config(name), fn)], shape, stream, SEED)
            rec["probe"] = probe["entries"][0]
            rec["probe_rule"] = probe["rule"]
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - recorded: an uncaught canary is `error` in derive
        rec["error"] = " ".join(f"{type(exc).__name__}: {exc}".split())[:600]
        torch.cuda.synchronize()
    return rec


# -- derive (standard library) -----------------------------------------------------------------------------

def fired_rules(rec: dict | BenchCanaryRun, rates: dict[str, float], *, schema: int = 1,
                physics=None) -> dict[str, str]:
    """Every rule a canary record breaks: {rule: what fired}. Rules: integrity.RULES (the row rules),
    'recheck' (the re-check after timing) and 'content_probe'."""
    run = as_view(BenchCanaryRun, rec)
    times = sorted(run.times_us or [])
    row = {"impl": "evpack", "variant": run.canary, "config": None, "shape": run.shape,
           "mode": run.mode, "median_us": times[len(times) // 2] if times else None,
           "n": len(times), "calls_per_sample": 1, **run.integrity}
    if schema >= 2:
        from ..timing.uniqueness import timed_content_unique

        row.update(timed_content_unique=timed_content_unique(row, len(times)))
    fired: dict[str, str] = {}
    for rule, _status, why in integrity.rule_problems(row, rates, schema=schema, physics=physics):
        fired[rule] = "; ".join(filter(None, (fired.get(rule), why)))
    err, bound = run.recheck_err, run.err_bound
    if err is None or bound is None or not err <= bound:
        fired["recheck"] = f"re-check after timing: max err {err} > bound {bound}"
    if schema >= 2 and run.probe is not None:
        v = content_probe.verdict(dict(run.probe, shape=run.shape), content_probe.RULE)  # the code's rule
        if v.flagged:
            fired["content_probe"] = f"{integrity.CONTENT_CACHE}: {v.reason}"
    return fired


CLASS_RULES = {CONTENT_CACHE: ("content_probe",), TIMING_AWARE: ("timed_outputs", "timed_reference")}


def _caught(name: str, fired: dict[str, str]) -> bool:
    """Whether a rule of the canary's class fired (the side-stream canary: any rule)."""
    rules = CLASS_RULES.get(name)
    return bool(fired) if rules is None else any(r in fired for r in rules)


def outcome(stage_dir: Path, rates: dict[str, float], name: str = SIDE_STREAM, *, schema: int = 1,
            physics=None) -> dict:
    """The canary matrix entry of one bench canary, judged by the rule of its class."""
    entry = CanaryRecord(name, False, "", expected=EXPECTED[name])
    file = FILES[name]
    try:
        rec = BenchCanaryRun.from_json(read_json(stage_dir / file))
    except (FileNotFoundError, ValueError) as exc:
        return replace(entry, observed=f"no readable {file} ({exc})", reason="not run").to_json()
    if rec.error or not rec.times_us:
        return replace(entry, observed=f"did not run: {rec.error or 'no samples'}", reason="not run").to_json()
    fired = fired_rules(rec, rates, schema=schema, physics=physics)
    times = sorted(rec.times_us)
    caught = _caught(name, fired)
    observed = "; ".join(fired.values()) or f"median {times[len(times) // 2]:.3g} us, nothing fired"
    return replace(entry, caught=caught, observed=observed,
                   reason="; ".join(fired.values()) if caught else
                   ("no rule fired" if not fired else f"the rule of its class did not fire (only: {observed})")).to_json()


def outcomes(stage_dir: Path, rates: dict[str, float], *, schema: int = 1, physics=None) -> list[dict]:
    return [outcome(stage_dir, rates, n, schema=schema, physics=physics) for n in names_for(schema)]
