"""One process per cell: the GPU stages' isolation unit (a crash or hang loses one cell, not the stage).

Cells of stages that run at the same time share one pool of slots per GPU (`SlotPool`): a slot is a lock
file (fcntl.flock) in a folder outside the pack that the scheduler makes, so the stages' own processes
need no broker, and a process that dies releases its slots with it.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..jsonio import read_json, write_json, write_text
from ..records.bench import GpuRef
from ..records.procs import CellRecord, PoolRecord, ProcRecord, ProcRun, Progress
from ..records.stage_options import RunOptions

PROCS_FILE = "procs.json"
log = logging.getLogger("evpack.stages")


@dataclass(frozen=True)
class Job:
    name: str  # file-safe cell name: <name>.log (and usually <name>.json) in the stage folder
    cmd: list[str]
    timeout_s: int
    env: dict[str, str] = field(default_factory=dict)
    est_s: float = 0.0  # expected seconds: a pool runs the longest first (ties keep list order)
    forkable: bool = False  # `python oracles/<x>.py ...` needing no environment of its own (stages/forkserver.py)


POOL_FILE = "pool.json"


@dataclass(frozen=True)
class SlotPool:
    """`per_gpu` slots per GPU shared by every stage process given this folder (see module docstring).
    `gpus`: the run's RunOptions.gpus (None: one unnamed default device)."""
    dir: Path
    per_gpu: int
    gpus: tuple | None = None
    fork: bool = False  # a fork server per GPU runs the forkable cells (stages/forkserver.py)

    def write(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "progress").mkdir(exist_ok=True)
        (self.dir / POOL_FILE).write_text(json.dumps({"per_gpu": self.per_gpu, "gpus": self.gpus, "fork": self.fork}),
                                          encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> SlotPool:
        rec = PoolRecord.from_json(json.loads((Path(folder) / POOL_FILE).read_text(encoding="utf-8")))
        return cls(Path(folder), int(rec.per_gpu), tuple(rec.gpus) if rec.gpus else None, bool(rec.fork))

    @property
    def size(self) -> int:
        return self.per_gpu * (len(self.gpus) if self.gpus else 1)

    def slots(self) -> list[tuple[dict | None, int]]:
        """(gpu, slot number) for every slot, slot 0 of each GPU first (cells spread over the GPUs)."""
        gpus = list(self.gpus) if self.gpus else [None]
        return [(g, k) for k in range(self.per_gpu) for g in gpus]

    def _lock_path(self, gpu: dict | None, k: int) -> Path:
        return self.dir / f"gpu{'-' if gpu is None else GpuRef.from_json(gpu).index}.slot{k}.lock"

    def _try(self, gpu: dict | None, k: int):
        f = open(self._lock_path(gpu, k), "a")  # noqa: SIM115 - held while the cell runs
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            return None
        return f

    def _free(self) -> int:
        """Slots free now (a probe: a slot taken meanwhile is found out when it is tried)."""
        free = 0
        for gpu, k in self.slots():
            f = self._try(gpu, k)
            if f is not None:
                free += 1
                f.close()
        return free

    def _ahead(self, mine: tuple[float, int]) -> int:
        """Cells of live processes waiting before `mine` ((-est_s, ticket time)): longer ones, then older ones."""
        n = 0
        for name in os.listdir(self.dir / "waiting"):
            try:
                neg_est, t, pid = name.split("_")[:3]
                key = (float(neg_est), int(t))
                os.kill(int(pid), 0)
            except (ValueError, ProcessLookupError):
                continue  # not a ticket, or its process is gone
            except PermissionError:
                pass
            n += key < mine
        return n

    def acquire(self, poll_s: float = 0.1, est_s: float = 0.0) -> tuple[dict | None, int, object]:
        """Block until a slot is free for this cell; returns (gpu, slot, handle); pass the handle to release().
        Cells waiting in any process of the run take free slots longest first (est_s), then first come."""
        waiting = self.dir / "waiting"
        waiting.mkdir(exist_ok=True)
        mine = (-float(est_s), time.monotonic_ns())
        ticket = waiting / f"{mine[0]}_{mine[1]}_{os.getpid()}_{threading.get_ident()}"
        ticket.touch()
        try:
            while True:
                if self._ahead(mine) < self._free():
                    for gpu, k in self.slots():
                        f = self._try(gpu, k)
                        if f is not None:
                            return gpu, k, f
                time.sleep(poll_s)
        finally:
            ticket.unlink(missing_ok=True)

    @staticmethod
    def release(handle) -> None:
        handle.close()  # closing the file releases its flock

    def report(self, stage: str, done: int, total: int) -> None:
        """Cells done of total for the scheduler's progress line (in the pool folder, never the pack)."""
        write_text(self.dir / "progress" / f"{stage}.json", json.dumps({"done": done, "total": total}))

    def progress(self) -> dict[str, tuple[int, int]]:
        out = {}
        for p in sorted((self.dir / "progress").glob("*.json")):
            try:
                rec = Progress.from_json(json.loads(p.read_text(encoding="utf-8")))
                out[p.stem] = (int(rec.done), int(rec.total))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return out


def oracle_cmd(repo: Path, program: str, *args: str) -> list[str]:
    return [sys.executable, str(repo / "oracles" / program), *args]


def run_isolated(cmd: list[str], log_path: Path, *, repo: Path, timeout_s: float, env: dict | None = None,
                 grace_s: float = 0.0, append: bool = False) -> dict:
    """Run cmd in its own process group with output to log_path; kill the whole group on timeout.

    On timeout the group gets SIGTERM and `grace_s` seconds to exit (0: SIGKILL at once), then SIGKILL.
    Returns {"returncode", "timed_out", "duration_s"}. Shared by the stage runner and the per-cell jobs.
    """
    t0 = time.monotonic()
    return wait_isolated(start_isolated(cmd, log_path, repo=repo, env=env, append=append), t0,
                         timeout_s=timeout_s, grace_s=grace_s)


def start_isolated(cmd: list[str], log_path: Path, *, repo: Path, env: dict | None = None,
                   append: bool = False) -> subprocess.Popen:
    """cmd started in its own session and process group, its output to log_path (run_isolated's first half)."""
    full_env = dict(os.environ)
    full_env["PYTHONUNBUFFERED"] = "1"
    full_env.update(env or {})
    with open(log_path, "ab" if append else "wb") as log:
        return subprocess.Popen(cmd, cwd=repo, env=full_env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def wait_isolated(proc: subprocess.Popen, t0: float, *, timeout_s: float, grace_s: float = 0.0) -> dict:
    """Wait for a process start_isolated started, at most timeout_s from now; on timeout its group is killed
    (run_isolated's second half). duration_s counts from t0."""
    timed_out = False
    try:
        returncode = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc, grace_s)
        returncode = proc.wait()
    return {"returncode": returncode, "timed_out": timed_out, "duration_s": time.monotonic() - t0}


def kill_isolated(proc: subprocess.Popen) -> None:
    """Stop a process start_isolated started, and its whole group, now."""
    if proc.poll() is None:
        _kill_group(proc, 0)
        proc.wait()


def _kill_group(proc: subprocess.Popen, grace_s: float) -> None:
    signals = ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)) if grace_s > 0 else ((signal.SIGKILL, None),)
    for sig, wait_s in signals:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        if wait_s is not None:
            try:
                proc.wait(timeout=wait_s)
                return
            except subprocess.TimeoutExpired:
                continue


def _run_one(job: Job, stage_dir: Path, repo: Path, gpu: dict | None = None,
             pool: SlotPool | None = None) -> CellRecord:
    """The cell's procs.json entry, less its slot and times (run_jobs adds them)."""
    env = dict(job.env)
    ref = None if gpu is None else GpuRef.from_json(gpu)
    if ref is not None:  # the cell sees its GPU alone, as device 0
        env["CUDA_VISIBLE_DEVICES"] = ref.uuid
    log_path, run = stage_dir / f"{job.name}.log", None
    if pool is not None and pool.fork and job.forkable and not job.env:
        from . import forkserver  # noqa: PLC0415

        run = forkserver.run_forked(forkserver.socket_path(pool.dir, gpu), job.cmd, log_path, cwd=repo,
                                    timeout_s=job.timeout_s)  # None: no server answered, a process of its own
    ran = "forked" if run is not None else "process"
    if run is None:
        run = run_isolated(job.cmd, log_path, repo=repo, timeout_s=job.timeout_s, env=env)
    done = ProcRun.from_json(run)
    return CellRecord(job.cmd, job.env, done.returncode, done.timed_out, round(done.duration_s, 2),
                      ran=ran if pool is not None else None,
                      gpu=None if ref is None else {"index": ref.index, "uuid": ref.uuid})


def gpu_slots(gpus: list[dict] | None, parallel: int) -> list[dict | None]:
    """The pool's worker slots: `parallel` per GPU (pinned), or `parallel` unpinned ones without a GPU list."""
    per = max(1, parallel)
    return [g for g in gpus for _ in range(per)] if gpus else [None] * per


def run_jobs(jobs: list[Job], stage_dir: Path, repo: Path, *, parallel: int | None = 1,
             gpus: list[dict] | None = None, pool: SlotPool | None = None) -> dict:
    """Run jobs on a pool, record procs.json; returns {name: record} (in the jobs' order).

    Without `gpus`: up to `parallel` cells at a time on the process's default device. With `gpus`
    (RunOptions.gpus: several GPUs, or --gpus): `parallel` slots per GPU; a cell takes a free slot,
    runs with CUDA_VISIBLE_DEVICES set to that GPU's UUID, and its record names the GPU (index, UUID).
    With `pool` (the scheduler's shared slots): every cell holds one of the pool's slots while it runs,
    so stages running at the same time share the GPUs; `parallel` (per GPU) then caps this stage's own
    cells, None for no cap of its own. Cells start longest first (Job.est_s; ties keep list order).
    Logs one progress line per finished cell: cells done of total, elapsed, an estimate of the rest.
    """
    records: dict[str, dict] = {}  # the cells' procs.json entries (CellRecord.to_json)
    t0, done, lock = time.monotonic(), [0], threading.Lock()
    order = sorted(jobs, key=lambda j: -j.est_s)
    stage = stage_dir.name
    if pool is not None:
        cap = pool.size if parallel is None else max(1, parallel) * (len(pool.gpus) if pool.gpus else 1)
        workers = max(1, min(cap, pool.size, len(jobs)))
        pool.report(stage, 0, len(jobs))
    else:
        slots = gpu_slots(gpus, parallel or 1)
        workers = len(slots)
        free: queue.SimpleQueue = queue.SimpleQueue()
        for slot in slots:
            free.put(slot)

    def go(job: Job) -> tuple[str, dict]:
        start = time.monotonic() - t0
        if pool is not None:
            gpu, k, handle = pool.acquire(est_s=job.est_s)
            try:
                rec = _run_one(job, stage_dir, repo, gpu, pool)
            finally:
                pool.release(handle)
            rec = replace(rec, slot={"gpu": None if gpu is None else GpuRef.from_json(gpu).index, "slot": k})
        else:
            gpu = free.get()
            try:
                rec = _run_one(job, stage_dir, repo, gpu)
            finally:
                free.put(gpu)
        rec = replace(rec, start_s=round(start, 2), end_s=round(time.monotonic() - t0, 2))
        state = "timed out" if rec.timed_out else f"rc={rec.returncode}"
        where = f" on GPU {GpuRef.from_json(gpu).index}" if gpu is not None else ""
        with lock:
            done[0] += 1
            elapsed = time.monotonic() - t0
            left = elapsed / done[0] * (len(jobs) - done[0])
            log.info("    [%d/%d] %s%s: %s (%.1f s); %.0f s elapsed, ~%.0f s left", done[0], len(jobs), job.name,
                     where, state, rec.duration_s, elapsed, left)
            if pool is not None:
                pool.report(stage, done[0], len(jobs))
        return job.name, rec.to_json()

    with ThreadPoolExecutor(max_workers=workers) as pool_threads:
        ran = dict(pool_threads.map(go, order))
    for job in jobs:  # procs.json keeps the stage's own order of cells, whatever order they ran in
        records[job.name] = ran[job.name]
    write_json(stage_dir / PROCS_FILE, records)
    return records


def stage_pool(ctx) -> SlotPool | None:
    """The shared slot pool of a scheduled run (StageContext.slots), None outside one."""
    return SlotPool.load(ctx.slots) if getattr(ctx, "slots", None) else None


def proc_problem(stage_dir: Path, name: str) -> str | None:
    """Why a cell's process did not finish cleanly (None when it did)."""
    procs = read_json(stage_dir / PROCS_FILE)
    rec = procs.get(name)
    if rec is None:
        return f"{name}: never ran"
    rec = ProcRecord.from_json(rec)
    if rec.timed_out:
        return f"{name}: timed out after {rec.duration_s} s (log {name}.log)"
    if rec.returncode != 0:
        return f"{name}: exited {rec.returncode}: {last_line(stage_dir / f'{name}.log')}"
    return None


def record_binary(stage_dir: Path, results: list[Path]) -> None:
    """stage_dir/binary.json from the first result file that says which extension its process loaded."""
    for path in results:
        if path.exists():
            binary = read_json(path, allow_nan=True).get("binary")  # an oracle result: may hold inf
            if binary:
                write_json(stage_dir / "binary.json", binary)
                return


def last_line(path: Path) -> str:
    if not path.exists():
        return "no log"
    lines = [ln for ln in path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    return lines[-1].strip()[:200] if lines else "empty log"


def selected_variants(options: dict):
    from .. import registry

    want = RunOptions.from_json(options).variants
    return [v for v in registry.VARIANTS if not want or v.name in want]


def variants_to_run(ctx):
    """The selected variants whose cells this stage runs: all but those an incremental run carries from an
    earlier pack (RunOptions.carry = {stage: [variant, ...]}, evpack.incremental)."""
    carried = set((RunOptions.from_json(ctx.options).carry or {}).get(ctx.dir.name, ()))

    return [v for v in selected_variants(ctx.options) if v.name not in carried]
