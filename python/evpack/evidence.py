"""`evidence`: run the selected stages in order into a temporary pack, assemble it, rename it into place."""
from __future__ import annotations

import dataclasses
import logging
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .derivation import derivation_session, derive_all, final_outcome
from .envlock import collect_env, python_pin_warning
from .gitinfo import git_info
from .incremental import CARRY_STAGES, DUMP_STAGE
from .incremental.carry import CarryError
from .incremental.run import IncrementalRun
from .jsonio import read_json, write_json
from .labels import carried_note
from .model import PASS
from .pack import (
    PackError,
    ensure_writable,
    finalize,
    list_packs,
    new_pack_id,
    outcome_file,
    pack_record,
    previous_same_commit,
    reserve_pack_folder,
    write_index,
)
from .provenance.attest import SigningFailed, collect_run_facts, write_provenance
from .provenance.signing import load_signing_key
from .records.pack import PackRecord, ZeroDelta, present
from .reporting import missing_renderer
from .runner import WarmStage, record_skip, run_stage
from .schedule import fork_server, run_schedule, schedule_mode, slots_per_gpu
from .stages import forkserver
from .stages.order import GPU_SHARED, RUN_ORDER, STAGE_ORDER, StageSpec, stage_spec, with_dependencies
from .stages.procs import SlotPool, selected_variants
from .toolchain import toolchain

log = logging.getLogger("evpack")


@dataclass(frozen=True)
class RunResult:
    pack: Path
    label: str
    labels: tuple[str, ...]
    has_gpu: bool
    wall_s: float = 0.0  # start to pack.json (pack.json -> timings.wall_s)


def previous_with_bench(packs_root: Path) -> Path | None:
    """The newest finished pack whose benchmark produced a summary (compare's baseline)."""
    for pack in reversed(list_packs(packs_root)):
        if any((pack / "bench" / f"summary.json{s}").exists() for s in ("", ".xz")):
            return pack
    return None


def gpu_available() -> tuple[bool, str]:
    """(available, reason when not). Imports torch only here, in the driver process."""
    try:
        import torch  # noqa: PLC0415
    except Exception as exc:
        return False, f"no CUDA device: torch is not importable ({type(exc).__name__})"
    if torch.version.cuda is None:
        return False, f"no CUDA device: torch {torch.__version__} is a CPU-only build"
    if not torch.cuda.is_available():
        return False, "no CUDA device: torch.cuda.is_available() is False"
    return True, ""


def _skip_reason(spec: StageSpec, to_run: list[str], outcomes: dict, has_gpu: bool, no_gpu_reason: str) -> str | None:
    name = spec.name
    if name not in to_run:
        return "not selected for this run"
    blocked = [d for d in spec.depends_on if d in outcomes and outcomes[d].status != PASS and name != "canaries"]
    if blocked:
        return "needs " + ", ".join(f"{d} ({outcomes[d].status})" for d in blocked)
    if spec.needs_gpu and not has_gpu:
        return no_gpu_reason
    return None


def run_evidence(repo: Path, *, selected: list[str] | None, packs_root: Path, options: dict,
                 requirement: str | None = None, stages: str | None = None,
                 gpu: tuple[bool, str] | None = None, sign_key: Path | None = None, fresh: bool = False) -> RunResult:
    """Run the stages, write the pack atomically, return where it is and what it decided.

    `stages` names a stand-in stage package (tests); `gpu` overrides the CUDA probe (tests);
    `sign_key` signs provenance.json (checked before any stage runs). A signing failure at the end
    keeps the pack, unsigned, and raises SigningFailed. Cells of variants whose keys equal the newest complete
    pack's are carried from it (evpack.incremental) unless `fresh`.
    """
    t_start = time.monotonic()
    ensure_writable(packs_root)
    try:  # how stages are placed (never what they check): before any work
        mode = schedule_mode(os.environ.get("EVPACK_SCHEDULE"))
        gpus = options.get("gpus")
        per_gpu = slots_per_gpu(os.environ.get("EVPACK_GPU_SLOTS"), len(gpus) if gpus else 1, os.cpu_count() or 1)
        fork = fork_server(os.environ.get("EVPACK_FORK_SERVER"))
    except ValueError as exc:
        raise PackError(str(exc)) from None
    no_renderer = missing_renderer()
    if no_renderer:
        raise PackError(no_renderer)
    signer = load_signing_key(sign_key) if sign_key else None  # bad key: error before any work
    run_facts = collect_run_facts(repo)
    to_run = with_dependencies(selected) if selected else list(STAGE_ORDER)
    if "bench" in to_run and not options.get("previous_pack"):
        prev_bench = previous_with_bench(packs_root)
        if prev_bench is not None:  # the report then shows the diff against it (and perf-regression)
            options = dict(options, previous_pack=str(prev_bench))
    git = git_info(repo)
    created = datetime.now(timezone.utc)
    pack_id, tmp = reserve_pack_folder(packs_root, new_pack_id(git.commit, git.dirty, created))
    warnings = []
    pin = python_pin_warning()
    if pin:
        warnings.append(pin)
        log.warning("WARNING: %s", pin)
    log.info("evidence pack %s (writing into %s)", pack_id, tmp)
    env = collect_env(repo)
    write_json(tmp / "env.json", env)
    has_gpu, no_gpu_reason = gpu if gpu is not None else gpu_available()
    log.info("GPU: %s", f"yes, {env.get('gpu_name')}" if has_gpu else no_gpu_reason)
    tools = toolchain()
    facts = {"toolchain": tools, "python": {"version": ".".join(map(str, sys.version_info[:3]))}}
    inc = IncrementalRun(repo, packs_root, tmp, variants=[v.name for v in selected_variants(options)], fresh=fresh,
                         exclude=pack_id, stages=stages,
                         why_not=None if has_gpu and set(CARRY_STAGES) & set(to_run) else
                         "no GPU stage runs in this pack: nothing to carry", early=DUMP_STAGE in to_run)
    t_all = time.monotonic()
    specs = [stage_spec(name, stages) for name in RUN_ORDER]  # canaries last: they read every stage's catch
    by_name = {s.name: s for s in specs}
    # One derivation session for the whole run: each stage is derived once, when it concludes, and the
    # gates, pack.json and the reports take those outcomes (derive_all below reads the memo).
    with tempfile.TemporaryDirectory(prefix="evpack-slots-", ignore_cleanup_errors=True) as slot_dir, derivation_session():
        pool = SlotPool(Path(slot_dir), per_gpu, tuple(gpus) if gpus else None, fork=fork and has_gpu)
        pool.write()
        log.info("schedule: %s; %d cell slots per GPU shared by the GPU checks%s", mode, per_gpu,
                 "; a fork server per GPU for correctness and stability cells" if pool.fork else "")
        servers = forkserver.start(pool.dir, gpus, repo) if pool.fork else []

        warm: dict[str, WarmStage] = {}
        warm_lock = threading.Lock()

        def execute(name: str) -> None:
            spec = by_name[name]
            stage_options = inc.stage_options(name, options, facts)  # the plan is made by the first GPU check
            with warm_lock:
                if spec.resource == GPU_SHARED:  # the GPU checks started: the exclusive stage after them prepares
                    for later in (s.name for s in specs if s.warm_start and s.needs_gpu):
                        if later in to_run and has_gpu and later not in warm:
                            warm[later] = WarmStage(later, tmp, repo, inc.stage_options(later, options, facts),
                                                    stages=stages, slots=pool.dir)
                mine = warm.get(name)
            run_stage(name, tmp, repo, stage_options, isolate=spec.needs_gpu, timeout_s=spec.timeout_s,
                      stages=stages, slots=pool.dir, warm=mine)

        def conclude(name: str):
            out = final_outcome(name, tmp, stages=stages)
            outcome_file(tmp / name, out)
            if name == DUMP_STAGE:  # the device keys are known: a plan made before the dump is checked now
                inc.sass_concluded()
            return out

        try:
            sched = run_schedule(
                specs, execute=execute, conclude=conclude, overlap=mode == "overlapped", cells=pool.progress,
                started=t_start, skip=lambda name, why: record_skip(tmp / name, name, why),
                hold=inc.hold, rerun=inc.settle,  # carried cells join the fresh ones before a stage is derived
                skip_reason=lambda name, done: _skip_reason(by_name[name], to_run, done, has_gpu, no_gpu_reason))
        except CarryError as exc:
            raise PackError(f"incremental: {exc}") from exc
        finally:
            for w in warm.values():
                w.cancel()
            forkserver.stop(servers)
            inc.close()
        durations = {n: sched.times[n].duration_s for n in RUN_ORDER}
        result = _assemble(tmp, packs_root, pack_id, git=git, created=created, warnings=warnings, options=options,
                           env=env, has_gpu=has_gpu, requirement=requirement, stages=stages, signer=signer,
                           run_facts=run_facts, durations=durations, total_s=round(time.monotonic() - t_all, 3),
                           timings={"mode": sched.mode,
                                    "stages": {n: sched.times[n].to_json() for n in RUN_ORDER}},
                           t_start=t_start, tools=tools, inc=inc)
    return result


def _assemble(tmp: Path, packs_root: Path, pack_id: str, *, git, created, warnings, options, env, has_gpu,
              requirement, stages, signer, run_facts, durations, total_s, timings, t_start, tools,
              inc: IncrementalRun) -> RunResult:
    """Gates, labels, pack.json, reports, index, provenance; the pack renamed into place."""
    requirement = requirement or ("complete" if has_gpu else "partial")
    log.info("deriving gates and labels from the pack's files")
    derived = derive_all(tmp, STAGE_ORDER, stages=stages)
    prev = previous_same_commit(packs_root, git.commit, exclude=pack_id)
    zero_delta = None
    if prev is not None:
        prev_digest = present(PackRecord.from_json(read_json(prev / "pack.json")).content_digest)
        zero_delta = {"previous_pack": prev.name, "previous_digest": prev_digest,
                      "same": prev_digest == derived.digest}
    record = pack_record(pack_id=pack_id, created=created.strftime("%Y-%m-%dT%H:%M:%SZ"), git=git,
                         toolchain=tools, warnings=warnings, options=options, derived=derived,
                         durations=durations, total_s=total_s, env=env,
                         zero_delta=zero_delta, requirement=requirement)
    wall_s = round(time.monotonic() - t_start, 3)
    record = dataclasses.replace(record, timings={**record.timings, **timings, "wall_s": wall_s},
                                 signing=signer.record() if signer else None, incremental=inc.record())
    pj = record.to_json()
    write_json(tmp / "pack.json", pj)
    log.info("rendering report.md, report.html and comment.md")
    _write_reports(tmp)
    write_index(tmp)
    attest_error = write_provenance(tmp, run_facts, signer)  # after index.json: it is the subject
    final = finalize(tmp, packs_root, pack_id)
    if isinstance(record.zero_delta, ZeroDelta) and record.zero_delta.same:
        log.info("zero-delta: content equals pack %s of the same commit (timestamps excluded)", prev.name)
    log.info("label: %s  (%s)%s", derived.label, ", ".join(derived.labels),
             f"; {carried_note(pj)}" if carried_note(pj) else "")
    log.info("incremental: %s", carried_note(pj) or pj["incremental"]["reason"])
    log.info("pack: %s", final)
    if attest_error:
        raise SigningFailed(f"{attest_error}; the pack is kept, unsigned: {final}", final)
    log.info("provenance: %s", f"signed with {signer.key_type} key {signer.fingerprint}" if signer
             else "unsigned (no --sign-key)")
    return RunResult(final, derived.label, tuple(derived.labels), has_gpu, wall_s)


def _write_reports(pack_dir: Path) -> None:
    from .reporting.write import write_reports  # the renderers load only when a report is written

    try:
        write_reports(pack_dir)
    except Exception as exc:  # a renderer bug must not lose the evidence: the pack says so
        raise PackError(f"report rendering failed: {type(exc).__name__}: {exc}") from exc
