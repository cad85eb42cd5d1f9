"""`evidence`: run the selected stages in order into a temporary pack, assemble it, rename it into place."""
from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from pathlib import Path

from .envlock import collect_env, python_pin_warning
from .gitinfo import git_info
from .pack import (
    INCOMPLETE_PREFIX,
    PackError,
    derive_all,
    ensure_writable,
    finalize,
    list_packs,
    new_pack_id,
    outcome_file,
    pack_json,
    previous_same_commit,
    write_index,
)
from .report import write_reports
from .runner import final_outcome, record_skip, run_stage
from .stages.base import PASS, read_json, write_json
from .stages.order import DEPENDS_ON, RUN_ORDER, STAGE_ORDER, stage_module, with_dependencies
from .toolchain import toolchain

log = logging.getLogger("evpack")


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


def run_evidence(repo: Path, *, selected: list[str] | None, packs_root: Path, options: dict,
                 progress=print) -> Path:
    ensure_writable(packs_root)
    to_run = with_dependencies(selected) if selected else list(STAGE_ORDER)
    if "bench" in to_run and not options.get("previous_pack"):
        prev_bench = previous_with_bench(packs_root)
        if prev_bench is not None:  # the report then shows the diff against it (and perf-regression)
            options = dict(options, previous_pack=str(prev_bench))
    git = git_info(repo)
    created = datetime.now(timezone.utc)
    pack_id = new_pack_id(git.commit, git.dirty, created)
    if (packs_root / pack_id).exists():
        raise PackError(f"pack {packs_root / pack_id} already exists; refusing to overwrite it")
    tmp = packs_root / f"{INCOMPLETE_PREFIX}{pack_id}"
    tmp.mkdir()
    warnings = []
    pin = python_pin_warning()
    if pin:
        warnings.append(pin)
        progress(f"WARNING: {pin}")
    progress(f"evidence pack {pack_id} (writing into {tmp})")
    env = collect_env(repo)
    write_json(tmp / "env.json", env)
    has_gpu, no_gpu_reason = gpu_available()
    progress(f"GPU: {'yes, ' + str(env.get('gpu_name')) if has_gpu else no_gpu_reason}")
    t_all = time.monotonic()
    durations: dict[str, float] = {}
    outcomes = {}
    for i, name in enumerate(RUN_ORDER, 1):
        mod = stage_module(name)
        stage_dir = tmp / name
        t0 = time.monotonic()
        blocked = [d for d in DEPENDS_ON[name] if d in outcomes and outcomes[d].status != PASS
                   and name != "canaries"]
        if name not in to_run:
            record_skip(stage_dir, name, "not selected for this run")
        elif blocked:
            record_skip(stage_dir, name, "needs " + ", ".join(f"{d} ({outcomes[d].status})" for d in blocked))
        elif mod.NEEDS_GPU and not has_gpu:
            record_skip(stage_dir, name, no_gpu_reason)
        else:
            progress(f"[{i}/{len(STAGE_ORDER)}] {name}: running"
                     + (f" (own process, timeout {mod.TIMEOUT_S} s)" if mod.NEEDS_GPU else ""))
            run_stage(name, tmp, repo, options, isolate=mod.NEEDS_GPU, timeout_s=mod.TIMEOUT_S)
        outcomes[name] = final_outcome(name, tmp)
        outcome_file(stage_dir, outcomes[name])
        durations[name] = round(time.monotonic() - t0, 3)
        progress(f"[{i}/{len(STAGE_ORDER)}] {name}: {outcomes[name].status} ({durations[name]:.1f} s) "
                 f"- {outcomes[name].reason}")
    derived = derive_all(tmp, STAGE_ORDER)
    prev = previous_same_commit(packs_root, git.commit, exclude=pack_id)
    zero_delta = None
    if prev is not None:
        prev_digest = read_json(prev / "pack.json").get("content_digest")
        zero_delta = {"previous_pack": prev.name, "previous_digest": prev_digest,
                      "same": prev_digest == derived.digest}
    pj = pack_json(pack_id=pack_id, created=created.strftime("%Y-%m-%dT%H:%M:%SZ"), git=git,
                   toolchain=toolchain(), warnings=warnings, options=options, derived=derived,
                   durations=durations, total_s=round(time.monotonic() - t_all, 3), env=env,
                   zero_delta=zero_delta)
    write_json(tmp / "pack.json", pj)
    write_reports(tmp)
    write_index(tmp)
    final = finalize(tmp, packs_root, pack_id)
    if zero_delta and zero_delta["same"]:
        progress(f"zero-delta: content equals pack {prev.name} of the same commit (timestamps excluded)")
    progress(f"label: {derived.label}  ({', '.join(derived.labels)})")
    progress(f"pack: {final}")
    return final
