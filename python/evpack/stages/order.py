"""Stage order, dependencies and lookup: the one list `evidence` walks."""
from __future__ import annotations

import importlib
from types import ModuleType

STAGE_ORDER = ("build", "ptxas", "sass", "tensor_proof", "sanitize", "correctness", "stability",
               "canaries", "bench")
# The order `evidence` runs them in: canaries last, since its matrix reads the outcome of every gate
# that runs a canary, bench included. STAGE_ORDER stays the order of pack.json and the report, so
# packs made before bench had a canary render exactly as they did.
RUN_ORDER = tuple(s for s in STAGE_ORDER if s != "canaries") + ("canaries",)

DEPENDS_ON = {
    "build": (),
    "ptxas": ("build",),
    "sass": ("build",),
    "tensor_proof": ("build",),
    "sanitize": ("build",),
    "correctness": ("build",),
    "stability": ("build",),
    "canaries": ("ptxas", "sass", "tensor_proof", "sanitize", "correctness", "stability"),
    "bench": ("build",),
}

# Sessions/commands that run a group of stages.
GROUPS = {"oracles": ("correctness", "stability", "canaries")}


DEFAULT_PACKAGE = "evpack.stages"


def stage_module(name: str, package: str | None = None) -> ModuleType:
    """The module of a stage. `package` (default evpack.stages) lets tests drive the real pipeline
    with stand-in stages; it is a parameter of the library calls, never read from the environment."""
    if name not in STAGE_ORDER:
        raise ValueError(f"unknown stage {name!r} (known: {', '.join(STAGE_ORDER)})")
    return importlib.import_module(f"{package or DEFAULT_PACKAGE}.{name}")


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
