"""Deriving a pack's results from its files alone: the one path `evidence` and `verify` share.

A stage's outcome combines how the stage ran (`<stage>/runner.json`, written by the runner) with
the stage module's pure `derive(stage_dir, pack_dir)`. Inside `derivation_session()` each stage is
derived at most once per pack folder, so a stage that reads another stage's outcome (the canary
matrix) costs no second parse of the raw files.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from .dictwalk import Rules, common_keys, differences
from .jsonio import read_json
from .labels import decide
from .model import ERROR, GATE_ORDER, SKIPPED, GateResult, LabelDecision, PackFacts, StageOutcome
from .records.runner import RunnerRecord, RunnerRecordError
from .records.schema import CURRENT
from .stages.base import OUTCOME_READERS
from .stages.order import stage_module
from .stages.procs import last_line

RUNNER_FILE = "runner.json"
LOG_FILE = "stage.log"
# Keys whose values are prose (views): never part of a decision, never compared by verify. A property of the
# pack's schema version (records/schema.py), never of the live code: these are today's.
PROSE_KEYS = CURRENT.prose_keys

_SESSION: ContextVar[dict | None] = ContextVar("evpack_derivation_session", default=None)


@contextmanager
def derivation_session() -> Iterator[None]:
    """Memoise stage outcomes by (pack folder, stage, stage package) for the duration of the block."""
    if _SESSION.get() is not None:  # already inside one: share its memo
        yield
        return
    token = _SESSION.set({})
    try:
        yield
    finally:
        _SESSION.reset(token)


def _log_tail(stage_dir: Path) -> str:
    return last_line(stage_dir / LOG_FILE)


def final_outcome(name: str, pack_dir: Path, *, stages: str | None = None) -> StageOutcome:
    """Status of a stage from the files in the pack alone (used by evidence and verify)."""
    cache = _SESSION.get()
    key = (str(Path(pack_dir).resolve()), name, stages)
    if cache is not None and key in cache:
        return cache[key]
    out = _final_outcome(name, Path(pack_dir), stage_module(name, stages))
    if cache is not None:
        cache[key] = out
    return out


def _final_outcome(name: str, pack_dir: Path, mod: ModuleType) -> StageOutcome:
    stage_dir = pack_dir / name
    try:
        rec = RunnerRecord.from_json(read_json(stage_dir / RUNNER_FILE))
    except FileNotFoundError:
        return StageOutcome(ERROR, f"{name}: no {RUNNER_FILE}: the stage never ran to completion")
    except RunnerRecordError:
        return StageOutcome(ERROR, f"{name}: {RUNNER_FILE} is not an object")
    except (ValueError, OSError) as exc:  # not JSON, not UTF-8, too deep, not a regular file, ...
        return StageOutcome(ERROR, f"{name}: unreadable {RUNNER_FILE}: {exc}")
    if rec.skipped:
        return StageOutcome(SKIPPED, str(rec.skipped))
    if rec.timed_out:
        return StageOutcome(ERROR, f"timed out after {rec.duration_s} s; log kept in {name}/{LOG_FILE}: "
                                   f"{_log_tail(stage_dir)}")
    if rec.returncode != 0:
        what = rec.exception or f"stage process exited with code {rec.returncode}"
        return StageOutcome(ERROR, f"{what}; log kept in {name}/{LOG_FILE}: {_log_tail(stage_dir)}")
    try:
        return mod.derive(stage_dir, pack_dir)
    except Exception as exc:  # a broken or forged file is an error of the stage, never a crash of verify
        return StageOutcome(ERROR, f"could not derive {name} from its files: {type(exc).__name__}: {exc}")


OUTCOME_READERS.append(final_outcome)  # what stages.base.other_outcome asks (the stages do not import this layer)


def stage_facts(outcomes: dict[str, StageOutcome], *, stages: str | None = None) -> PackFacts:
    """Fold each stage module's optional `facts(outcome, facts) -> PackFacts` over the outcomes."""
    facts = PackFacts()
    for name, out in outcomes.items():
        contribute = getattr(stage_module(name, stages), "facts", None)
        if contribute is not None and out.status != SKIPPED:
            facts = contribute(out, facts)
    return facts


def decision_view(obj: Any, prose: frozenset[str] = PROSE_KEYS) -> Any:
    """The decision fields and numbers of a record: prose keys (those of the pack's schema) dropped at every
    depth."""
    if isinstance(obj, dict):
        return {k: decision_view(v, prose) for k, v in obj.items() if k not in prose}
    if isinstance(obj, list):
        return [decision_view(v, prose) for v in obj]
    return obj


def _same_view(stored: Any, derived: Any) -> bool:
    if stored is None and isinstance(derived, float) and not math.isfinite(derived):
        return True  # written as null (JSON has no NaN)
    if isinstance(stored, float) or isinstance(derived, float):
        try:
            return stored == derived or abs(float(stored) - float(derived)) <= 1e-9 * max(1.0, abs(float(stored)))
        except (TypeError, ValueError):
            return False
    return stored == derived


def _view_mismatch(path: str, stored: Any, derived: Any) -> str:
    where = path if isinstance(stored, float) or isinstance(derived, float) else path or "value"
    return f"{where}: stored {stored!r}, derived {derived!r}"


# Keys present on one side only are a schema difference between the code that wrote the pack and the code
# that reads it, not a mismatch; numbers agree within 1e-9 relative; lists are compared element-wise.
VIEW_RULES = Rules(mismatch=_view_mismatch, keys=common_keys, same=_same_view,
                   lists=lambda path, n, m: f"{path or 'data'}: {n} entries stored, {m} derived")


def view_differences(stored: Any, derived: Any, path: str = "") -> list[str]:
    """Where two decision views disagree (dictwalk.differences under VIEW_RULES)."""
    return differences(stored, derived, VIEW_RULES, path)


def content_digest(stages: dict[str, StageOutcome], gates: dict, label: str,
                   prose_keys: frozenset[str] = CURRENT.digest_prose_keys) -> str:
    """Digest of what the pack decided and measured (prose, timestamps and durations excluded):
    zero-delta detection between two packs of one commit. `gates`: name -> anything with a status."""
    body = {"stages": {k: _strip_times(decision_view(v.to_json(), prose_keys))
                       for k, v in stages.items()},
            "gates": {k: v.status for k, v in gates.items()}, "label": label}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _strip_times(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip_times(v) for k, v in obj.items() if not _is_timey(str(k))}
    if isinstance(obj, list):
        return [_strip_times(v) for v in obj]
    return obj


def _is_timey(key: str) -> bool:
    return any(t in key for t in ("time", "duration", "elapsed", "utc", "date")) or key.endswith(("_s", "_ms", "_us"))


@dataclass(frozen=True)
class Derived:
    stages: dict[str, StageOutcome]
    gates: dict[str, GateResult]
    decision: LabelDecision
    facts: PackFacts
    digest: str

    @property
    def label(self) -> str:
        return self.decision.label

    @property
    def labels(self) -> list[str]:
        return list(self.decision.labels)


def _derive_one(args: tuple[str, str, str | None]) -> StageOutcome:
    name, pack_dir, stages = args
    return final_outcome(name, Path(pack_dir), stages=stages)


def _derive_parallel(pack_dir: Path, names: list[str], stages: str | None) -> dict[str, StageOutcome]:
    """Stages that read no other stage's outcome, derived in worker processes (fork): the large raw
    files (SASS dumps, benchmark samples) are parsed side by side. A stage that marks itself
    DERIVE_IN_PARENT is derived in this process meanwhile, so what it parsed stays here for the callers
    after it (the SASS dump, which the incremental keys read again: parsers/sass). {} when it cannot be done."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    independent = [n for n in names if not getattr(stage_module(n, stages), "DERIVE_READS_STAGES", False)]
    workers = min(len(independent), os.cpu_count() or 1, 4)
    if workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return {}
    here = [n for n in independent if getattr(stage_module(n, stages), "DERIVE_IN_PARENT", False)]
    forked = [n for n in independent if n not in here]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        results = pool.map(_derive_one, [(n, str(pack_dir), stages) for n in forked])
        mine = {n: _derive_one((n, str(pack_dir), stages)) for n in here}
        return {**dict(zip(forked, results, strict=True)), **mine}


def derive_all(pack_dir: Path, stage_names, *, stages: str | None = None,
               gate_names: tuple[str, ...] = GATE_ORDER, parallel: bool = False) -> Derived:
    """Every selected stage, the gates of the pack's schema and the labels, from the pack's files.
    `parallel`: derive independent stages in worker processes (verify of a large pack)."""
    from .gates import derive_gates  # gates reads binary records of several stages

    names = list(stage_names)
    with derivation_session():
        early = _derive_parallel(pack_dir, names, stages) if parallel else {}
        cache = _SESSION.get()
        for name, out in early.items():
            cache[(str(Path(pack_dir).resolve()), name, stages)] = out
        outcomes = {name: final_outcome(name, pack_dir, stages=stages) for name in names}
    gates = {g: r for g, r in derive_gates(outcomes, pack_dir).items() if g in gate_names}
    facts = stage_facts(outcomes, stages=stages)
    decision = decide({g: r.status for g, r in gates.items()}, perf_regression=facts.perf_regression)
    return Derived(outcomes, gates, decision, facts, content_digest(outcomes, gates, decision.label))
