"""Stage `stability`: 1000 back-to-back launches and 1000 graph replays per variant x config,
bitwise identical; the run repeated under CUDA_LAUNCH_BLOCKING=1 + TORCH_USE_CUDA_DSA=1 as a
diagnostic replay; and the second-launch canary, which this gate must catch.

Packs since the stale-result and stream checks also hold, per phase, in-place refills of the
inputs on a side stream behind a pending producer (oracles/stability.py), NaN-poisoned outputs
and an input comparison; their canaries (a pointer-keyed memo, a launch on the legacy stream)
must be caught here too.

Schema-3 packs also hold, per row, the nodes of the captured graph (kernel nodes by mangled name:
the graph must hold the call's own kernel and no other, graph_kernel_problems) and an aliasing
phase (outputs of earlier calls kept alive and rechecked, storage overlap with the inputs:
alias_problems); derive() decides both from those records, and requires them in schema-3 packs.
Their canaries: canary_capture_aware (another kernel under capture, same bits) and
canary_output_alias (call 2 overwrites call 1's output), each caught only when its own check fired."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..markdown import text  # report_md: every pack value escaped
from ..parsers.symbols import describe, parse_symbol
from ..records.canary import OBSERVED_FIRST, CanaryRecord
from ..records.required import as_view
from ..records.stability import AliasPhase, Cell, Phase, RunRecord, RunView, StabilityResult, StabilityRow
from .base import ERROR, FAIL, PASS, StageContext, StageOutcome, read_json, worst
from .canaries import pack_schema
from .order import declared
from .procs import Job, oracle_cmd, proc_problem, record_binary, run_jobs, stage_pool, variants_to_run

NAME = "stability"
SPEC = declared(NAME)  # stages/order.py: the one declaration of this stage
NEEDS_GPU, TIMEOUT_S = SPEC.needs_gpu, SPEC.timeout_s
REQUIRED_FILES = SPEC.required_files  # raw files a stage that decided keeps (verify requires them)
BINARY_RECORD = SPEC.binary_record  # the record of the binary a passing stage loaded
CANARY = "canary_second_launch"
CAPTURE_CANARY, ALIAS_CANARY = "canary_capture_aware", "canary_output_alias"
CANARIES = SPEC.canaries  # CANARY, ..., CAPTURE_CANARY, ALIAS_CANARY
# The check each of these canaries must be caught by (the others: any failure of this gate).
CANARY_CHECK = {CAPTURE_CANARY: "graph_kernel", ALIAS_CANARY: "alias"}
NEW_CHECKS_SCHEMA = 3  # packs of this schema on record the graph nodes and the aliasing phase
DIAG_ENV = {"CUDA_LAUNCH_BLOCKING": "1", "TORCH_USE_CUDA_DSA": "1"}
LAUNCHES = 1000
# Seconds a cell took on an H200 (artifacts/reference/evidence-quick-20261124T160555Z.log): only the order in
# which a pool starts cells (longest first) depends on them.
EST_VARIANT_S, EST_DIAGNOSTIC_S, EST_CANARY_S = 15.0, 12.0, 14.0


def run(ctx: StageContext) -> None:
    jobs = oracle_jobs(ctx.repo, ctx.dir, [v.name for v in variants_to_run(ctx)], CANARIES)
    pool = stage_pool(ctx)  # a scheduled run: the cells share the GPU's slots with the other checks
    run_jobs(jobs, ctx.dir, ctx.repo, gpus=ctx.options.get("gpus"), parallel=None if pool else 1, pool=pool)
    record_binary(ctx.dir, [ctx.dir / f"{j.name}.json" for j in jobs if j.name not in CANARIES])


def oracle_jobs(repo: Path, stage_dir: Path, variants: list[str], canaries, launches: int = LAUNCHES,
                diagnostic: bool = True) -> list[Job]:
    """One oracle process per variant (and its CUDA_LAUNCH_BLOCKING replay) and per canary."""
    jobs = []
    for v in variants:
        jobs.append(Job(v, oracle_cmd(repo, "stability.py", "--variant", v, "--launches", str(launches), "--out",
                                      str(stage_dir / f"{v}.json")), 300, est_s=EST_VARIANT_S,
                        forkable=True))
        if diagnostic:
            jobs.append(Job(f"{v}.diagnostic", oracle_cmd(repo, "stability.py", "--variant", v, "--launches", "100",
                                                          "--out", str(stage_dir / f"{v}.diagnostic.json")),
                            300, env=DIAG_ENV, est_s=EST_DIAGNOSTIC_S))
    for c in canaries:
        jobs.append(Job(c, oracle_cmd(repo, "stability.py", "--variant", c, "--launches", str(launches), "--out",
                                      str(stage_dir / f"{c}.json")), 300, est_s=EST_CANARY_S, forkable=True))
    return jobs


def graph_kernel_problems(graph_row: dict | Phase) -> list[str]:
    """Why a captured graph does not hold exactly the call's own kernel (empty when it does): the nodes were not
    read, no kernel node, a kernel node of another kernel (named: the variant and config it belongs to, or
    'not from the extension'), or a node whose body is not inspected (conditional). Pure."""
    graph = as_view(Phase, graph_row)
    if graph.nodes is None:
        return [f"graph nodes not read ({graph.nodes_error})"]
    want = graph.own_kernel.kernel
    nodes = graph.node_views
    kernels = [n for n in nodes if n.type == "kernel"]
    problems = [f"a {n.type} node (its body is not inspected)" for n in nodes if n.type == "conditional"]
    if not kernels:
        problems.append("no kernel node")
    for n in kernels:
        name = n.name or ""
        parsed = parse_symbol(name)
        if parsed is None or (parsed.variant, parsed.config, parsed.dtype, parsed.head_dim) != want:
            problems.append(f"a kernel of {describe(name) if name else 'no name'}")
    return problems


def alias_problems(alias_row: dict | AliasPhase) -> list[str]:
    """What the aliasing phase saw (empty when clean): outputs changed after later calls, outputs out of bound
    for their own inputs, outputs sharing memory with inputs or other outputs. Pure."""
    alias = as_view(AliasPhase, alias_row)
    notes = []
    if alias.overwritten:
        notes.append(f"outputs of calls {alias.overwritten} of {alias.calls} changed after later calls")
    if alias.wrong:
        notes.append(f"outputs of calls {alias.wrong} out of bound for their own inputs (err {alias.worst_err:.3g})")
    if alias.overlaps:
        notes.append("outputs share memory with " + ", ".join(f"{a}/{b}" for a, b in alias.overlaps[:4]))
    return notes


# The schema-3 checks of a row, in the order a failed row names them, and how its reason names each.
CHECK_LABELS = {"graph_kernel": "captured graph", "alias": "aliasing"}


def row_checks(row: dict | StabilityRow, schema: int) -> dict[str, list[str]]:
    """The problems of one row's schema-3 checks by name ("graph_kernel", "alias"); a check a schema-3 row does
    not record is a problem (a gate that did not run is never a pass), one an older row lacks is not asked."""
    r = as_view(StabilityRow, row)
    asked = schema >= NEW_CHECKS_SCHEMA and r.error is None
    graph = graph_kernel_problems(r.graph) if r.given("graph") and r.graph.has("nodes") else \
        ["its nodes were not recorded"] if asked else None
    alias = alias_problems(r.alias) if r.given("alias") else ["the phase was not recorded"] if asked else None
    return {check: problems for check, problems in (("graph_kernel", graph), ("alias", alias))
            if problems is not None}


# Per phase, the counters of its runs that differed (the eager launches, the graph replays).
MISMATCH_COUNTS = {"eager": ("mismatched_elements", "mismatched_launches"),
                   "graph": ("mismatched_elements", "mismatched_replays")}


def row_passed(row: dict | StabilityRow) -> bool:
    """A row's verdict from its own fields, as the oracle decides it (oracles/stability.py): no CUDA error and, in
    the eager and the graph phase, no element, launch or replay that differed, no input element changed and no
    bad in-place refill. Rows of older oracles are judged on the fields they record (the first packs hold no
    input comparison and no refills). The captured-graph and aliasing checks are derive()'s own (row_checks)."""
    r = as_view(StabilityRow, row)
    if r.error is not None:
        return False
    for phase, counts in MISMATCH_COUNTS.items():
        ph = r.phase(phase)
        if any(ph.counter(k) != 0 for k in (*counts, "inputs_changed")):
            return False
        if ph.has("refill") and ph.refill.bad_rounds != 0:
            return False
    return True


def flag_mismatch(rows: list[StabilityRow], failed_checks: dict[int, dict]) -> str | None:
    """The first row whose stored `passed` disagrees with its own fields (row_passed), named; None when every flag
    agrees. A row flagged failed whose fields are clean agrees only when one of its schema-3 checks failed (the
    oracle's flag includes them); derive() never takes a verdict from the flag."""
    for i, r in enumerate(rows):
        try:
            ok = row_passed(r)
        except (KeyError, TypeError, AttributeError) as exc:
            return f"row {i} has no readable verdict ({type(exc).__name__}: {exc})"
        flag = r.passed
        if flag is True and ok or flag is False and (not ok or failed_checks.get(i)):
            continue
        return (f"row {i} ({r.config} causal={r.causal}) records passed={flag} but its fields give "
                f"{ok and not failed_checks.get(i)} (error {r.error!r}, "
                + ", ".join(f"{phase} {k} {r.phase_or_empty(phase).counter(k, '-')}"
                            for phase, counts in MISMATCH_COUNTS.items() for k in (*counts, "inputs_changed"))
                + ")")
    return None


def _cell(stage_dir: Path, name: str, schema: int) -> tuple[str, str, Cell]:
    problem = proc_problem(stage_dir, name)
    if problem:
        return ERROR, problem, Cell()
    try:
        res = StabilityResult.from_json(read_json(stage_dir / f"{name}.json", allow_nan=True))
    except (FileNotFoundError, ValueError) as exc:
        return ERROR, f"{name}: no readable result ({exc})", Cell()
    rows = res.row_views
    if not rows:
        return ERROR, f"{name}: no config was checked", Cell(res)
    failed_checks = {i: {c: p for c, p in row_checks(r, schema).items() if p} for i, r in enumerate(rows)}
    mismatch = flag_mismatch(rows, failed_checks)
    if mismatch:
        return ERROR, f"{name}: {mismatch}", Cell(res, flag_mismatch=mismatch)
    if res.first_error:
        return FAIL, f"{name}: CUDA error: {res.first_error}", Cell(res)
    cell = Cell(res, failed_checks=sorted({c for f in failed_checks.values() for c in f}))
    bad = [i for i, r in enumerate(rows) if not row_passed(r) or failed_checks[i]]
    if bad:
        r, checks = rows[bad[0]], failed_checks[bad[0]]
        if r.error is not None:  # a row's CUDA error that first_error does not record
            return FAIL, f"{name}: {r.config} causal={r.causal}: CUDA error: {r.error}", cell
        launches, replays = r.eager.mismatched_launches, r.graph.mismatched_replays
        parts = [f"{launches} eager launches and {replays} graph replays differ bitwise"] if (
            launches or replays or not checks) else []
        parts += [f"{CHECK_LABELS[c]}: {'; '.join(checks[c])}" for c in CHECK_LABELS if c in checks]
        return FAIL, f"{name}: {r.config} causal={r.causal}: " + "; ".join(parts) + _new_checks(r), cell
    first = rows[0]
    n = first.eager.launches
    extra = ""
    if first.eager.has("refill"):
        extra = f", {first.eager.refill.rounds} + {first.graph.refill.rounds} in-place refills"
    if first.has("alias"):
        extra += f", {first.alias.calls} kept outputs rechecked, each captured graph holding its own kernel only"
    return PASS, f"{name}: {len(rows)} config x causal cells bitwise stable over {n} launches + {n} replays{extra}", \
        cell


def _new_checks(row: StabilityRow) -> str:
    """The refill / input findings of a failed row (rows of packs that record them)."""
    notes = []
    for phase in ("eager", "graph"):
        ph = row.phase(phase)
        if not ph.has("refill"):
            continue
        refill = ph.refill
        if refill.bad_rounds:
            notes.append(f"{phase}: {refill.bad_rounds}/{refill.rounds} in-place refills behind a side-stream "
                         f"producer gave a wrong output (err {refill.worst_err:.3g}): stale result or a launch "
                         f"outside the caller's stream")
        if ph.inputs_changed:
            notes.append(f"{phase}: {ph.inputs_changed} input elements changed")
    return "".join(f"; {n}" for n in notes)


def derive(stage_dir: Path, pack_dir: Path) -> StageOutcome:
    procs = read_json(stage_dir / "procs.json")
    schema = pack_schema(pack_dir)
    cells, runs = {}, {"variants": {}, "diagnostic": {}}
    for name in procs:
        if name in CANARIES:
            continue
        status, reason, cell = _cell(stage_dir, name, schema)
        cells[name] = (status, reason)
        key = "diagnostic" if name.endswith(".diagnostic") else "variants"
        runs[key][name] = RunRecord(status, reason, cell.first_error,
                                    [r.graph.capture_s for r in cell.rows if r.given("graph") and r.graph.raw]
                                    ).to_json()
    canaries = []
    for c in (c for c in CANARIES if c in procs):
        c_status, c_reason, cell = _cell(stage_dir, c, schema)
        entry = CanaryRecord(c, c_status == FAIL, c_status, expected="fail", reason=c_reason, layout=OBSERVED_FIRST)
        if c in CANARY_CHECK:  # caught only by the check it plants a fault for
            check = CANARY_CHECK[c]
            fired = cell.failed_checks or []
            entry = replace(entry, expected=f"fail by the {check} check", caught=c_status == FAIL and check in fired,
                            observed=f"{c_status}: failed checks {', '.join(fired) or 'none'}")
        canaries.append(entry.to_json())
        if cell.flag_mismatch:  # a canary result whose flags contradict its fields: not the oracle's record
            cells[c] = (ERROR, c_reason)
    status = worst(s for s, _ in cells.values())
    reason = "; ".join(r for s, r in cells.values() if s != PASS) or \
        f"{len(cells)} runs stable (incl. CUDA_LAUNCH_BLOCKING=1 TORCH_USE_CUDA_DSA=1 replays)"
    return StageOutcome(status, reason, {**runs, "canaries": canaries})


def report_md(stage_dir: Path, outcome: StageOutcome) -> str:
    lines = ["| run | status | detail |", "|---|---|---|"]
    for key in ("variants", "diagnostic"):
        for n, v in outcome.data.get(key, {}).items():
            run = RunView.from_json(v)
            lines.append(f"| {text(n)} | {text(run.status)} | {text(run.reason)} |")
    return "\n".join(lines)


__all__ = ["PASS"]
