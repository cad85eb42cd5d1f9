"""`evidence`: run the selected stages in order into a temporary pack, assemble it, rename it into place."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .derivation import derivation_session, derive_all, final_outcome
from .envlock import collect_env, python_pin_warning
from .gitinfo import git_info
from .jsonio import read_json, write_json
from .model import PASS
from .pack import (
    PackError,
    ensure_writable,
    finalize,
    list_packs,
    new_pack_id,
    outcome_file,
    pack_json,
    previous_same_commit,
    reserve_pack_folder,
    write_index,
)
from .provenance.attest import SigningFailed, collect_run_facts, write_provenance
from .provenance.signing import load_signing_key
from .reporting import missing_renderer
from .runner import record_skip, run_stage
from .stages.order import DEPENDS_ON, RUN_ORDER, STAGE_ORDER, stage_module, with_dependencies
from .toolchain import toolchain

log = logging.getLogger("evpack")


@dataclass(frozen=True)
class RunResult:
    pack: Path
    label: str
    labels: tuple[str, ...]
    has_gpu: bool


def previous_with_bench(packs_root: Path) -> Path | None:
    """The newest finished pack whose benchmark produced a summary (compare's baseline)."""
    for pack in reversed(list_packs(packs_root)):
        if (pack / "bench" / "summary.json").exists():
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


def _skip_reason(name: str, mod, to_run: list[str], outcomes: dict, has_gpu: bool, no_gpu_reason: str) -> str | None:
    if name not in to_run:
        return "not selected for this run"
    blocked = [d for d in DEPENDS_ON[name] if d in outcomes and outcomes[d].status != PASS and name != "canaries"]
    if blocked:
        return "needs " + ", ".join(f"{d} ({outcomes[d].status})" for d in blocked)
    if mod.NEEDS_GPU and not has_gpu:
        return no_gpu_reason
    return None


def run_evidence(repo: Path, *, selected: list[str] | None, packs_root: Path, options: dict,
                 requirement: str | None = None, stages: str | None = None,
                 gpu: tuple[bool, str] | None = None, sign_key: Path | None = None) -> RunResult:
    """Run the stages, write the pack atomically, return where it is and what it decided.

    `stages` names a stand-in stage package (tests); `gpu` overrides the CUDA probe (tests);
    `sign_key` signs provenance.json (checked before any stage runs). A signing failure at the end
    keeps the pack, unsigned, and raises SigningFailed.
    """
    ensure_writable(packs_root)
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
    t_all = time.monotonic()
    durations: dict[str, float] = {}
    outcomes = {}
    n = len(STAGE_ORDER)
    for i, name in enumerate(RUN_ORDER, 1):  # canaries last: they read every stage's catch
        mod = stage_module(name, stages)
        stage_dir = tmp / name
        t0 = time.monotonic()
        why_skip = _skip_reason(name, mod, to_run, outcomes, has_gpu, no_gpu_reason)
        if why_skip:
            record_skip(stage_dir, name, why_skip)
        else:
            log.info("[%d/%d] %s: running%s (%.0f s since start)", i, n, name,
                     f" (own process, timeout {mod.TIMEOUT_S} s)" if mod.NEEDS_GPU else "",
                     time.monotonic() - t_all)
            run_stage(name, tmp, repo, options, isolate=mod.NEEDS_GPU, timeout_s=mod.TIMEOUT_S, stages=stages)
        with derivation_session():
            outcomes[name] = final_outcome(name, tmp, stages=stages)
        outcome_file(stage_dir, outcomes[name])
        durations[name] = round(time.monotonic() - t0, 3)
        log.info("[%d/%d] %s: %s (%.1f s) - %s", i, n, name, outcomes[name].status, durations[name],
                 outcomes[name].reason)
    requirement = requirement or ("complete" if has_gpu else "partial")
    log.info("deriving gates and labels from the pack's files")
    derived = derive_all(tmp, STAGE_ORDER, stages=stages)
    prev = previous_same_commit(packs_root, git.commit, exclude=pack_id)
    zero_delta = None
    if prev is not None:
        prev_digest = read_json(prev / "pack.json").get("content_digest")
        zero_delta = {"previous_pack": prev.name, "previous_digest": prev_digest,
                      "same": prev_digest == derived.digest}
    pj = pack_json(pack_id=pack_id, created=created.strftime("%Y-%m-%dT%H:%M:%SZ"), git=git,
                   toolchain=toolchain(), warnings=warnings, options=options, derived=derived,
                   durations=durations, total_s=round(time.monotonic() - t_all, 3), env=env,
                   zero_delta=zero_delta, requirement=requirement)
    pj["signing"] = signer.record() if signer else None
    write_json(tmp / "pack.json", pj)
    log.info("rendering report.md, report.html and comment.md")
    _write_reports(tmp)
    write_index(tmp)
    attest_error = write_provenance(tmp, run_facts, signer)  # after index.json: it is the subject
    final = finalize(tmp, packs_root, pack_id)
    if zero_delta and zero_delta["same"]:
        log.info("zero-delta: content equals pack %s of the same commit (timestamps excluded)", prev.name)
    log.info("label: %s  (%s)", derived.label, ", ".join(derived.labels))
    log.info("pack: %s", final)
    if attest_error:
        raise SigningFailed(f"{attest_error}; the pack is kept, unsigned: {final}", final)
    log.info("provenance: %s", f"signed with {signer.key_type} key {signer.fingerprint}" if signer
             else "unsigned (no --sign-key)")
    return RunResult(final, derived.label, tuple(derived.labels), has_gpu)


def _write_reports(pack_dir: Path) -> None:
    from .reporting.write import write_reports  # the renderers load only when a report is written

    try:
        write_reports(pack_dir)
    except Exception as exc:  # a renderer bug must not lose the evidence: the pack says so
        raise PackError(f"report rendering failed: {type(exc).__name__}: {exc}") from exc
