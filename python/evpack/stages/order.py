"""Stage order, dependencies and lookup: the one list `evidence` walks."""
from __future__ import annotations

import importlib
import os
from types import ModuleType

STAGE_ORDER = ("build", "ptxas", "sass", "tensor_proof", "sanitize", "correctness", "stability",
               "canaries", "bench")

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


def stage_module(name: str) -> ModuleType:
    if name not in STAGE_ORDER:
        raise ValueError(f"unknown stage {name!r} (known: {', '.join(STAGE_ORDER)})")
    # EVPACK_STAGE_PACKAGE lets the tests drive the real pipeline with stand-in stages.
    return importlib.import_module(f"{os.environ.get('EVPACK_STAGE_PACKAGE', 'evpack.stages')}.{name}")


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
