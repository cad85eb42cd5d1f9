"""GPU timing harness: one code path for the custom op, SDPA and the ceilings.

Modes
  warm   the same inputs back to back: L2 may still hold them (best case).
  cold   input sets rotated, their total > 2x L2 (roofline.rotation_sets), so each call
         finds its inputs evicted by the calls in between (what a layer in a model sees).
  graph  calls (rotating the sets as in cold) captured into one CUDA graph; a sample is
         one replay's event time / calls: no per-launch CPU or driver overhead. A graph
         holds >= the number of sets and about 1 ms of work, at most StopRule.graph_calls.

Timing: a CUDA event pair around each call (each replay in graph mode), recorded on the
measuring stream. Before each batch a spin kernel (torch.cuda._sleep) holds the stream
while the host enqueues the whole batch, so the GPU then runs it back to back and an
event pair measures the kernel, not how fast Python launches it. The host synchronizes
once per batch, on the batch's last end event, which is outside every timed interval;
the stopping rule (stats.stop_reason) is checked between batches.

Unique content (timing/uniqueness.py, timing/content.py): with a ContentPool (Timer's `content`), every
call, warm-up and timed alike, sees input content that no call saw before: before each eager call, outside
its event pair, one small kernel raises one element of each of q, k, v of the call's set; in graph mode
each captured call reads its own set and one kernel raises every set before each replay, outside the
replay's event pair. The positions of a batch go to the device in one copy before the batch. Warm mode stays
L2-warm: a raise rewrites three elements in place.

Integrity (since the timing-integrity checks): before every batch the persisting-L2 state is
reset (reset_persisting_l2: cuCtxResetPersistingL2Cache, the persisting-L2 limit set to 0, the
stream's access-policy window cleared) and after it the limit is read back (an op that raised it
during timed calls is counted in l2_violations); after the batch's last end event the host waits
for the whole device (torch.cuda.synchronize) and records how long that took (drain_s): work
still running on another stream after the caller's stream finished shows up there. Optionally
(Timer.check) the output of one timed call in a few batches (CHECK_BATCHES) is kept and handed to a checker
after the batch, outside the timed region, with exactly the inputs that call saw: the call is drawn at
random (seeded by the timer's name) within the batch, and with a ContentPool its set is copied before the
batch and the batch's raises of it up to that call are replayed on the copy. The first REF_CHECKS checks
also compare the output with the fp32 reference of those inputs (the checker's job).

Interleaving: the implementations of one shape and mode are sampled in rounds of short
batches (sample_interleaved), not one after another. The same SDPA call timed in
separate short windows of one run can land several percent apart (slow GPU states that
outlast a window; seen at B=32, H=32, S=512 during development, bench/NOTES.md keeps the
pack numbers): timed one after another, that becomes a fake speedup between two
implementations; interleaved, both see the same states.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import random
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from .stats import StopRule, noise, rel_iqr, stop_reason
from .uniqueness import PER_CALL, PER_REPLAY

log = logging.getLogger(__name__)

MODES = ("cold", "warm", "graph")
_MAX_SLEEP_S = 0.05  # longest spin before a batch; bounds the batch size for slow hosts
_SLEEP_MARGIN = 1.5  # spin this many times the measured host enqueue time of the batch
_CALIBRATION = 8  # launches of the discarded calibration batch
_SLOW_S = 2e-3  # samples slower than this skip the calibration batch
_GRAPH_TARGET_S = 1e-3  # a graph holds about this much work (>= the input sets, <= graph_calls)
SLICE_S = 3e-3  # GPU time of one batch of one implementation in an interleaved round


def _max_count(per_call_s: float) -> int:
    """Most launches whose enqueue fits in the longest spin."""
    return max(1, int(_MAX_SLEEP_S / (_SLEEP_MARGIN * max(per_call_s, 1e-7))))


@dataclass
class Measurement:
    mode: str
    times_us: list[float]  # per call (graph: per replay / calls)
    stop: str  # stats.stop_reason value
    calls_per_sample: int
    n_sets: int
    wall_s: float
    capture_ms: float | None = None  # graph mode: capture + instantiate, host wall time
    notes: list[str] = field(default_factory=list)


_cycles_per_s: dict[int, float] = {}


def sleep_cycles_per_s(stream: torch.cuda.Stream) -> float:
    """Clock cycles torch.cuda._sleep spins per second on this device (measured once)."""
    dev = stream.device.index or 0
    if dev not in _cycles_per_s:
        cycles = 2_000_000
        with torch.cuda.stream(stream):
            torch.cuda._sleep(cycles)  # first launch loads the kernel
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(stream)
            torch.cuda._sleep(cycles)
            b.record(stream)
        b.synchronize()
        _cycles_per_s[dev] = cycles / (a.elapsed_time(b) / 1e3)
    return _cycles_per_s[dev]


def _events(n: int) -> list[tuple[torch.cuda.Event, torch.cuda.Event]]:
    return [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]


class _Driver:
    """The few CUDA driver calls the persisting-L2 reset needs (libcuda through ctypes; torch has none)."""

    LIMIT_PERSISTING_L2 = 0x06  # CU_LIMIT_PERSISTING_L2_CACHE_SIZE
    STREAM_ATTR_ACCESS_POLICY_WINDOW = 1  # CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW
    ATTR_VALUE_BYTES = 64  # sizeof(CUstreamAttrValue): a union padded to 64 bytes

    def __init__(self) -> None:
        import ctypes

        self.ct = ctypes
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.zero_window = ctypes.create_string_buffer(self.ATTR_VALUE_BYTES)  # base 0, 0 bytes, hit ratio 0

    def _ok(self, what: str, rc: int) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed: CUresult {rc}")

    def reset(self, stream) -> None:
        self._ok("cuCtxResetPersistingL2Cache", self.lib.cuCtxResetPersistingL2Cache())
        self._ok("cuCtxSetLimit", self.lib.cuCtxSetLimit(self.LIMIT_PERSISTING_L2, self.ct.c_size_t(0)))
        self._ok("cuStreamSetAttribute", self.lib.cuStreamSetAttribute(
            self.ct.c_void_p(stream.cuda_stream), self.STREAM_ATTR_ACCESS_POLICY_WINDOW, self.zero_window))

    def persisting_limit(self) -> int:
        v = self.ct.c_size_t(0)
        self._ok("cuCtxGetLimit", self.lib.cuCtxGetLimit(self.ct.byref(v), self.LIMIT_PERSISTING_L2))
        return int(v.value)


_driver: _Driver | None = None


def reset_persisting_l2(stream) -> float:
    """Reset every persisting L2 line, set the persisting-L2 limit to 0 and clear the stream's access-policy
    window; returns the host seconds it took."""
    global _driver
    t0 = time.perf_counter()
    if _driver is None:
        _driver = _Driver()
    _driver.reset(stream)
    return time.perf_counter() - t0


def persisting_l2_limit() -> int:
    """The current persisting-L2 set-aside in bytes (0 after reset_persisting_l2)."""
    global _driver
    if _driver is None:
        _driver = _Driver()
    return _driver.persisting_limit()


def device_drain_s() -> float:
    """Host seconds a device-wide synchronize takes right now (after the measuring stream has finished,
    anything beyond the call's own overhead is work some other stream still had)."""
    t0 = time.perf_counter()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


CHECK_BATCHES = frozenset((0, 1, 3, 7, 15, 31, 63, 127, 255))  # batches whose kept output is checked
REF_CHECKS = 2  # the first checks of a timer also hold the kept output to the fp32 reference of its inputs


@dataclass(frozen=True)
class CheckResult:
    """What a checker found on one kept timed output (outside the timed region)."""

    mismatches: int  # elements differing from an untimed call on the same inputs (+ its non-finite elements)
    referenced: bool = False  # also compared with the fp32 reference of those inputs
    ref_err: float | None = None  # max |out - ref| (None: non-finite output)
    ref_bound: float | None = None

    @property
    def ref_failed(self) -> bool:
        return self.referenced and (self.ref_err is None or self.ref_bound is None or not self.ref_err <= self.ref_bound)


def _batch(launch: Callable[[], None], count: int, stream, events, sleep_cycles: int,
           before: Callable[[int], None] | None = None) -> tuple[list[float], float]:
    """Enqueue `count` timed launches behind a spin kernel; one sync after. Returns (ms list, host s).

    `before(i)` is enqueued before launch i's start event (outside its timed interval)."""
    if sleep_cycles > 0:
        torch.cuda._sleep(sleep_cycles)
    t0 = time.perf_counter()
    for i in range(count):
        start, end = events[i]
        if before is not None:
            before(i)
        start.record(stream)
        launch()
        end.record(stream)
    host_s = time.perf_counter() - t0
    events[count - 1][1].synchronize()
    return [s.elapsed_time(e) for s, e in events[:count]], host_s


def capture_graph(fn: Callable, sets: Sequence[tuple], calls: int, stream) -> tuple[torch.cuda.CUDAGraph, float]:
    """Capture `calls` calls of fn (rotating sets) into a graph; returns it and capture+instantiate ms."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        t0 = time.perf_counter()  # after the context's own synchronize / gc / empty_cache
        for j in range(calls):
            fn(*sets[j % len(sets)])
    capture_ms = (time.perf_counter() - t0) * 1e3
    return graph, capture_ms


def _capture_keep(fn: Callable, sets: Sequence[tuple], calls: int, stream, keep: int):
    """capture_graph that also keeps call `keep`'s output (and its set index) alive for checking."""
    graph = torch.cuda.CUDAGraph()
    kept = None
    with torch.cuda.graph(graph, stream=stream):
        t0 = time.perf_counter()
        for j in range(calls):
            out = fn(*sets[j % len(sets)])
            if j == keep:
                kept = (j % len(sets), out)
    capture_ms = (time.perf_counter() - t0) * 1e3
    return graph, capture_ms, kept


class Timer:
    """One implementation made ready to sample in one mode: warmed up, graph captured, host rate known.

    `context` (a no-argument callable returning a context manager, e.g. an SDPA backend
    selector) is entered around the warm-up, the capture and every batch. With `content` (a
    content.ContentPool whose sets input_sets are), every call sees new content (module docstring);
    cold mode rotates the first `min_sets` sets (default: all), graph mode gives each captured call its
    own set (at least min_sets of them).
    """

    def __init__(self, fn: Callable, input_sets: Sequence[tuple], mode: str, rule: StopRule, *,
                 stream: torch.cuda.Stream, context: Callable = contextlib.nullcontext, name: str = "",
                 content=None, min_sets: int | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not input_sets:
            raise ValueError("Timer: no input sets")
        self.name, self.mode, self.rule, self.stream, self.context = name, mode, rule, stream, context
        self.content = content
        n_min = max(1, min(min_sets or len(input_sets), len(input_sets)))
        self.sets = list(input_sets[:1]) if mode == "warm" else list(input_sets[:n_min])
        self.times_ms: list[float] = []
        self.sampled_s = 0.0  # host wall time of this timer's own timed batches (the time cap is judged on it)
        self.twin: Timer | None = None  # the A/B's other side of this kernel (pair_twins): the two stop together
        self.stop: str | None = None
        self.error: str = ""
        self.graph, self.capture_ms, self.per = None, None, 1
        self._k = 0
        self._fn = fn
        self._rng = random.Random(zlib.crc32(f"{name}|{mode}".encode()))  # which timed call a check keeps
        # integrity (see the module docstring)
        self.check: Callable | None = None  # check(inputs, output, reference) -> CheckResult, outside timing
        self.timed_checks, self.timed_mismatches, self.batches = 0, 0, 0
        self.timed_ref_checks, self.timed_ref_failures, self.timed_ref_worst = 0, 0, None
        self.unique_calls = 0  # timed calls whose content was raised before them
        self.drains_s: list[float] = []
        self.l2_reset_s, self.l2_violations, self.l2_error = 0.0, 0, ""
        self._keep_at: int | None = None  # launch index (absolute) whose output is kept
        self._kept: tuple[int, object] | None = None
        self._graph_out: tuple[int, object] | None = None
        self._plan = None  # the current batch's content.TouchPlan
        stream.wait_stream(torch.cuda.current_stream())  # inputs made on the caller's stream are ready
        with torch.cuda.stream(stream), context():
            self._ids = [content.index_of(s) for s in input_sets] if content is not None else None
            # warm-up: lazy init, cuDNN plan build, autotuning, first touch of every set; the same raises as timing
            warm = max(rule.warmup, len(self.sets) if mode != "warm" else 0)
            self._eager(warm)
            stream.synchronize()
            t0 = time.perf_counter()  # rough per-call time (host-inclusive) to size graphs and batches
            self._eager(2)
            stream.synchronize()
            est_call_s = (time.perf_counter() - t0) / 2
            if mode == "graph":
                want = max(len(self.sets), min(rule.graph_calls, math.ceil(_GRAPH_TARGET_S / max(est_call_s, 1e-7))))
                if content is not None:  # one set per captured call: no call of a replay repeats another's content
                    self.sets = list(input_sets[:max(len(self.sets), min(want, len(input_sets)))])
                    self._ids = self._ids[:len(self.sets)]
                    self.per = len(self.sets)
                else:
                    self.per = want
                keep = self._rng.randrange(self.per)
                self.graph, self.capture_ms, self._graph_out = _capture_keep(fn, self.sets, self.per, stream, keep)
                self._replay_touched()
                stream.synchronize()
        self.est_sample_s = est_call_s * self.per
        self.events = _events(rule.max_batch)
        if self.est_sample_s < _SLOW_S:
            # calibration batch (discarded): host enqueue time per launch sizes the spin kernel
            _, host_s = self._run(_CALIBRATION, 0, timed=False)
            self.host_per_launch_s = host_s / _CALIBRATION
        else:  # GPU time dwarfs launch overhead: no calibration, a token spin
            self.host_per_launch_s = 1e-4

    @property
    def content_method(self) -> str | None:
        if self.content is None:
            return None
        return PER_REPLAY if self.graph is not None else PER_CALL

    def _calls(self, count: int) -> list[list[int]]:
        """The sets each of the next `count` launches reads (graph: every set of the graph, per replay)."""
        if self.graph is not None:
            return [list(self._ids)] * count
        return [[self._ids[(self._k + i) % len(self.sets)]] for i in range(count)]

    def _eager(self, count: int) -> None:
        """`count` untimed eager calls, each after the raise a timed call gets."""
        plan = self.content.plan(self._calls(count)) if self.content is not None else None
        for i in range(count):
            if plan is not None:
                self.content.touch(plan.index[i])
            self._fn(*self.sets[self._k % len(self.sets)])
            self._k += 1

    def _replay_touched(self) -> None:
        """One untimed replay after the raise a timed replay gets."""
        if self.content is not None:
            self.content.touch(self.content.plan(self._calls(1)).index[0])
        self.graph.replay()

    def _launch(self) -> None:
        if self.graph is not None:
            self.graph.replay()
            return
        k = self._k
        self._k = k + 1
        out = self._fn(*self.sets[k % len(self.sets)])
        if self._keep_at is not None and k == self._keep_at:
            self._kept = (k % len(self.sets), out)

    def _run(self, count: int, sleep_cycles: int, timed: bool = True) -> tuple[list[float], float]:
        checking = timed and self.check is not None and self.batches in CHECK_BATCHES
        keep = self._rng.randrange(count) if checking and self.graph is None else None
        self._keep_at = None if keep is None else self._k + keep
        self._kept, snap, kept_set = None, None, None
        with torch.cuda.stream(self.stream), self.context():
            # the batch's raises go to the device before it (the copy waits; nothing of it is timed)
            plan = self._plan = self.content.plan(self._calls(count)) if self.content is not None else None
            if keep is not None and plan is not None:  # the kept call's set as it is before the batch
                kept_set = plan.sets[keep][0]
                snap = self.content.snapshot(kept_set)
            self._reset_l2()
            before = (lambda i: self.content.touch(plan.index[i])) if plan is not None else None
            got = _batch(self._launch, count, self.stream, self.events, sleep_cycles, before)
        self.drains_s.append(device_drain_s())
        if not self.l2_error:
            try:
                self.l2_violations += persisting_l2_limit() != 0
            except (OSError, RuntimeError, AttributeError) as exc:
                self.l2_error = f"{type(exc).__name__}: {exc}"
        if timed:
            self.batches += 1
            if plan is not None:
                self.unique_calls += count * self.per
        kept = self._graph_out if checking and self.graph is not None else self._kept
        self._kept, self._keep_at = None, None
        if checking and kept is not None:
            self._check(kept, plan, keep, snap, kept_set)
        return got

    def _check(self, kept, plan, keep, snap, kept_set) -> None:
        """Hand the kept output and exactly the inputs its call saw to the checker (after the batch)."""
        set_index, out = kept
        with torch.cuda.stream(self.stream):
            if self.content is None:
                inputs = self.sets[set_index]
            elif self.graph is not None:  # every set was raised before the last replay, which this call is part of
                inputs = self.content.set_view(self.content.snapshot(self._ids[set_index]))
            else:
                inputs = self.content.inputs_at(snap, kept_set, plan, keep)
            res = self.check(inputs, out, self.timed_checks < REF_CHECKS)
        self.timed_checks += 1
        self.timed_mismatches += int(res.mismatches)
        if res.referenced:
            self.timed_ref_checks += 1
            self.timed_ref_failures += int(res.ref_failed)
            ratio = res.ref_err / res.ref_bound if res.ref_err is not None and res.ref_bound else None
            if ratio is not None:  # a non-finite output counts as a failure, not as a ratio
                self.timed_ref_worst = ratio if self.timed_ref_worst is None else max(self.timed_ref_worst, ratio)

    def _reset_l2(self) -> None:
        """reset_persisting_l2 before a batch; a failure is recorded (the row then cannot pass), not raised."""
        if self.l2_error:
            return
        try:
            self.l2_reset_s += reset_persisting_l2(self.stream)
        except (OSError, RuntimeError, AttributeError) as exc:
            self.l2_error = f"{type(exc).__name__}: {exc}"

    def integrity(self) -> dict:
        """Row fields of the integrity checks (bench/integrity.py judges them)."""
        drains = sorted(self.drains_s)
        return {"timed_checks": self.timed_checks, "timed_mismatches": self.timed_mismatches,
                "drain_us_median": round(drains[len(drains) // 2] * 1e6, 2) if drains else None,
                "drain_us_max": round(drains[-1] * 1e6, 2) if drains else None,
                "l2_violations": self.l2_violations, "l2_error": self.l2_error or None, "l2_reset_us_per_batch":
                    round(self.l2_reset_s / max(1, self.batches) * 1e6, 2),
                "timed_ref_checks": self.timed_ref_checks, "timed_ref_failures": self.timed_ref_failures,
                "timed_ref_worst": None if self.timed_ref_worst is None else round(self.timed_ref_worst, 4)}

    def content_fields(self) -> dict:
        """Row fields of the unique-content rule (uniqueness.timed_content_unique re-derives the verdict)."""
        return {"content_uniqueness": self.content_method, "unique_calls": self.unique_calls}

    def sample(self, slice_s: float, cycles_per_s: float) -> None:
        """One batch of about slice_s of GPU time (at least one sample), appended to times_ms."""
        count = min(self.rule.max_batch, self.rule.max_samples - len(self.times_ms),
                    _max_count(self.host_per_launch_s), max(1, math.ceil(slice_s / max(self.est_sample_s, 1e-7))))
        count = max(count, 1)
        sleep_s = _SLEEP_MARGIN * self.host_per_launch_s * count + 20e-6
        t0 = time.perf_counter()
        try:
            got, host_s = self._run(count, int(sleep_s * cycles_per_s))
        finally:
            self.sampled_s += time.perf_counter() - t0
        self.times_ms += [t / self.per for t in got]
        self.host_per_launch_s = host_s / count
        med = sorted(got)[len(got) // 2] / 1e3
        self.est_sample_s = med if med > 0 else self.est_sample_s

    def close(self) -> None:
        if self.graph is not None:
            self.graph.reset()
            self.graph = None

    def measurement(self, wall_s: float) -> Measurement:
        # µs rounded to 0.1 ns: far below the events' ~0.5 µs resolution, keeps the CSV short
        m = Measurement(self.mode, [round(t * 1e3, 4) for t in self.times_ms], self.stop or "error", self.per,
                        len(self.sets), wall_s, self.capture_ms)
        if self.stop in ("time_cap", "hard_cap"):
            m.notes.append(f"stopped by {self.stop} at n={len(self.times_ms)}, rel IQR {rel_iqr(self.times_ms):.3%}")
        return m


def sample_interleaved(timers: Sequence[Timer], rule: StopRule, time_cap_s: float | None = None,
                       slice_s: float = SLICE_S) -> float:
    """Sample every timer in rounds of short batches until each one's stopping rule holds.

    Interleaving makes every implementation's samples span the same stretch of time, so
    slow GPU states (clock, power, memory) that last longer than one batch hit all of them
    alike: same-run speedups compare like with like. A timer leaves the rotation when it
    stops (stats.stop_reason: the IQR or the median's CI small enough, or a cap). min_time_s
    counts from the start of the group; the cap (time_cap_s) counts each timer's own
    sampling time (Timer.sampled_s), so one noisy implementation left alone in a group stops
    after its own cap, not after the group's len(timers) x cap. An A/B's twins (pair_twins)
    are held to target_rel_ci_pair within PAIR_CAP_FACTOR x the cap and stop in the same
    round, so both span the same stretch of time. A timer whose batch raises gets .error
    and leaves. Returns the group's wall time in seconds.
    """
    if not timers:
        return 0.0
    cap = rule.time_cap_s if time_cap_s is None else time_cap_s
    pair_rule = dataclasses.replace(rule, target_rel_ci=rule.target_rel_ci_pair or rule.target_rel_ci)
    cycles_per_s = sleep_cycles_per_s(timers[0].stream)
    active = list(timers)
    t0 = time.perf_counter()
    # Each round in a fresh (seeded, reproducible) random order: no implementation always runs right
    # after the same one. A fixed cyclic order made an A/B twin always follow its head twin, and the
    # self-check of one binary against a copy of itself then read 2-5% SLOWER on 9 of 168 rows.
    rng = random.Random(0x5EED + len(timers))
    while active:
        order = list(active)
        rng.shuffle(order)
        for t in order:
            try:
                t.sample(slice_s, cycles_per_s)
            except Exception as exc:  # noqa: BLE001 - recorded on the timer, others go on
                t.error = " ".join(f"{type(exc).__name__}: {exc}".split())[:600]
                t.stream.synchronize()
        elapsed = time.perf_counter() - t0
        ready = {id(t): _reason(t, pair_rule if t.twin is not None else rule, elapsed,
                                cap * PAIR_CAP_FACTOR if t.twin is not None else cap)
                 for t in active if not t.error}
        for t in active:
            if t.error:
                continue
            twin = t.twin
            # twins stop in the same round: their samples span the same stretch of time (the A/B compares them)
            waits = (twin is not None and twin in active and not twin.error and ready.get(id(twin)) is None
                     and ready[id(t)] != "max_samples")
            t.stop = None if waits else ready[id(t)]
        active = [t for t in active if t.stop is None and not t.error]
    return time.perf_counter() - t0


PAIR_CAP_FACTOR = 2.0  # an A/B twin's time cap is this many times the group's


def _reason(t: Timer, rule: StopRule, elapsed: float, cap: float) -> str | None:
    """stats.stop_reason for one timer now (its own sampling time against the cap)."""
    rel_iqr_now, rel_ci = noise(t.times_ms, rule.target_rel_ci > 0)
    return stop_reason(len(t.times_ms), rel_iqr_now, elapsed, rule, cap, rel_ci_now=rel_ci, own_s=t.sampled_s)


def pair_twins(a: Timer, b: Timer) -> None:
    """Make a and b an A/B's twins: sampled to target_rel_ci_pair within PAIR_CAP_FACTOR x the cap, stopped
    together."""
    a.twin, b.twin = b, a


def measure(fn: Callable, input_sets: Sequence[tuple], mode: str, rule: StopRule, *,
            stream: torch.cuda.Stream | None = None, time_cap_s: float | None = None,
            context: Callable = contextlib.nullcontext) -> Measurement:
    """Time one implementation alone (the ceilings; tests). Raises if it fails.

    Without a stream it runs on a fresh side stream: graph mode cannot capture on the default one.
    """
    stream = stream or torch.cuda.Stream()
    t_start = time.perf_counter()
    timer = Timer(fn, input_sets, mode, rule, stream=stream, context=context)
    try:
        sample_interleaved([timer], rule, time_cap_s)
    finally:
        timer.close()
    if timer.error:
        raise RuntimeError(timer.error)
    return timer.measurement(time.perf_counter() - t_start)


def device_info(device: int = 0) -> dict:
    p = torch.cuda.get_device_properties(device)
    return {"name": p.name, "sm_count": p.multi_processor_count, "total_memory": p.total_memory,
            "l2_bytes": int(getattr(p, "L2_cache_size", 50 * 2**20)),
            "capability": f"{p.major}.{p.minor}", "torch": torch.__version__,
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
