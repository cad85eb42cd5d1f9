"""Stage `tensor_proof`: executed tensor-core work, counted by Nsight Compute on one canonical call
per kernel. Tensor kernels must cover >= 95% of the matrix FLOPs the call must do, and execute at most 1.10x
the tile-padded FLOPs of the shape and causality the call names; scalar kernels must execute no tensor math;
the decoy canary (HMMA in SASS, math on CUDA cores) must fail.

Since the foreign-work check, ncu profiles every kernel in the target's profiled range (no name
filter; a marker kernel before each call, ncu.split_at_markers): a kernel during our op that is not
this call's own `evpack::<variant>::fwd_kernel<cfg_<config>, T, D>` (a library or torch kernel, or the
kernel of another registered variant or config, which the reason names) fails the call, and only our
kernels' tensor FLOPs count. The foreign-work canary (cuBLAS does the matrix products) must fail that way.

One ncu process per GPU profiles all its cells (`ncu-batch<k>.log`, kept as .xz; its record in batches.json); each cell's
log is its share of that output, split at the markers (parsers/ncu.split_batch_log), and derive splits the
batch's output again and requires the same bytes, and batches.json's record of the batch as run and used for
exactly the cells its command names. Packs before the batch ran one ncu process per cell."""
from __future__ import annotations

import functools
import re
from pathlib import Path

from .. import registry
from ..markdown import text  # report_md: every pack value escaped
from ..packfs import plain_name, read_member, write_stored
from ..parsers.ncu import (
    COVERAGE_MIN,
    METRICS,
    PADDED_MAX,
    parse_ncu_csv,
    required_flops,
    split_at_markers,
    split_batch_log,
    tile_padded_flops,
)
from ..parsers.symbols import describe, parse_symbol
from ..records.canary import OBSERVED_FIRST, CanaryRecord
from ..records.procs import ProcRecord
from ..records.schema import SCHEMAS
from ..records.tensor_proof import CallRow, NcuCall, NcuManifest, TensorProofData, call_rows
from ..tools import find_tool
from .base import ERROR, FAIL, PASS, StageContext, StageOutcome, log, read_json, worst, write_json, write_text
from .canaries import pack_schema
from .order import declared
from .procs import PROCS_FILE, Job, last_line, oracle_cmd, proc_problem, record_binary, run_jobs, variants_to_run

NAME = "tensor_proof"
SPEC = declared(NAME)  # stages/order.py: the one declaration of this stage
NEEDS_GPU, TIMEOUT_S = SPEC.needs_gpu, SPEC.timeout_s
REQUIRED_FILES = SPEC.required_files  # raw files a stage that decided keeps (verify requires them)
BINARY_RECORD = SPEC.binary_record  # the record of the binary a passing stage loaded
CANARY = "canary_decoy_hmma"
# Decoys of other kernel languages (tensor instructions in the binary, the math on CUDA cores), judged like
# CANARY; a pack made before one existed has no run of it, and none is required of it.
LANGUAGE_DECOYS = ("canary_triton_decoy",)
FOREIGN_CANARY = "canary_foreign_work"
CANARIES = SPEC.canaries  # (CANARY, *LANGUAGE_DECOYS, FOREIGN_CANARY)


BATCH = "ncu-batch"  # <BATCH><k>: the k-th ncu process that profiled several cells (one per GPU)
BATCHES_FILE = "batches.json"  # every batch process's record, the cells it ran, and why it was not used
BATCH_SUFFIX = ".xz"  # a used batch's output is kept as <BATCH><k>.log.xz (packs of 2026-11-25 keep it plain)


def _ncu_cmd(ncu: str, repo: Path, *target_args: str) -> list[str]:
    # no kernel-name filter: every kernel launched during the calls is profiled
    return [ncu, "--profile-from-start", "off", "--clock-control", "none", "--metrics", ",".join(METRICS),
            "--csv", "--print-kernel-base", "mangled", *oracle_cmd(repo, "tensor_target.py", *target_args)]


def run(ctx: StageContext) -> None:
    """One ncu process per GPU profiles all its cells (ncu's and torch's start-up paid once); a batch that fails
    or whose output does not split at its markers is run again one cell per process, as packs before it ran."""
    ncu = find_tool("ncu")
    if ncu is None:
        write_json(ctx.dir / "missing_tool.json", {"tool": "ncu", "found": False})
        return
    names = [v.name for v in variants_to_run(ctx)] + list(CANARIES)
    gpus = ctx.options.get("gpus")
    n_batches = len(gpus) if gpus else 1
    chunks = [c for c in (names[k::n_batches] for k in range(n_batches)) if c]
    jobs = [Job(f"{BATCH}{k}", _ncu_cmd(ncu, ctx.repo, "--batch", ",".join(c), "--manifest-dir", str(ctx.dir)),
                60 + 30 * len(c)) for k, c in enumerate(chunks)]
    ran = run_jobs(jobs, ctx.dir, ctx.repo, gpus=gpus)
    table, singles, batches = {}, [], {}
    for job, chunk in zip(jobs, chunks, strict=True):
        problem = _split_batch(ctx.dir, job.name, ran[job.name], chunk)
        batches[job.name] = {**ran[job.name], "cells": chunk, "problem": problem}
        if problem:
            log.warning("tensor_proof: %s not used (%s); its %d cells run one per process", job.name, problem,
                        len(chunk))
            singles += chunk
        else:
            table.update((n, {**ran[job.name], "batch": job.name}) for n in chunk)
    if singles:
        table.update(run_jobs([Job(n, _ncu_cmd(ncu, ctx.repo, "--variant", n, "--manifest",
                                               str(ctx.dir / f"{n}.manifest.json")), 420) for n in singles],
                              ctx.dir, ctx.repo, gpus=gpus))
    write_json(ctx.dir / BATCHES_FILE, batches)
    write_json(ctx.dir / PROCS_FILE, {n: table[n] for n in names})
    record_binary(ctx.dir, [ctx.dir / f"{n}.manifest.json" for n in names if n not in CANARIES])


def _split_batch(stage_dir: Path, batch: str, rec: dict, names: list[str]) -> str | None:
    """Write each cell's share of the batch's ncu output as <cell>.log; None, or why the batch is not usable."""
    run = ProcRecord.from_json(rec)
    if run.timed_out or run.returncode != 0:
        return "timed out" if run.timed_out else f"exited {run.returncode}: {last_line(stage_dir / f'{batch}.log')}"
    try:
        text = (stage_dir / f"{batch}.log").read_text(encoding="utf-8", errors="replace")
        shares = split_batch_log(text, [(n, _call_count(stage_dir, n)) for n in names])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"its output does not split into its cells ({exc})"
    for n, share in shares.items():
        write_text(stage_dir / f"{n}.log", share)
    # the whole output stays beside its shares, inside xz (a full suite's is 0.4 MB of repeated CSV lines)
    plain = stage_dir / f"{batch}.log"
    write_stored(stage_dir / f"{batch}.log{BATCH_SUFFIX}", plain.read_bytes())
    plain.unlink()
    return None


def _call_count(stage_dir: Path, name: str) -> int:
    calls = NcuManifest.from_json(read_json(stage_dir / f"{name}.manifest.json")).calls
    if not isinstance(calls, list):
        raise ValueError(f"{name}.manifest.json holds no list of calls")
    return len(calls)


def _batch_names(cmd) -> list[str] | None:
    """The cells a batch command profiled, in order (its --batch argument); None when it names none."""
    if not isinstance(cmd, list) or "--batch" not in cmd[:-1]:
        return None
    arg = cmd[cmd.index("--batch") + 1]
    return arg.split(",") if isinstance(arg, str) else None


def _share_problem(stage_dir: Path, name: str) -> str | None:
    """For a cell a batch ran (its procs.json entry names the batch; not a carried cell, whose source pack's
    verify checked it): its log must be its share of the batch's output, split again here. None when it is."""
    rec = ProcRecord.from_json(read_json(stage_dir / PROCS_FILE).get(name))
    if rec.batch is None or rec.carried_from is not None:
        return None
    names = _batch_names(rec.cmd)
    if not isinstance(rec.batch, str) or not plain_name(f"{rec.batch}.log") or not names or name not in names:
        return f"{name}: procs.json says batch {rec.batch!r} ran it, and that batch's command does not name it"
    recorded = _batch_record(stage_dir, rec.batch)
    if recorded is None or recorded.get("cells") != names or recorded.get("problem") is not None:
        return (f"{name}: {BATCHES_FILE} does not record batch {rec.batch} as run and used for the cells its "
                "command names")
    try:
        shares = _shares(stage_dir / f"{rec.batch}.log", tuple((n, _call_count(stage_dir, n)) for n in names))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{name}: the output of its batch {rec.batch} does not split into the batch's cells ({exc})"
    mine = (stage_dir / f"{name}.log").read_text(encoding="utf-8", errors="replace") \
        if (stage_dir / f"{name}.log").is_file() else None
    if mine != shares[name]:
        return f"{name}: {name}.log is not its share of {rec.batch}.log (split at the markers again)"
    return None


def _batch_record(stage_dir: Path, batch: str) -> dict | None:
    """batches.json's entry of one batch (None: the file, or the entry, is missing or not an object)."""
    try:
        entry = read_json(stage_dir / BATCHES_FILE).get(batch)
    except (OSError, ValueError, AttributeError):
        return None
    return entry if isinstance(entry, dict) else None


def _shares(path: Path, shares: tuple) -> dict[str, str]:
    """The batch output's shares, read now: a cell's log is checked against the bytes on disk at this moment (the
    output plain, as packs before BATCH_SUFFIX keep it, or inside xz: packfs.read_member, capped)."""
    text = read_member(path.parent, path.name).decode("utf-8", errors="replace")
    return _split_text(text, shares)


@functools.lru_cache(maxsize=4)
def _split_text(text: str, shares: tuple) -> dict[str, str]:
    """split_batch_log, once per output text: every cell of a batch asks for the same split (keyed on the
    content itself, so a file that changed is never answered from an older read)."""
    return split_batch_log(text, list(shares))


_CONFIG_NAME = re.compile(r"m(\d+)n(\d+)w\d+s\d+t?")  # registry._cfg: "t", a tail_split config
_CALL_FIELDS = ("variant", "kind", "config", "dtype", "B", "H", "S", "D", "causal", "required_flops",
                "tile_padded_flops")
# the fields of a call's row the outcome's data keeps (data -> calls), in order
TABLE_FIELDS = ("variant", "kind", "config", "dtype", "D", "causal", "required_flops", "executed_tensor_flops",
                "coverage", "padding_overhead", "tensor_math_inst", "passed")


def _call_problem(name: str, call: dict, shape: tuple[int, int, int]) -> str | None:
    """What is wrong with a manifest call's claims: its kind is the registry's (the variant's, or the canary's),
    its shape the schema's canonical one, its required and tile-padded FLOPs those its shape and config give
    (parsers/ncu.py, as oracles/tensor_target.py computes them). None when it holds."""
    variant, kind, config, dtype, b, h, s, d, causal, required, padded = map(call.get, _CALL_FIELDS)
    where = f"{name}: call {variant}/{config} {dtype} D={d} causal={causal}"
    if variant != name:
        return f"{where}: the manifest of {name} holds a call of another variant"
    try:
        var = registry.get(name, include_canaries=True)
    except ValueError:
        return f"{where}: {name} is not a registered variant or canary"
    if kind != var.kind:
        return f"{where}: the manifest says kind {kind!r}, the registry {var.kind!r}"
    cfg = _CONFIG_NAME.fullmatch(str(config))
    if cfg is None or not all(type(x) is int for x in (b, h, s, d)) or type(causal) is not bool:
        return f"{where}: the manifest does not give the call's config, shape and causality"
    if (b, h, s) != shape:
        return f"{where}: the manifest says B={b} H={h} S={s}, tensor_proof profiles B={shape[0]} H={shape[1]} " \
               f"S={shape[2]}"
    want = (("required_flops", required, required_flops(b, h, s, d, causal)),
            ("tile_padded_flops", padded, tile_padded_flops(b, h, s, d, causal, int(cfg[1]), int(cfg[2]))))
    wrong = [f"{k} {got!r}, its shape gives {v}" for k, got, v in want if got != v]
    return f"{where}: the manifest says {'; '.join(wrong)}" if wrong else None


def _rows(stage_dir: Path, name: str) -> tuple[str | None, list[dict]]:
    """(what is wrong with the target's run, None when nothing; the row of every call: CallRow's objects)."""
    problem = proc_problem(stage_dir, name) or _share_problem(stage_dir, name)
    if problem:
        return problem, []
    try:
        manifest = NcuManifest.from_json(read_json(stage_dir / f"{name}.manifest.json"))
        if "calls" not in manifest.raw:
            raise KeyError("calls")
        calls = manifest.calls
        shape = SCHEMAS[pack_schema(stage_dir.parent)].tensor_proof_shape
        wrong = [p for p in (_call_problem(name, c, shape) if isinstance(c, dict) else f"{name}: a call that is not "
                             f"an object" for c in calls) if p]
        if wrong:
            return "; ".join(wrong[:3]) + (f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else ""), []
        kernels = parse_ncu_csv((stage_dir / f"{name}.log").read_text(encoding="utf-8", errors="replace"))
        if manifest.marker:
            return _rows_by_marker(name, calls, split_at_markers(kernels, manifest.marker))
    except (FileNotFoundError, ValueError, KeyError, TypeError) as exc:
        return f"{name}: unreadable ncu output or manifest ({exc})", []
    if len(kernels) != len(calls):
        return f"{name}: ncu profiled {len(kernels)} launches but the target made {len(calls)} calls", []
    rows = []
    for call, km in zip(calls, kernels, strict=True):
        c = NcuCall.from_json(call)
        if f"cfg_{c.config}" not in km.kernel or c.variant not in km.kernel:
            return f"{name}: launch {km.launch_id} is {km.kernel[:80]}, expected {c.variant}/{c.config}", []
        rows.append(_row(call, [km], []))
    return None, rows


def _row(call: dict, ours: list, foreign: list) -> dict:
    """One call's row from its own kernels (and the foreign ones, which fail it and count for nothing)."""
    c = NcuCall.from_json(call)
    flops = sum(km.tensor_flops for km in ours)
    math_inst = sum(km.tensor_math_inst for km in ours)
    coverage = flops / c.required_flops
    row = {**call, "kernel": ours[0].kernel if ours else None, "executed_tensor_flops": flops,
           "coverage": coverage, "padding_overhead": c.tile_padded_flops / c.required_flops - 1.0,
           "tensor_math_inst": math_inst, "metrics": ours[0].values if len(ours) == 1 else [k.values for k in ours]}
    if foreign:
        row.update(foreign_kernels=[km.kernel[:160] for km in foreign],
                   foreign_tensor_flops=sum(km.tensor_flops for km in foreign))
    passed = (COVERAGE_MIN <= coverage and not _over_padded(flops, c.tile_padded_flops) if c.kind == "tensor"
              else flops == 0 and math_inst == 0)
    row.update(passed=passed and bool(ours) and not foreign)
    return row


def _is_own(kernel: str, call: NcuCall) -> bool:
    """Whether a profiled kernel is this call's own kernel (registry symbol scheme, exact config/dtype/D)."""
    p = parse_symbol(kernel)
    return p is not None and (p.variant, p.config, p.dtype, p.head_dim) == (call.variant, call.config, call.dtype,
                                                                             call.D)


def _rows_by_marker(name: str, calls: list[dict], groups: list[list]) -> tuple[str | None, list[dict]]:
    if len(groups) != len(calls):
        return f"{name}: the profiled range holds {len(groups)} markers but the target made {len(calls)} calls", []
    rows = []
    for call, group in zip(calls, groups, strict=True):
        c = NcuCall.from_json(call)
        ours = [km for km in group if _is_own(km.kernel, c)]
        rows.append(_row(call, ours, [km for km in group if not _is_own(km.kernel, c)]))
    return None, rows


def derive(stage_dir: Path, pack_dir: Path) -> StageOutcome:
    if (stage_dir / "missing_tool.json").exists():
        return StageOutcome(ERROR, "ncu (Nsight Compute) not found on PATH or in CUDA_HOME")
    procs = read_json(stage_dir / "procs.json")
    statuses, reasons, table = [], [], []
    for name in procs:
        if name in CANARIES:
            continue
        problem, rows = _rows(stage_dir, name)
        if problem:
            statuses.append(ERROR)
            reasons.append(problem)
            continue
        bad = [r for r in call_rows(rows) if not r.passed]
        statuses.append(FAIL if bad else PASS)
        if bad:
            r = bad[0]
            reasons.append(f"{name}/{r.config} {r.dtype} D={r.D} causal={r.causal}: tensor FLOPs cover "
                           f"{r.coverage:.1%} of {r.required_flops:.3g}" + _over_note(r) + _foreign_note(r))
        table += [{k: r[k] for k in TABLE_FIELDS} for r in rows]
    canaries = [_decoy_canary(stage_dir, CANARY)]
    canaries += [_decoy_canary(stage_dir, name) for name in LANGUAGE_DECOYS if name in procs]
    if FOREIGN_CANARY in procs:
        canaries.append(_foreign_canary(stage_dir))
    status = worst(statuses)
    tensor = [r for r in call_rows(table) if r.kind == "tensor"]
    reason = "; ".join(reasons) or (
        f"{len(tensor)} tensor-kernel calls cover >= {min(r.coverage for r in tensor):.1%} of their matrix FLOPs; "
        f"{len(table) - len(tensor)} scalar calls execute 0 tensor FLOPs" if tensor else "no tensor kernel profiled")
    if not tensor and status == PASS:
        status = ERROR
    return StageOutcome(status, reason, {"calls": table, "canaries": canaries})


def _decoy_canary(stage_dir: Path, name: str) -> dict:
    """A decoy (HMMA/HGMMA in its SASS, the math on CUDA cores) is caught when every call covers < COVERAGE_MIN."""
    problem, rows = _rows(stage_dir, name)
    crows = call_rows(rows)
    worst_cov = max((r.coverage for r in crows), default=None)
    why = "decoy HMMA executed but did not do the work" if name == CANARY else \
        "decoy tensor instructions executed but did not do the work"
    return CanaryRecord(name, problem is None and bool(crows) and all(r.coverage < COVERAGE_MIN for r in crows),
                        problem or f"max coverage {worst_cov:.2%}", expected=f"coverage < {COVERAGE_MIN:.0%}",
                        reason=problem or why, layout=OBSERVED_FIRST).to_json()


def _foreign_note(row: CallRow) -> str:
    """Which kernels other than the call's own ran: another registered variant's (or config's) kernel is named
    by its variant; a library or torch kernel is 'not from the extension'."""
    foreign = row.foreign_kernels
    if not foreign:
        return ""
    owners = [describe(k) for k in foreign]
    ours = sorted({o for o in owners if o != "not from the extension"})
    others = [k for k, o in zip(foreign, owners, strict=True) if o == "not from the extension"]
    notes = []
    if ours:
        notes.append(f"kernels of {', '.join(ours)} ran during the call of {row.variant}/{row.config}, "
                     f"not its own")
    if others:
        notes.append(f"{len(others)} kernels not from the extension ran during the call (first {others[0][:80]})")
    return "".join(f"; {n}" for n in notes)


def _over_padded(flops: float, tile_padded_flops: float) -> bool:
    """A tensor call executed more than PADDED_MAX times the tile-padded FLOPs of the shape and causality it names."""
    return flops > PADDED_MAX * tile_padded_flops


def _over_note(r) -> str:
    """Why a covered tensor call fails: it executed more than its claimed shape's tile-padded FLOPs allow."""
    if r.kind != "tensor" or not _over_padded(r.executed_tensor_flops, r.tile_padded_flops):
        return ""
    return (f"; executed {r.executed_tensor_flops / r.tile_padded_flops:.2f}x the tile-padded FLOPs of the shape "
            f"and causality the call names (at most {PADDED_MAX:.2f}x): the launch did other work than the call "
            f"says")


def _foreign_canary(stage_dir: Path) -> dict:
    problem, stored = _rows(stage_dir, FOREIGN_CANARY)
    rows = call_rows(stored)
    caught = problem is None and bool(rows) and all(r.foreign_kernels and not r.passed for r in rows)
    n = sum(len(r.foreign_kernels or []) for r in rows)
    cov = sum(r.foreign_tensor_flops or 0.0 for r in rows) / max(1.0, sum(r.required_flops for r in rows))
    observed = problem or (f"{n} foreign kernels in {len(rows)} calls (their tensor FLOPs {cov:.0%} of the "
                           f"required, not counted)")
    return CanaryRecord(FOREIGN_CANARY, caught, observed, expected="kernels outside the extension fail the call",
                        reason=problem or "work done by kernels the build did not ship", layout=OBSERVED_FIRST).to_json()


def report_md(stage_dir: Path, outcome: StageOutcome) -> str:
    calls = call_rows(TensorProofData.from_json(outcome.data).calls)
    if not calls:
        return ""
    lines = [f"Nsight Compute (`--clock-control none`), canonical call B=2 H=8 S=512 per kernel. Tensor FLOPs = "
             f"sum of `sm__ops_path_tensor_op_*` counters (HFMA2.MMA moves excluded). Gate: coverage >= "
             f"{COVERAGE_MIN:.0%} for tensor kernels, at most {PADDED_MAX:.2f}x their tile-padded FLOPs; 0 for "
             f"scalar.", "",
             "| variant | config | dtype | D | causal | required FLOPs | executed tensor FLOPs | coverage | "
             "tile padding | pass |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in calls:
        lines.append(f"| {text(r.variant)} | {text(r.config)} | {text(r.dtype)} | {text(r.D)} | "
                     f"{text(r.causal)} | "
                     f"{r.required_flops:.4g} | {r.executed_tensor_flops:.4g} | {r.coverage:.1%} | "
                     f"{r.padding_overhead:+.1%} | {'yes' if r.passed else 'NO'} |")
    return "\n".join(lines)


__all__ = ["registry"]
