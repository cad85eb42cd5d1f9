"""PTXAS stage: resources of every kernel x arch from the build's own `-Xptxas -v` logs.

Reads build/ptxas/<object>.log (verbatim nvcc stderr of the real build, first line
`# nvcc <args>`) and build/kernels.json (threads and dynamic shared memory per kernel);
compiles nothing. Gates per kernel x arch:
  - 0 spill bytes (stores + loads) and 0 stack frame, unless the registry Variant.budget allows more;
  - static + dynamic shared memory within the arch's per-block opt-in limit;
  - an occupancy estimate of at least one block per SM (recorded and shown for every kernel);
  - the symbol names a registry kernel (else: unknown kernel, fail);
  - no ptxas advisory that voids the design (wgmma serialised, `setmaxnreg` ignored) for the kernel
    on that arch, the line quoted in the reason (ptxas.advisories_for: by name, or the whole arch
    block of the object when ptxas names no entry; one printed after the log's last entry by the
    entry it names, on every arch); one that concerns no kernel of its log is an error;
  - every built kernel has a row for every arch its extension was compiled for (else: error).
Rows of a variant on an arch outside its registry `archs` (a stub compiled only because the extension
targets that arch) decide nothing: they go under the data's `off_target`.
Canary kernels are in the table, but their results go under the data's `canaries`, not the status.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from .. import registry
from ..markdown import code, text  # report_md: every pack value escaped
from ..parsers import occupancy, ptxas, symbols
from ..records.build import BuiltKernel
from ..records.canary import canary_records
from ..records.ptxas import PtxasData, PtxasRow, rows_of
from .base import ERROR, FAIL, PASS, SKIPPED, StageContext, StageOutcome, worst, write_json
from .kernel_rows import (
    load_built_kernels,
    registry_variant,
    required_archs,
    split_canaries,
    split_off_target,
    summary_counts,
    unknown_built,
    write_csv,
)
from .order import declared

NAME = "ptxas"
SPEC = declared(NAME)  # stages/order.py: the one declaration of this stage
NEEDS_GPU, TIMEOUT_S = SPEC.needs_gpu, SPEC.timeout_s
REQUIRED_FILES = SPEC.required_files  # raw files a stage that decided keeps (verify requires them)
SCHEMA_VERSION = 1

# Column order of table.csv / table.json rows.
ROW_KEYS = (
    "object", "arch", "symbol", "variant", "config", "dtype", "head_dim", "kind", "canary",
    "registers", "max_registers", "static_smem_bytes", "dynamic_smem_bytes", "total_smem_bytes",
    "smem_limit_bytes", "stack_bytes", "cumulative_stack_bytes", "spill_store_bytes", "spill_load_bytes",
    "budget_spill_bytes", "budget_stack_bytes", "barriers", "gmem_bytes", "cmem_bytes", "cmem_banks",
    "report_format", "threads", "occ_blocks_per_sm", "occ_warps_per_sm", "occupancy", "occ_limiter",
    "occ_limit_warps", "occ_limit_registers", "occ_limit_smem", "occ_limit_blocks", "occ_limit_barriers",
    "occ_smem_per_block_bytes", "status", "reason",
)


# ---- evaluation ------------------------------------------------------------------------

def _advisory_reason(a: ptxas.PtxasAdvisory, symbol: str) -> str:
    what = {ptxas.WGMMA_SERIALIZED: "wgmma serialised", ptxas.SETMAXNREG_IGNORED: "setmaxnreg ignored"}[a.kind]
    whose = (" (printed after the log's last entry: every arch of this kernel)" if a.arch is None else
             "" if a.function == symbol else " (ptxas names no function: every kernel of this object on "
             f"{a.arch})" if a.function is None else f" (in {a.function}, called from a kernel of this object)")
    return f"ptxas {a.code} {what}{whose}: `{a.line}`"


def _row(obj: str, k: ptxas.KernelResources, built: dict | None,
         advisories: list[ptxas.PtxasAdvisory] = ()) -> dict:
    row = {key: None for key in ROW_KEYS}
    row.update(k.to_row(), object=obj, canary=False)
    reasons: list[str] = []
    status = PASS
    kid = symbols.identify(k.symbol)
    if kid is None:
        return _finish(row, FAIL, [f"unknown kernel: {symbols.explain(k.symbol)}"])
    budget = registry.get(kid.variant, include_canaries=True).budget
    row.update(variant=kid.variant, config=kid.config, dtype=kid.dtype, head_dim=kid.head_dim,
               kind=kid.kind, canary=kid.canary, budget_spill_bytes=budget.spill_bytes,
               budget_stack_bytes=budget.stack_bytes)
    if k.spill_bytes > budget.spill_bytes:
        status = FAIL
        reasons.append(f"spills {k.spill_bytes} B (stores {k.spill_store_bytes} + loads {k.spill_load_bytes})"
                       f" > budget {budget.spill_bytes} B")
    if k.stack_bytes > budget.stack_bytes:
        status = FAIL
        reasons.append(f"stack frame {k.stack_bytes} B > budget {budget.stack_bytes} B")
    if advisories:
        status = FAIL
        reasons += [_advisory_reason(a, k.symbol) for a in advisories]
    entry = (built or {}).get(kid.key)  # a kernels.json row (BuiltKernel's object)
    lim = occupancy.limits_for(k.arch)
    if entry is None:
        return _finish(row, worst([status, ERROR]),
                       reasons + [f"{kid.label} is not in build/kernels.json (threads, dynamic smem unknown)"])
    if lim is None:
        return _finish(row, worst([status, ERROR]),
                       reasons + [f"no shared-memory/occupancy limits for {k.arch} in occupancy.ARCH_LIMITS"])
    e = BuiltKernel.from_json(entry)
    dyn, threads = int(e.dynamic_smem_bytes or 0), int(e.threads)
    total = k.static_smem_bytes + dyn
    row.update(dynamic_smem_bytes=dyn, threads=threads, total_smem_bytes=total,
               smem_limit_bytes=lim.smem_per_block_optin)
    if total > lim.smem_per_block_optin:
        status = FAIL
        reasons.append(f"shared memory {total} B (static {k.static_smem_bytes} + dynamic {dyn})"
                       f" > {k.arch} per-block limit {lim.smem_per_block_optin} B")
    occ = occupancy.estimate(k.arch, registers=k.registers, threads=threads, static_smem=k.static_smem_bytes,
                             dynamic_smem=dyn, barriers=k.barriers)
    row.update(occ_blocks_per_sm=occ.blocks_per_sm, occ_warps_per_sm=occ.warps_per_sm, occupancy=occ.occupancy,
               occ_limiter=occ.limiter, occ_smem_per_block_bytes=occ.smem_per_block_bytes,
               **{f"occ_limit_{n}": occ.limits.get(n) for n in ("warps", "registers", "smem", "blocks", "barriers")})
    if occ.blocks_per_sm == 0:
        status = FAIL
        reasons.append(f"cannot launch on {k.arch}: 0 blocks per SM (limited by {occ.limiter})")
    return _finish(row, status, reasons)


def _finish(row: dict, status: str, reasons: list[str]) -> dict:
    """The row in ROW_KEYS order, with its status and the reasons for it."""
    row.update(status=status, reason="; ".join(reasons))
    return {key: row[key] for key in ROW_KEYS}


def evaluate(pack_dir: Path) -> tuple[StageOutcome, list[dict]]:
    """(outcome, every table row incl. canaries). Pure: reads only the pack."""
    build = pack_dir / "build"
    log_dir = build / "ptxas"
    if not build.is_dir():
        return StageOutcome(SKIPPED, "no build in this pack (build/ missing)", {"schema_version": SCHEMA_VERSION}), []
    logs = sorted(log_dir.glob("*.log")) if log_dir.is_dir() else []
    built, built_problem = load_built_kernels(pack_dir)
    problems: list[str] = []
    if built_problem:
        problems.append(built_problem)
    if not logs:
        problems.append("build/ptxas holds no logs: the build recorded no `-Xptxas -v` output")
    rows: list[dict] = []
    log_info = []
    archs: list[str] = []
    module_archs: dict[str, list[str]] = {}  # "evpack._C" -> archs its objects were compiled for
    for path in logs:
        info = {"object": path.stem, "path": str(path.relative_to(pack_dir)), "command": None,
                "built_archs": [], "kernels": 0, "error": None, "diagnostics": []}
        try:
            log = ptxas.parse_ptxas_log(path.read_text(encoding="utf-8", errors="replace"))
        except ptxas.PtxasParseError as e:
            info.update(error=str(e))
            problems.append(f"{path.name}: {e}")
            log_info.append(info)
            continue
        info.update(command=log.command, built_archs=list(log.built_archs), kernels=len(log.kernels),
                    diagnostics=list(log.diagnostics[:20]))
        if log.command is None:
            problems.append(f"{path.name}: no '# nvcc ...' command line (cannot tell which archs were built)")
        if log.advisories:
            info.update(advisories=[dataclasses.asdict(a) | {"voids_design": a.voids_design} for a in log.advisories])
        problems += [f"{path.name}: ptxas advisory printed after the last entry concerns no kernel of the log: "
                     f"`{a.line}`" for a in ptxas.unattributed_advisories(log)]
        mod = module_archs.setdefault(f"evpack.{log.extension}" if log.extension else "", [])
        for a in list(log.built_archs) + [k.arch for k in log.kernels]:
            if a not in archs:
                archs.append(a)
            if a not in mod:
                mod.append(a)
        rows += [_row(path.stem, k, built, ptxas.advisories_for(log, k.symbol, k.arch)) for k in log.kernels]
        log_info.append(info)
    rows, off_target = split_off_target(rows)
    # every built registry kernel has a row on every built arch
    failures: list[str] = []
    if built is not None:
        failures += [f"build/kernels.json names a kernel outside the registry: {u}" for u in unknown_built(built)]
        have = {(r.kernel, r.arch) for r in rows_of(rows) if r.variant}
        for key, k in built.items():
            var = registry_variant(key[0])
            # the archs of its extension's logs (logs that name no extension: the archs of those)
            expected = module_archs.get(BuiltKernel.from_json(k).module) or module_archs.get("") or archs
            for a in required_archs(key[0], expected):
                if (key, a) not in have:
                    problems.append(f"no ptxas report for {key[0]}/{key[1]}/{key[2]}/d{key[3]} on {a}")
            if var is not None and var.archs and expected and not required_archs(key[0], expected):
                problems.append(f"{key[0]}/{key[1]}/{key[2]}/d{key[3]} targets {', '.join(var.archs)} but its "
                                f"extension was compiled only for {', '.join(expected)}")
    main, canaries = split_canaries(rows, NAME)
    if not main and not problems:
        problems.append("the ptxas logs report no (non-canary) kernels")
    status = worst([r.status for r in rows_of(main)] + [ERROR] * len(problems) + [FAIL] * len(failures) or [PASS])
    data = {"schema_version": SCHEMA_VERSION, "logs": log_info, "archs": archs, "summary": summary_counts(main),
            "problems": problems + failures, "kernels": main, "canaries": canaries}
    if off_target:
        data.update(off_target=off_target)
    return StageOutcome(status, outcome_reason(status, main, problems + failures, archs), data), rows + off_target


def outcome_reason(status: str, main: list[dict], problems: list[str], archs: list[str]) -> str:
    if status == PASS:
        return f"{len(main)} kernel x arch rows on {', '.join(archs)}: every gate passed"
    bad = [f"{r.short}: {r.reason}" for r in rows_of(main) if r.status in (FAIL, ERROR)]
    items = problems + bad if status == ERROR else bad + problems
    return f"{len(items)} problem(s); first: {items[0]}" if items else status


# ---- stage entry points ------------------------------------------------------------------

def run(ctx: StageContext) -> None:
    import pandas as pd

    outcome, rows = evaluate(ctx.pack_dir)
    write_json(ctx.dir / "table.json", {"schema_version": SCHEMA_VERSION, "columns": list(ROW_KEYS), "rows": rows})
    write_csv(ctx.dir / "table.csv", pd.DataFrame(rows, columns=list(ROW_KEYS)))


def derive(stage_dir: Path, pack_dir: Path) -> StageOutcome:
    return evaluate(pack_dir)[0]


def _kernel_label(r: PtxasRow) -> str:
    if not r.variant:
        return f"{code(r.symbol, in_table=True)} (unknown)"
    return text(f"{r.variant} {r.config} {r.dtype} d{r.head_dim}")


def _table(stored: list) -> list[str]:
    out = ["| arch | kernel | regs | smem static+dyn / limit (B) | stack (B) | spill st/ld (B) | budget spill/stack |"
           " blocks/SM (warps, limiter) | status |",
           "|---|---|---:|---|---:|---|---|---|---|"]
    for r in sorted(rows_of(stored), key=lambda r: (str(r.arch), _kernel_label(r))):
        smem = text(f"{r.static_smem_bytes}+{r.dynamic_smem_bytes} / {r.smem_limit_bytes}"
                    if r.smem_limit_bytes is not None else f"{r.static_smem_bytes}+? / ?")
        budget = (text(f"{r.budget_spill_bytes}/{r.budget_stack_bytes}") if r.budget_spill_bytes is not None
                  else "-")
        occ = (text(f"{r.occ_blocks_per_sm} ({r.occ_warps_per_sm} warps, {r.occ_limiter})")
               if r.occ_blocks_per_sm is not None else "-")
        spill = text(f"{r.spill_store_bytes}/{r.spill_load_bytes}")
        status = text(r.status if not r.reason else f"{r.status}: {r.reason}")
        out.append(f"| {text(r.arch)} | {_kernel_label(r)} | {text(r.registers)} | {smem} | "
                   f"{text(r.stack_bytes)} | {spill} | {budget} | {occ} | {status} |")
    return out


def report_md(stage_dir: Path, outcome: StageOutcome) -> str:
    d = PtxasData.from_json(outcome.data)
    lines = [f"### PTXAS resources — {text(outcome.status)}", "", text(outcome.reason), ""]
    if d.logs:
        lines.append(f"From the build's own `-Xptxas -v` output: {len(d.logs)} log(s) in `build/ptxas/`, "
                     f"archs {text(', '.join(map(str, d.archs or [])))}. Budgets are the registry's `Variant.budget` "
                     "(default 0 B spill, 0 B stack). Occupancy: blocks per SM from registers (256-register "
                     "warp allocation, 4 sub-partitions), shared memory (incl. 1 KB reserved per block, largest "
                     "carveout), threads and the per-SM block limit.")
        lines.append("")
    for p in (d.problems or [])[:20]:
        lines.append(f"- **problem:** {text(p)}")
    if d.problems:
        lines.append("")
    if d.kernels:
        lines += _table(d.kernels) + [""]
    advisories = [(log.object, a) for log in d.logs for a in log.advisories]
    if advisories:
        lines += ["ptxas performance advisories (those that void the design fail the kernels they concern):", ""]
        lines += [f"- {code(obj)} {text(a.arch)}: {'**voids the design**' if a.voids_design else 'note'}: "
                  f"{code(a.line)}"
                  for obj, a in advisories] + [""]
    off_target = rows_of(d.off_target)
    if off_target:
        lines += [f"{len(off_target)} row(s) of variants on archs outside their registry `archs` (stubs "
                  "compiled with the rest of the extension) decide nothing: "
                  + text(", ".join(sorted({r.short for r in off_target}))), ""]
    if d.canaries:
        lines.append("Canary kernels (their gates are read by the canary matrix, not this stage's status):")
        lines.append("")
        lines += _table([r for c in canary_records(outcome.data) for r in c.kernels or []]) + [""]
    return "\n".join(lines)
