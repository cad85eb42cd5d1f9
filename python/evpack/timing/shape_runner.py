"""Measure one shape: fresh inputs, every variant x config and every SDPA backend, re-check after.

Produces summary records (summary.new_row) and raw per-call samples; statistics are
computed later from the samples only (summary.build_rows). GPU only, used by the stage.

Per shape:
 1. VRAM guard: skip (status `skipped`, reason) when roofline.vram_estimate > 0.92 x free.
 2. Inputs: torch.randn (never zeros), seeded from the shape key, as many (Q, K, V) sets
    as cold mode needs to exceed 2x L2 (graph mode: one per captured call, up to graph_calls), views of one
    content.ContentPool: every call of every mode sees content no call saw before (timing/uniqueness.py),
    recorded in each row as content_uniqueness and unique_calls.
 3. Reference: fp32 SDPA math on set 0; PyTorch's own same-precision error (SDPA default,
    else math in the input dtype) sets the bound 2 x err_torch + 1 ulp (baselines.error_bound).
 4. Probes: one call of each of ours (raises -> `error`) and of each SDPA backend under
    sdpa_kernel (cannot run -> `unsupported` + reason); the kernels one extra SDPA call
    launched (profiler).
 5. Per mode: a harness.Timer for every implementation that passed its probe, sampled
    interleaved (harness.sample_interleaved) through the same harness and stream.
 6. Re-check after timing: set 0 is overwritten in place with new values (same pointers, a new
    seed; a result remembered by pointer goes stale), then one more call of each of ours on it, into
    a NaN-poisoned output, against the reference of the new values (bound from PyTorch's error on
    them, written into the rows' err_bound); a wrong result makes every row of that config `fail`.
 7. Timed outputs (ours): in a few batches of every mode the output of one timed call (drawn at random) is
    kept and, after the batch, compared bit for bit with an untimed call on exactly the inputs that call saw,
    into a NaN-poisoned output, and (first REF_CHECKS checks) with the fp32 reference of those inputs within
    the bound from PyTorch's own error on them (harness.Timer.check); the counts, the device-drain times and
    the persisting-L2 checks go into the row (timing/integrity.py judges them in derive).
With a base (`--baseline REF`, ab_runner.BaseSide) REF's kernels are probed, timed in the same
interleaved rounds as their head twins and re-checked the same way, as rows of impl `base` that the
stage keeps out of summary.json (bench/ab.json instead).
Per-measurement time caps shrink when the suite's budget_s runs short.

Confirmation round of the A/B (ShapeRunner.confirm): the rows ab.candidate_verdicts() would call SLOWER (rule
version 3: or FASTER) are timed again after the suite, head and base interleaved on fresh inputs of their shape,
before any verdict.
"""
from __future__ import annotations

import contextlib
import logging
import math
import time
import zlib
from dataclasses import dataclass, field

import torch

from .. import registry
from . import baselines, harness, roofline
from .ab import BASE
from .content import ContentPool
from .summary import OURS, SDPA, new_row

log = logging.getLogger(__name__)

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
VRAM_FRACTION = 0.92
MIN_CAP_S = 0.05
AB_BUDGET_MAX = 1.6  # full suite: 400 s x 1.6 + ceilings and plots stay inside the bench stage's 900 s
GRAPH_SETS_BYTES = 6 << 30  # graph mode's one-set-per-call inputs stop growing at this many bytes
CONFIRM_SEED_XOR = 0xC0F1  # the confirmation round's inputs draw from seed ^ this


def _why(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:600]


REFILL_SEED_XOR = 0x5EED5EED  # the in-place refill before the re-check draws from seed ^ this


def refill_in_place(tensors, seed: int) -> None:
    """Overwrite each tensor with new standard-normal values from `seed`, keeping its storage (same pointer)."""
    gen = torch.Generator(device=tensors[0].device)
    gen.manual_seed(seed)
    for t in tensors:
        t.copy_(torch.randn(t.shape, generator=gen, device=t.device, dtype=t.dtype))


@dataclass
class Impl:
    impl: str
    variant: str
    config: str
    fn: object
    must_run: bool
    context: object = contextlib.nullcontext
    extra: dict = field(default_factory=dict)  # fields copied into every row of this impl
    rows: list = field(default_factory=list)


def _torch_error(qkv, causal: bool, ref) -> float | None:
    """PyTorch's own same-precision error against the fp32 reference (SDPA default, else math): the
    scale of the error bound. None when neither backend runs the shape."""
    for backend in ("default", "math"):
        out, _ = baselines.probe(backend, causal, *qkv)
        if out is not None:
            return baselines.max_abs_err(out, ref)
    return None


def _pair(timers) -> None:
    """Each base timer and the head timer of the same kernel become twins (harness.pair_twins); `timers` holds
    ((impl, variant, config), timer) pairs."""
    heads = {(variant, config): t for (impl, variant, config), t in timers if impl == OURS}
    for (impl, variant, config), t in timers:
        if impl == BASE and (variant, config) in heads:
            harness.pair_twins(heads[(variant, config)], t)


class ShapeRunner:
    def __init__(self, suite, op, stream, l2_bytes: int, variant_names=None, t_start: float | None = None,
                 base=None):
        self.suite, self.op, self.stream, self.l2 = suite, op, stream, int(l2_bytes)
        self.rule = suite.rule
        self.variants = [registry.get(n) for n in variant_names] if variant_names else list(registry.VARIANTS)
        self.records: list[dict] = []
        self.samples: dict[str, list[float]] = {}
        self.base = base  # ab_runner.BaseSide of --baseline REF: its rows are timed in the same rounds
        self.n_impls = sum(len(v.configs) for v in self.variants) + len(baselines.BACKENDS)
        head_impls = self.n_impls
        self.n_impls += len(base.pairs) if base is not None else 0
        # an A/B keeps a head-only run's per-measurement caps (within the stage's timeout: <= 1.6x)
        self.budget_s = suite.budget_s * min(AB_BUDGET_MAX, self.n_impls / head_impls)
        self.remaining = suite.measurements * self.n_impls
        self.t_start = time.perf_counter() if t_start is None else t_start
        self._tags: tuple[str, ...] = ()
        self.suite_causal = False  # causal flag of the shape being measured (checked calls)
        self.pool: ContentPool | None = None  # the shape's input sets (content made new before every call)
        self.n_sets = 1  # sets cold mode rotates

    def cap(self) -> float:
        """Sampling time per implementation and mode, shrunk when the suite's budget runs short."""
        left = self.budget_s - (time.perf_counter() - self.t_start)
        return min(self.rule.time_cap_s, max(MIN_CAP_S, left / max(1, self.remaining)))

    def _add(self, rows: list[dict]) -> list[dict]:
        for r in rows:
            r["tags"] = list(self._tags)
        self.records += rows
        self.remaining -= len(rows)
        return rows

    def _not_run(self, impl, variant, config, ss, status, reason, must_run) -> None:
        self._add([new_row(impl, variant, config, ss.shape, mode, must_run=must_run, status=status, reason=reason)
                   for mode in ss.modes])

    # -- one shape --------------------------------------------------------------------------
    def set_counts(self, ss) -> tuple[int, int]:
        """(sets cold mode rotates, sets to make): graph mode wants one set per captured call."""
        set_bytes = 3 * ss.shape.numel * ss.shape.elem_bytes
        n_sets = roofline.rotation_sets(set_bytes, self.l2)
        if "graph" not in ss.modes:
            return n_sets, n_sets
        return n_sets, max(n_sets, min(self.rule.graph_calls, GRAPH_SETS_BYTES // set_bytes))

    def run_shape(self, ss) -> None:
        shape = ss.shape
        self._tags = ss.tags
        self.suite_causal = shape.causal
        n_sets, n_pool = self.set_counts(ss)
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info()
        need = roofline.vram_estimate(shape, n_pool, self.n_impls)
        if need > VRAM_FRACTION * free:
            reason = f"needs ~{need / 2**30:.1f} GiB > {VRAM_FRACTION} x free {free / 2**30:.1f} GiB"
            log.warning("%s: skipped, %s", shape.key, reason)
            for v in self.variants:
                for cfg in v.configs:
                    self._not_run(OURS, v.name, cfg.name, ss, "skipped", reason, True)
            for b in baselines.BACKENDS:
                self._not_run(SDPA, b, "", ss, "skipped", reason, b == "default")
            for v, c in self.base.pairs if self.base is not None else ():
                self._not_run(BASE, v, c, ss, "skipped", reason, True)
            return
        seed = zlib.crc32(shape.key.encode())
        self.pool = ContentPool((shape.B, shape.H, shape.S, shape.D), TORCH_DTYPES[shape.dtype], n_pool, seed)
        sets = self.pool.sets
        self.n_sets = n_sets
        ref = baselines.reference(*sets[0], shape.causal)
        torch_err = _torch_error(sets[0], shape.causal, ref)
        common = {"seed": seed, "torch_err": torch_err,
                  "err_bound": None if torch_err is None else baselines.error_bound(torch_err, shape.dtype)}
        impls = self._with_base(self._ours(ss, sets, common), ss, sets, common) + self._sdpa(ss, sets, ref, common)
        for mode in ss.modes:
            self._mode(ss, mode, impls, sets)
        del ref
        ref, torch_err = self._refill_for_recheck(sets, shape, seed)
        self._recheck(impls, sets, ref, torch_err, shape.dtype)
        del sets, ref
        self.pool = None
        torch.cuda.empty_cache()

    def _refill_for_recheck(self, sets, shape, seed: int):
        """After all timing: set 0 overwritten in place (same pointers, a new seed), then its fp32 reference and
        PyTorch's own error on it. A result remembered by pointer (a memo) is stale after this."""
        torch.cuda.synchronize()
        refill_in_place(sets[0], seed ^ REFILL_SEED_XOR)
        torch.cuda.synchronize()
        ref = baselines.reference(*sets[0], shape.causal)
        return ref, _torch_error(sets[0], shape.causal, ref)

    def _ours(self, ss, sets, common) -> list[Impl]:
        shape, out = ss.shape, []
        for variant in self.variants:
            for cfg in variant.configs:
                if shape.dtype not in variant.dtypes or cfg not in variant.configs_for(shape.D):
                    self._not_run(OURS, variant.name, cfg.name, ss, "unsupported",
                                  f"variant {variant.name} config {cfg.name} is built for dtypes {variant.dtypes}, "
                                  f"head dims {variant.head_dims_for(cfg)}", False)
                    continue

                def fn(q, k, v, _name=variant.name, _cfg=cfg.name):
                    return self.op(q, k, v, causal=shape.causal, variant=_name, config=_cfg)

                try:
                    with torch.cuda.stream(self.stream):
                        fn(*sets[0])
                    self.stream.synchronize()
                except Exception as exc:  # noqa: BLE001 - recorded as the rows' reason
                    self._not_run(OURS, variant.name, cfg.name, ss, "error", _why(exc), True)
                    continue
                out.append(Impl(OURS, variant.name, cfg.name, fn, True, extra=dict(common)))
        return out

    def _with_base(self, ours: list[Impl], ss, sets, common) -> list[Impl]:
        """Our impls with the base's twin of each right after it (base-only kernels last).

        The base's kernels come from its binary (BaseSide.kernels), probed like ours; a kernel the
        base does not hold for this dtype/head dim gets no row (never compared).
        """
        if self.base is None:
            return ours
        shape, twins = ss.shape, {}
        for variant, config in self.base.pairs:
            if not self.base.built_for(variant, config, shape.dtype, shape.D):
                continue
            fn = self.base.fn(variant, config, shape.causal, shape.D)
            try:
                with torch.cuda.stream(self.stream):
                    fn(*sets[0])
                self.stream.synchronize()
            except Exception as exc:  # noqa: BLE001 - recorded as the rows' reason
                self._not_run(BASE, variant, config, ss, "error", _why(exc), True)
                continue
            twins[(variant, config)] = Impl(BASE, variant, config, fn, True, extra=dict(common))
        out = []
        for im in ours:
            out.append(im)
            if (im.variant, im.config) in twins:
                out.append(twins.pop((im.variant, im.config)))
        return out + list(twins.values())

    def _sdpa(self, ss, sets, ref, common) -> list[Impl]:
        shape, out = ss.shape, []
        for backend in baselines.BACKENDS:
            must = backend == "default"
            with torch.cuda.stream(self.stream):
                res, why = baselines.probe(backend, shape.causal, *sets[0])
            if res is None:
                self._not_run(SDPA, backend, "", ss, "unsupported", why, must)
                continue
            err = baselines.max_abs_err(res, ref)
            del res
            fn = baselines.sdpa_fn(shape.causal)

            def context(_b=backend):
                return baselines.backend_context(_b)

            try:
                with context():
                    names = baselines.kernels_ran(fn, sets[0])
                ran = baselines.classify_kernels(names)
            except Exception as exc:  # noqa: BLE001 - profiler trouble must not stop the timing
                names, ran = [], f"unknown ({_why(exc)[:120]})"
            out.append(Impl(SDPA, backend, "", fn, must, context,
                            extra=dict(common, max_abs_err=err, kernels=names, ran=ran)))
        return out

    def _mode(self, ss, mode, impls: list[Impl], sets) -> None:
        shape = ss.shape
        cap = self.cap()
        timers: list[tuple[Impl, harness.Timer]] = []
        for im in impls:
            try:
                timer = harness.Timer(im.fn, sets, mode, self.rule, stream=self.stream, context=im.context,
                                      name=f"{im.impl}/{im.variant}/{im.config}", content=self.pool,
                                      min_sets=self.n_sets)
                if im.impl in (OURS, BASE):
                    timer.check = self._timed_checker(im, shape)
                timers.append((im, timer))
            except Exception as exc:  # noqa: BLE001
                log.warning("%s %s/%s %s: %s", shape.key, im.variant, im.config, mode, _why(exc))
                self.stream.synchronize()
                im.rows += self._add([new_row(im.impl, im.variant, im.config, shape, mode, must_run=im.must_run,
                                              status="error", reason=_why(exc), **im.extra)])
        _pair([((im.impl, im.variant, im.config), t) for im, t in timers])
        try:
            wall = harness.sample_interleaved([t for _, t in timers], self.rule, cap)
        finally:
            for _, t in timers:
                t.close()
        for im, t in timers:
            if t.error:
                row = new_row(im.impl, im.variant, im.config, shape, mode, must_run=im.must_run, status="error",
                              reason=t.error, **im.extra)
            else:
                m = t.measurement(wall)
                row = new_row(im.impl, im.variant, im.config, shape, mode, must_run=im.must_run, stop=m.stop,
                              calls_per_sample=m.calls_per_sample, n_sets=m.n_sets, capture_ms=m.capture_ms,
                              wall_s=m.wall_s, notes=m.notes, **im.extra, **t.integrity(), **t.content_fields())
                self.samples[row["key"]] = m.times_us
            im.rows += self._add([row])
        log.debug("%s %s: %d implementations interleaved in %.2f s", shape.key, mode, len(timers), wall)

    def _checked_call(self, im: Impl, q, k, v) -> torch.Tensor:
        """One untimed call of ours (or of the A/B base: its own binary) on self.stream into a NaN-poisoned
        output (what it leaves unwritten stays NaN)."""
        from ..api import _extension
        from .ab_runner import _EXT

        ext = _EXT["base"] if im.impl == BASE else _extension(im.variant)
        causal = bool(self.suite_causal)
        with torch.cuda.stream(self.stream):
            out = torch.full(q.shape, float("nan"), dtype=q.dtype, device=q.device)
            ext.forward(q, k, v, out, causal, 1.0 / math.sqrt(q.shape[-1]), im.variant, im.config,
                        self.stream.cuda_stream)
        return out

    def _timed_checker(self, im: Impl, shape):
        """Timer.check for one of ours: a kept timed output against an untimed call on exactly the inputs it saw
        (mismatching elements) and, when asked, against the fp32 reference of those inputs within the bound from
        PyTorch's own error on them."""
        def check(inputs, timed_out, reference: bool) -> harness.CheckResult:
            with torch.cuda.stream(self.stream):
                again = self._checked_call(im, *inputs)
                bad = (timed_out.view(torch.int16) != again.view(torch.int16)).sum() + (~torch.isfinite(again)).sum()
                bad = int(bad.item())
                if not reference:
                    return harness.CheckResult(bad)
                ref = baselines.reference(*inputs, shape.causal)
                torch_err = _torch_error(inputs, shape.causal, ref)
                bound = None if torch_err is None else baselines.error_bound(torch_err, shape.dtype)
                return harness.CheckResult(bad, True, baselines.max_abs_err(timed_out, ref), bound)
        return check

    def confirm(self, ss, pairs: list[tuple[str, str, str]], cap_s: float,
                round_no: int = 0) -> tuple[list[dict], dict]:
        """The A/B's confirmation round for some rows of one shape: pairs = (variant, config, mode) of rows of ours
        whose base twin exists. Each (head, base) pair is timed again on fresh inputs (seed ^ CONFIRM_SEED_XOR,
        and a content stream of its own per round_no: ab_confirm times a shape's SLOWER and FASTER candidates in
        two calls), every pair of a mode interleaved as in the run. Returns (records, samples) keyed like the
        run's rows."""
        shape = ss.shape
        self._tags = ss.tags
        self.suite_causal = shape.causal
        n_sets, n_pool = self.set_counts(ss)
        seed = (zlib.crc32(shape.key.encode()) ^ CONFIRM_SEED_XOR) + (round_no << 32)
        self.pool = ContentPool((shape.B, shape.H, shape.S, shape.D), TORCH_DTYPES[shape.dtype], n_pool, seed)
        self.n_sets = n_sets
        records, samples = [], {}
        try:
            for mode in sorted({m for _, _, m in pairs}):
                timers = []
                for variant, config, m in pairs:
                    if m != mode:
                        continue
                    for impl, fn in ((OURS, self._head_fn(variant, config, shape)),
                                     (BASE, self.base.fn(variant, config, shape.causal, shape.D))):
                        try:
                            t = harness.Timer(fn, self.pool.sets, mode, self.rule, stream=self.stream,
                                              name=f"{impl}/{variant}/{config}/confirm", content=self.pool,
                                              min_sets=n_sets)
                            timers.append(((impl, variant, config), t))
                        except Exception as exc:  # noqa: BLE001 - an unconfirmed row stays UNSURE
                            log.warning("confirm %s %s/%s %s: %s", shape.key, variant, config, mode, _why(exc))
                            self.stream.synchronize()
                _pair(timers)
                try:
                    harness.sample_interleaved([t for _, t in timers], self.rule, cap_s)
                finally:
                    for _, t in timers:
                        t.close()
                for (impl, variant, config), t in timers:
                    row = new_row(impl, variant, config, shape, mode, must_run=True, status="ok" if not t.error
                                  else "error", reason=t.error, **t.content_fields())
                    records.append(row)
                    if not t.error:
                        samples[row["key"]] = t.measurement(0.0).times_us
        finally:
            self.pool = None
            torch.cuda.empty_cache()
        return records, samples

    def _head_fn(self, variant: str, config: str, shape):
        def fn(q, k, v):
            return self.op(q, k, v, causal=shape.causal, variant=variant, config=config)
        return fn

    def _recheck(self, impls: list[Impl], sets, ref, torch_err: float | None, dtype: str) -> None:
        """One more call of each of ours after all timing, on set 0 refilled in place, into a NaN-poisoned output,
        against the fp32 reference of the new values (bound from PyTorch's error on them, recorded in the rows)."""
        bound = None if torch_err is None else baselines.error_bound(torch_err, dtype)
        for im in impls:
            if im.impl not in (OURS, BASE):
                continue
            try:
                with torch.cuda.stream(self.stream):
                    err = baselines.max_abs_err(self._checked_call(im, *sets[0]), ref)
                why = "" if err is not None else "non-finite output after timing"
            except Exception as exc:  # noqa: BLE001
                err, why = None, f"re-check raised {_why(exc)}"
            bad = err is None or bound is None or err > bound
            for r in im.rows:
                r.update(max_abs_err=err, err_bound=bound, recheck_torch_err=torch_err, recheck="set 0 refilled in place")
                if r["status"] == "ok" and bad:
                    r.update(status="fail", reason=why or f"max |err| {err:.3g} > bound {bound}")
