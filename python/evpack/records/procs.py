"""The records of a stage's cell processes (stages/procs.py, stages/forkserver.py): what running one process
gave, a cell's entry of procs.json (written by CellRecord, read by ProcRecord, or strictly by CellRun), the slot pool's own files
(pool.json, progress/<stage>.json, outside the pack) and the fork server's protocol lines.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .bench import GpuRef
from .required import Strict
from .view import View


@dataclass(frozen=True)
class ProcRun(View):
    """One process's run: {"returncode", "timed_out", "duration_s"} (run_isolated, forkserver.run_forked)."""

    returncode: Any = None
    timed_out: Any = None
    duration_s: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class ProcRecord(View):
    """One cell's entry of procs.json as the file holds it."""

    cmd: Any = None
    env: Any = None
    returncode: Any = None
    timed_out: Any = None
    duration_s: Any = None
    ran: Any = None  # "forked" or "process" (with a slot pool)
    gpu: Any = None  # {"index", "uuid"} as the file holds it (None: no GPU list)
    slot: Any = None
    start_s: Any = None
    end_s: Any = None
    carried_from: Any = None  # the pack a carried cell came from (incremental evidence)
    batch: Any = None  # the process that ran this cell with others (tensor_proof: <batch>.log is its output)
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def gpu_ref(self) -> GpuRef:
        return GpuRef.from_json(self.gpu)


@dataclass(frozen=True)
class CellRecord:
    """procs.json's entry of a cell this process ran; to_json writes it (ran, gpu and slot only when set)."""

    cmd: list
    env: dict
    returncode: Any
    timed_out: bool
    duration_s: float
    ran: str | None = None  # how the process was made, with a slot pool: forked by the GPU's server, or started
    gpu: dict | None = None  # {"index", "uuid"} of the GPU the cell was pinned to
    slot: dict | None = None  # {"gpu": index or None, "slot": k} of the pool slot it held
    start_s: float | None = None
    end_s: float | None = None
    batch: str | None = None  # the process that ran this cell with others (its record and log: <batch>.*)

    def to_json(self) -> dict:
        out = {"cmd": self.cmd, "env": self.env, "returncode": self.returncode, "timed_out": self.timed_out,
               "duration_s": self.duration_s}
        out.update((k, v) for k, v in (("ran", self.ran), ("gpu", self.gpu), ("slot", self.slot)) if v is not None)
        out.update(start_s=self.start_s, end_s=self.end_s)
        if self.batch is not None:
            out.update(batch=self.batch)
        return out


@dataclass(frozen=True)
class PoolRecord(View):
    """pool.json of a slot pool: slots per GPU, the GPU list, whether fork servers run the forkable cells."""

    per_gpu: Any = None
    gpus: Any = None
    fork: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Progress(View):
    """progress/<stage>.json of a slot pool: cells done of total."""

    done: Any = None
    total: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class CellRequest(View):
    """The fork server's request line: the cell's command (python, script, args...), its folder and log."""

    cmd: Any = None
    cwd: Any = None
    log: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class ForkReply(View):
    """A fork server's answer line: {"pid"} once the child runs, {"returncode"} when it ended, or {"error"}."""

    pid: Any = None
    returncode: Any = None
    error: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, eq=False, repr=False)
class CellRun(Strict):
    """A cell's entry of procs.json read strictly, for the stages whose verdict needs it (correctness,
    sanitize): the fields a verdict needs are required (absent: KeyError) and a record that is not an object
    is refused (TypeError), as reading it as a dict was."""

    required = frozenset({"returncode", "duration_s", "timed_out"})
    cmd: Any = None
    returncode: Any = None
    duration_s: Any = None
    timed_out: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, value: Any) -> CellRun:
        if not isinstance(value, Mapping):
            raise TypeError(f"a procs.json record that is not an object ({type(value).__name__})")
        return cls.from_json(value)

    @property
    def command(self) -> Any:
        """The command (none recorded: empty)."""
        return self.cmd if self.has("cmd") else ()
