"""Every variant the build shipped has its cells in every GPU stage that decided.

Each GPU stage derives its outcome from the cells its procs.json lists; nothing in a stage asks whether a
cell is missing. Without this check a pack whose failing variant's cells were removed (procs.json entry,
logs, results) verified as if that variant had never been built. The variants a stage must cover are those
of build/kernels.json (what the pack's own build made, so a variant added to the registry later asks nothing
of an older pack) that the run selected (pack.json options.variants; none given: all), and every shipped
variant the benchmark timed whatever the selection says (a variant in the results has its evidence: a
selection edited to leave it out, or one that names no shipped variant, excuses nothing). Cells an
incremental run carried are in procs.json too (marked carried_from), so they count. Canaries have their own
rule (the canaries stage). A stage folder without procs.json (packs of schema 1) is not asked.
"""
from __future__ import annotations

from pathlib import Path

from .jsonio import read_json
from .model import FAIL, PASS, StageOutcome
from .records.bench import BenchSummary
from .records.stage_options import RunOptions
from .stages.kernel_rows import load_built_kernels
from .timing.summary import OURS, read_summary

# stage -> how a cell name names its variant (sanitize cells are TOOL.VARIANT.CONFIG)
CELL_VARIANT = {
    "correctness": lambda cell: cell,
    "stability": lambda cell: cell,
    "tensor_proof": lambda cell: cell,
    "sanitize": lambda cell: cell.split(".")[1] if cell.count(".") >= 2 else None,
}


def shipped_variants(kernels: dict, pack_dir: Path, options: object) -> set[str]:
    """The non-canary variants of build/kernels.json (stages.kernel_rows.load_built_kernels) the run selected
    or the benchmark timed."""
    built = {variant for variant, *_ in kernels if not str(variant).startswith("canary")}
    want = RunOptions.from_json(options).variants
    if not want:
        return built
    timed = timed_variants(pack_dir)  # only a selection needs the benchmark's results read
    return {v for v in built if v in want or v in timed}


def timed_variants(pack_dir: Path) -> set[str]:
    """The variants of our rows in the benchmark's results (bench/summary.json; none when it is absent or
    unreadable, which the bench stage's derivation names)."""
    try:
        summary = BenchSummary.from_json(read_summary(pack_dir / "bench"))
    except (OSError, ValueError, RecursionError):
        return set()
    return {str(r.variant) for r in summary.rows if r.impl == OURS}


# The tools every schema's sanitize stage runs on each (variant, config) the build shipped: a literal, as
# records/schema.py keeps its lists, not the live parsers.sanitizer.TOOLS (a tool added there must not ask an
# older pack for cells it never ran).
SANITIZER_TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")


def _sanitize_cells_missing(kernels: dict, variants: set[str], cells: object) -> list[str]:
    """The sanitize stage runs every tool on every shipped config: a cell per (tool, variant, config), so that a
    cell that found a race, or every cell of the benchmark's headline config, cannot be left out."""
    pairs = {(str(v), str(c)) for v, c, *_ in kernels if str(v) in variants}
    have = set(cells) if isinstance(cells, dict) else set()
    missing = sorted(f"{t}.{v}.{c}" for v, c in pairs for t in SANITIZER_TOOLS if f"{t}.{v}.{c}" not in have)
    return [f"stage sanitize: no cell {m} (every sanitizer runs on every config the build shipped)"
            for m in missing[:10]] + ([f"stage sanitize: ... and {len(missing) - 10} more missing cells"]
                                      if len(missing) > 10 else [])


def coverage_problems(pack_dir: Path, options: object, outcomes: dict[str, StageOutcome]) -> list[str]:
    try:
        kernels, _ = load_built_kernels(pack_dir)
    except OSError:
        return []
    if kernels is None:  # unusable: the SASS and PTXAS derivations name that
        return []
    variants = shipped_variants(kernels, pack_dir, options)
    if not variants:
        return []
    problems = []
    for stage, named in CELL_VARIANT.items():
        out = outcomes.get(stage)
        procs = pack_dir / stage / "procs.json"
        if out is None or out.status not in (PASS, FAIL) or not procs.is_file():
            continue
        try:
            cells = read_json(procs)
        except (OSError, ValueError):
            continue  # an unreadable procs.json is named by the stage's derivation
        covered = {named(str(c)) for c in cells} if isinstance(cells, dict) else set()
        problems += [f"stage {stage}: no cell of variant {v}, which the build shipped and the run selected or "
                     f"the benchmark timed"
                     for v in sorted(variants - covered)]
        if stage == "sanitize" and variants <= covered:
            problems += _sanitize_cells_missing(kernels, variants, cells)
    return problems
