"""The stage scheduler of `evidence`: which stage starts when, and what may run beside it.

Every stage is declared once (stages/order.py: StageSpec). A stage becomes ready when every stage it
depends on or waits for (`after`) has concluded (ran and was derived, or was skipped); its skip is decided
then, from the same facts as a sequential run decides it. A ready stage starts when its resource class
allows:

- `cpu` (build, ptxas, sass, canaries): inline in the driver, beside any stage but an `alone` one;
- `gpu-shared` (sanitize, correctness, stability: checks that do not time): beside each other, their cells
  sharing one pool of slots per GPU (stages/procs.SlotPool);
- `gpu-exclusive` (tensor_proof: ncu's counters must see no other process's work; bench: timing): no other
  GPU stage beside it; a ready exclusive stage that must wait holds back the GPU stages after it;
- `alone` (bench): nothing at all beside it.

With `overlap=False` one stage runs at a time, in RUN_ORDER: the sequential run, which the overlapped one
must equal in everything but times (tests/test_schedule.py). Stages are derived in the calling thread
as they conclude, once each.

A stage whose run ended may have to wait to conclude (`hold`: the stages that must conclude first; it frees
its resources meanwhile, and no stage after it starts until it concluded), and may be sent back to run once
more (`rerun`, asked just before it concludes): an incremental run starts its GPU checks on a plan made
before the SASS dump, and checks that plan when the dump is there (evpack/incremental/run.py).
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .model import StageOutcome
from .stages.order import CPU, GPU_EXCLUSIVE, GPU_SHARED, StageSpec

log = logging.getLogger("evpack")
STATUS_S = 15.0  # a progress line this often while stages run
OVERLAPPED, SEQUENTIAL = "overlapped", "sequential"


@dataclass(frozen=True)
class StageTime:
    start_s: float  # since the run began
    end_s: float
    duration_s: float

    def to_json(self) -> dict:
        return {"start_s": self.start_s, "end_s": self.end_s, "duration_s": self.duration_s}


@dataclass(frozen=True)
class Scheduled:
    outcomes: dict[str, StageOutcome]  # in the order they concluded
    times: dict[str, StageTime]
    mode: str


def may_start(spec: StageSpec, running: list[StageSpec], *, overlap: bool) -> bool:
    """Whether `spec` may start beside the stages running now (resource classes, module docstring)."""
    if not running:
        return True
    if not overlap or spec.alone or any(r.alone for r in running):
        return False
    gpu = [r for r in running if r.resource != CPU]
    if spec.resource == GPU_EXCLUSIVE:
        return not gpu
    if spec.resource == GPU_SHARED:
        return all(r.resource == GPU_SHARED for r in gpu)
    return True


def run_schedule(specs: list[StageSpec], *, execute: Callable[[str], None],
                 skip_reason: Callable[[str, dict[str, StageOutcome]], str | None],
                 skip: Callable[[str, str], None], conclude: Callable[[str], StageOutcome],
                 overlap: bool = True, cells: Callable[[], dict[str, tuple[int, int]]] | None = None,
                 clock: Callable[[], float] = time.monotonic, status_s: float = STATUS_S,
                 started: float | None = None, hold: Callable[[str], tuple[str, ...]] | None = None,
                 rerun: Callable[[str], bool] | None = None) -> Scheduled:
    """Run every stage of `specs` (in RUN_ORDER) once. `execute(name)` runs a stage (in a worker thread; it
    records its own failures), `skip(name, reason)` records a skip, `conclude(name)` derives a stage that
    ran or was skipped (here, in the calling thread), `skip_reason(name, outcomes)` decides a skip once the
    stage's dependencies concluded. `cells()` gives cells done/total per running stage for progress lines.
    Times are seconds since `started` (a `clock()` reading: the run's start), by default since this call.
    `hold(name)`, asked when a stage's run ends: stages that must conclude before it does; `rerun(name)`, asked
    just before it concludes: True runs it again (once at most) instead."""
    t0 = clock() if started is None else started
    order = [s.name for s in specs]
    by_name = {s.name: s for s in specs}
    pending = list(order)
    running: dict[str, float] = {}  # name -> start (since t0)
    first_start: dict[str, float] = {}  # a stage run again keeps the start of its first run
    held: dict[str, tuple[float, float]] = {}  # ran, not yet concluded: name -> (start, end of its run)
    reran: set[str] = set()
    outcomes: dict[str, StageOutcome] = {}
    times: dict[str, StageTime] = {}
    finished: queue.SimpleQueue = queue.SimpleQueue()
    position = {n: i for i, n in enumerate(order, 1)}

    def now() -> float:
        return round(clock() - t0, 3)

    def finish(name: str, start: float, end: float | None = None) -> None:
        outcomes[name] = conclude(name)
        end = now() if end is None else end
        times[name] = StageTime(start, end, round(end - start, 3))
        log.info("[%d/%d] %s: %s (%.1f s) - %s", position[name], len(order), name, outcomes[name].status,
                 end - start, outcomes[name].reason)

    def worker(name: str) -> None:
        try:
            execute(name)
            finished.put((name, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the scheduling thread, which raises it
            finished.put((name, exc))

    def start_ready() -> None:
        gpu_held_back = False
        for name in list(pending):
            if running and not overlap:
                return  # one at a time, in order (skips included)
            spec = by_name[name]
            if not all(d in outcomes for d in spec.depends_on + spec.after if d in by_name):
                continue
            reason = skip_reason(name, outcomes)
            if reason:
                pending.remove(name)
                start = now()
                skip(name, reason)
                finish(name, start)
                continue
            if (gpu_held_back and spec.resource != CPU) or \
                    not may_start(spec, [by_name[r] for r in running], overlap=overlap):
                gpu_held_back = gpu_held_back or spec.resource == GPU_EXCLUSIVE or spec.alone
                continue
            pending.remove(name)
            running[name] = now()
            first_start.setdefault(name, running[name])
            beside = [r for r in running if r != name]
            log.info("[%d/%d] %s: running%s (%.0f s since start%s)", position[name], len(order), name,
                     f" (own process, timeout {spec.timeout_s} s)" if spec.needs_gpu else "", running[name],
                     f"; beside {', '.join(beside)}" if beside else "")
            threading.Thread(target=worker, args=(name,), name=f"stage-{name}", daemon=True).start()

    def settle(name: str, start: float, end: float) -> None:
        """Conclude a stage whose run ended, or send it back to run again."""
        if rerun is not None and rerun(name):
            if name in reran:
                raise RuntimeError(f"scheduler: {name} asked to run a third time")
            reran.add(name)
            log.info("[%d/%d] %s: runs again (%.0f s since start)", position[name], len(order), name, now())
            pending.insert(sum(1 for p in pending if position[p] < position[name]), name)
            return
        finish(name, first_start.get(name, start), end)

    def settle_held() -> None:
        for name in [n for n in held if all(d in outcomes for d in hold_for(n))]:
            settle(name, *held.pop(name))

    def hold_for(name: str) -> tuple[str, ...]:
        return tuple(d for d in (hold(name) if hold else ()) if d in by_name and d != name)

    while True:
        before = None
        while before != (len(pending), len(outcomes)):  # skips and held stages conclude here and may make
            before = (len(pending), len(outcomes))    # more stages ready (a stage run again re-enters pending)
            start_ready()
            settle_held()
        if not running:
            if pending or held:
                waiting = ", ".join(list(pending) + list(held))
                raise RuntimeError(f"scheduler: nothing can start ({waiting} wait on each other)")
            break
        try:
            name, exc = finished.get(timeout=status_s)
        except queue.Empty:
            _status_line(running, outcomes, len(order), now(), cells() if cells else {})
            continue
        start = running.pop(name)
        if exc is not None:
            raise exc
        end = now()
        if any(d not in outcomes for d in hold_for(name)):
            held[name] = (start, end)
            log.info("[%d/%d] %s: ran (%.1f s); concludes once %s concluded", position[name], len(order), name,
                     end - start, ", ".join(d for d in hold_for(name) if d not in outcomes))
            continue
        settle(name, start, end)
        settle_held()
    return Scheduled(outcomes, times, OVERLAPPED if overlap else SEQUENTIAL)


def _status_line(running: dict[str, float], outcomes: dict, total: int, elapsed: float,
                 cells: dict[str, tuple[int, int]]) -> None:
    now_running = ", ".join(f"{n} ({cells[n][0]}/{cells[n][1]} cells)" if n in cells else n for n in running)
    log.info("  running: %s; %d/%d stages done; %.0f s elapsed", now_running, len(outcomes), total, elapsed)


MAX_SLOTS_PER_GPU = 12  # what sanitize alone ran at before the pool (16 cores); each cell is a process


def slots_per_gpu(value: str | None, n_gpus: int, cpus: int) -> int:
    """The shared pool's slots per GPU: `value` (EVPACK_GPU_SLOTS) when given, else one per CPU core the
    GPU's share of the host has, at most MAX_SLOTS_PER_GPU (a cell is mostly a process starting: CPU)."""
    if value is not None and value.strip():
        text = value.strip()
        if not text.isdigit() or not 1 <= int(text) <= 256:
            raise ValueError(f"EVPACK_GPU_SLOTS={value!r}: give a whole number of slots per GPU from 1 to 256")
        return int(text)
    return max(2, min(MAX_SLOTS_PER_GPU, cpus // max(1, n_gpus)))


def schedule_mode(value: str | None) -> str:
    """EVPACK_SCHEDULE: overlapped (default) or sequential (one stage at a time, the order of old runs)."""
    text = (value or OVERLAPPED).strip() or OVERLAPPED
    if text not in (OVERLAPPED, SEQUENTIAL):
        raise ValueError(f"EVPACK_SCHEDULE={value!r}: give {OVERLAPPED} or {SEQUENTIAL}")
    return text


def fork_server(value: str | None) -> bool:
    """EVPACK_FORK_SERVER: 1 or unset runs the correctness and stability cells through a fork server per GPU
    (stages/forkserver.py); 0 starts a process per cell."""
    text = (value or "1").strip() or "1"
    if text not in ("0", "1"):
        raise ValueError(f"EVPACK_FORK_SERVER={value!r}: give 1 (fork server) or 0 (a process per cell)")
    return text == "1"
