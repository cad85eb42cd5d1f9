"""The stage declaration: every stage registered once (STAGES), and the tables derived from it.

A `StageSpec` says what the runner and `verify` need to know of a stage without importing it: its
dependencies, the resource class the scheduler (evpack/schedule.py) places it by, its timeout, the raw
files a stage that decided keeps, its binary record and the canaries it runs. The stage modules take
NEEDS_GPU, TIMEOUT_S, REQUIRED_FILES, BINARY_RECORD and CANARIES from here (`declared(NAME)`), and the
old tables (STAGE_ORDER, RUN_ORDER, DEPENDS_ON, GROUPS) are views of STAGES, so callers of either keep
working. A stand-in stage package (tests) may still set NEEDS_GPU / TIMEOUT_S on its modules:
`stage_spec(name, package)` lets those attributes win.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from types import ModuleType

# Resource classes: where a stage runs and what may run beside it.
CPU = "cpu"  # the driver's CPU (inline): runs beside any stage but a `alone` one
GPU_SHARED = "gpu-shared"  # checks that do not time: beside each other, cells on one pool of slots per GPU
GPU_EXCLUSIVE = "gpu-exclusive"  # counters or timing: no other GPU stage beside it
RESOURCES = (CPU, GPU_SHARED, GPU_EXCLUSIVE)


@dataclass(frozen=True)
class StageSpec:
    name: str
    depends_on: tuple[str, ...] = ()  # a dependency that did not pass skips this stage (canaries excepted)
    resource: str = CPU
    timeout_s: int = 300  # of the stage's own process (GPU stages)
    required_files: tuple[str, ...] = ()  # raw files (globs) a stage that decided keeps; verify requires them
    binary_record: str | None = None  # a passing stage keeps the record of the binary it loaded
    # the canary cells the stage runs beside its variants, by name (ptxas, sass and sanitize find theirs in
    # registry.CANARIES by the tool that must catch them)
    canaries: tuple[str, ...] = ()
    after: tuple[str, ...] = ()  # ordering only: starts once these finished (ran, failed or were skipped)
    alone: bool = False  # nothing else runs beside it (the benchmark: timing)
    reads_stages: bool = False  # derive() reads other stages' outcomes (the canary matrix)
    # verify derives it in its own process while the other stages run in forked workers, so what it parsed stays
    # there for the readers after it (the SASS dump, which the incremental keys read again: parsers/sass)
    derive_in_parent: bool = False
    # its process starts when the GPU checks start and prepares (imports, CUDA context) until its turn
    # (runner.WarmStage; the stage module's prepare(options))
    warm_start: bool = False

    @property
    def needs_gpu(self) -> bool:
        return self.resource != CPU


_GATES_WITH_CANARIES = ("ptxas", "sass", "tensor_proof", "sanitize", "correctness", "stability")

STAGES: tuple[StageSpec, ...] = (
    StageSpec("build", resource=CPU, timeout_s=3600, required_files=("result.json", "build.log")),
    StageSpec("ptxas", ("build",), CPU, 300, ("table.csv", "table.json")),
    StageSpec("sass", ("build",), CPU, 900,
              ("run.json", "*.sass.?z", "table.csv", "table.json", "histogram.csv*", "histogram.json"),
              "binary.json", derive_in_parent=True),
    StageSpec("tensor_proof", ("build",), GPU_EXCLUSIVE, 900, ("procs.json",), "binary.json",
              ("canary_decoy_hmma", "canary_triton_decoy", "canary_foreign_work")),
    StageSpec("sanitize", ("build",), GPU_SHARED, 900, ("procs.json", "run.json"), "binary.json"),
    StageSpec("correctness", ("build",), GPU_SHARED, 1500, ("procs.json",), "binary.json",
              ("canary_wrong_result", "canary_partial_write", "canary_input_mutation", "canary_input_family")),
    StageSpec("stability", ("build",), GPU_SHARED, 1200, ("procs.json",), "binary.json",
              ("canary_second_launch", "canary_memo", "canary_wrong_stream", "canary_capture_aware",
               "canary_output_alias")),
    # the canary matrix reads the outcome of every gate that runs a canary, bench included: it runs last
    StageSpec("canaries", _GATES_WITH_CANARIES, CPU, 60, ("expected.json",), after=("bench",), reads_stages=True),
    # full suite budget 8 min + ceilings, build load and plots; last on the GPU, nothing beside it
    StageSpec("bench", ("build",), GPU_EXCLUSIVE, 900,
              ("bench.log", "run.json", "samples.csv.*", "summary.json*", "ceilings.json", "clocks.json"),
              "binary.json", ("canary_side_stream", "canary_content_cache", "canary_timing_aware"),
              after=_GATES_WITH_CANARIES, alone=True, warm_start=True),
)
SPECS = {s.name: s for s in STAGES}

STAGE_ORDER = tuple(s.name for s in STAGES)  # the order of pack.json and the report
# The order a sequential run takes: every stage after what it waits for (canaries last, since its matrix
# reads the outcome of every gate that runs a canary, bench included). STAGE_ORDER stays the order of
# pack.json and the report, so packs made before bench had a canary render exactly as they did.


def _run_order() -> tuple[str, ...]:
    done: list[str] = []
    while len(done) < len(STAGES):
        nxt = next(s for s in STAGES if s.name not in done and all(d in done for d in s.depends_on + s.after))
        done.append(nxt.name)
    return tuple(done)


RUN_ORDER = _run_order()
DEPENDS_ON = {s.name: s.depends_on for s in STAGES}

# Sessions/commands that run a group of stages.
GROUPS = {"oracles": ("correctness", "stability", "canaries")}


DEFAULT_PACKAGE = "evpack.stages"


def declared(name: str) -> StageSpec:
    """The registered declaration of a stage (what its module's NEEDS_GPU, TIMEOUT_S, ... are)."""
    try:
        return SPECS[name]
    except KeyError:
        raise ValueError(f"unknown stage {name!r} (known: {', '.join(STAGE_ORDER)})") from None


def stage_module(name: str, package: str | None = None) -> ModuleType:
    """The module of a stage. `package` (default evpack.stages) lets tests drive the real pipeline
    with stand-in stages; it is a parameter of the library calls, never read from the environment."""
    if name not in STAGE_ORDER:
        raise ValueError(f"unknown stage {name!r} (known: {', '.join(STAGE_ORDER)})")
    return importlib.import_module(f"{package or DEFAULT_PACKAGE}.{name}")


def stage_spec(name: str, package: str | None = None) -> StageSpec:
    """The declaration the run uses: `declared(name)`, where a stand-in package's module may say otherwise
    on NEEDS_GPU (a GPU stage it declares as CPU runs as CPU, and the reverse as gpu-shared) and TIMEOUT_S."""
    spec = declared(name)
    if not package or package == DEFAULT_PACKAGE:
        return spec
    mod = stage_module(name, package)
    needs_gpu = getattr(mod, "NEEDS_GPU", spec.needs_gpu)
    resource = spec.resource if bool(needs_gpu) == spec.needs_gpu else (GPU_SHARED if needs_gpu else CPU)
    return replace(spec, resource=resource, timeout_s=int(getattr(mod, "TIMEOUT_S", spec.timeout_s)))


def with_dependencies(selected) -> list[str]:
    """The selected stages plus everything they need, in pipeline order."""
    need: set[str] = set()

    def add(s: str) -> None:
        if s not in DEPENDS_ON:
            raise ValueError(f"unknown stage {s!r} (known: {', '.join(STAGE_ORDER)})")
        if s not in need:
            need.add(s)
            for d in DEPENDS_ON[s]:
                add(d)

    for s in selected:
        for member in GROUPS.get(s, (s,)):
            add(member)
    return [s for s in STAGE_ORDER if s in need]
