"""<stage>/runner.json: how the runner ran a stage (written by runner.py, read by derivation.py and verify).

The values are kept as the file holds them: a forged or broken record (a string returncode, a skipped
that is not text) is judged by the derivation's rules (returncode must be exactly 0, ...), never coerced
here into something that passes. Keys this code does not know are kept, in order, after the known ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FIELDS = ("stage", "started_utc", "duration_s", "mode", "returncode", "timed_out", "skipped", "exception")
INLINE, PROCESS, NONE = "inline", "process", "none"


class RunnerRecordError(ValueError):
    """A runner.json that is not an object."""


@dataclass(frozen=True)
class RunnerRecord:
    stage: Any
    started_utc: Any
    duration_s: Any = None  # seconds (float); None while the stage runs
    mode: Any = INLINE  # "process" (own process, with a log), "inline", "none" (skipped)
    returncode: Any = None  # 0: the stage's run() returned; anything else is an error
    timed_out: Any = False
    skipped: Any = None  # the reason the stage was skipped (text), or None
    exception: Any = None  # "Type: message" of an inline stage that raised
    extra: tuple[tuple[str, Any], ...] = ()  # keys of a newer writer, kept in order

    @classmethod
    def skip(cls, stage: str, started_utc: str, reason: str) -> RunnerRecord:
        return cls(stage, started_utc, 0.0, NONE, None, False, reason, None)

    @classmethod
    def from_json(cls, obj: Any) -> RunnerRecord:
        if not isinstance(obj, dict):
            raise RunnerRecordError("runner.json is not an object")
        known = {k: obj[k] for k in FIELDS if k in obj}
        return cls(**{"stage": None, "started_utc": None, **known},
                   extra=tuple((k, v) for k, v in obj.items() if k not in FIELDS))

    def to_json(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in FIELDS}, **dict(self.extra)}

    @property
    def ran_in_process(self) -> bool:
        return self.mode == PROCESS
