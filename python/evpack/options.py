"""The options of a run, validated before any stage runs: a bad option costs no GPU time."""
from __future__ import annotations

import math
import os
from pathlib import Path

from .pack import PackError
from .stages.order import GROUPS, STAGE_ORDER

STAGE_COMMANDS = tuple(STAGE_ORDER) + tuple(GROUPS)
SUITES = ("quick", "full", "adhoc")
REQUIREMENTS = ("complete", "partial")


def parse_stages(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise PackError("--stages: give at least one stage")
    for s in names:
        if s not in STAGE_COMMANDS:
            raise PackError(f"--stages: unknown stage {s!r} (known: {', '.join(STAGE_COMMANDS)})")
    return names


def parse_cost(value) -> float | None:
    """A finite, non-negative USD rate (from --cost-per-hour, or the session's environment)."""
    if value is None:
        for var in ("EVPACK_COST_PER_HOUR", "EVPACK_RATE_USD_PER_HOUR"):
            if os.environ.get(var):
                value = os.environ[var]
                break
        else:
            return None
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise PackError(f"--cost-per-hour: expected a number of USD per hour, got {value!r}") from None
    if not math.isfinite(rate) or rate < 0:
        raise PackError(f"--cost-per-hour: must be a finite number >= 0, got {value!r}")
    return rate


def parse_variants(text: str | None) -> list[str] | None:
    from . import registry

    if text is None:
        return None
    names = [v.strip() for v in text.split(",") if v.strip()]
    if not names:
        raise PackError("--variants: give at least one variant")
    known = [v.name for v in registry.VARIANTS]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise PackError(f"--variants: unknown variant(s) {', '.join(map(repr, unknown))} (known: {', '.join(known)})")
    return names


def check_suite(repo: Path, suite: str, shapes: list[str]) -> None:
    from .timing.suites import SuiteError, load_suite, with_adhoc

    if suite not in SUITES:
        raise PackError(f"--suite: unknown suite {suite!r} (known: {', '.join(SUITES)})")
    try:
        base = load_suite("quick" if suite == "adhoc" else suite, repo)
        with_adhoc(base, shapes, only=suite == "adhoc")
    except SuiteError as exc:
        raise PackError(str(exc)) from None


def parse_gpus(spec: str | None) -> list[dict] | None:
    """options["gpus"] (evpack.gpus.select) from --gpus and the GPUs nvidia-smi lists."""
    from .gpus import GpuSelectionError, discover, select

    try:
        return select(spec, discover())
    except GpuSelectionError as exc:
        raise PackError(str(exc)) from None


def run_options(repo: Path, *, suite: str, shapes: list[str], variants: str | None, cost_per_hour,
                previous_pack: str | None, gpus: str | None = None) -> dict:
    """The options dict every stage receives, after every check."""
    check_suite(repo, suite, shapes)
    if previous_pack is not None and not (Path(previous_pack) / "index.json").is_file():
        raise PackError(f"--previous-pack: {previous_pack} is not a finished pack (no index.json)")
    return {"suite": suite, "shapes": list(shapes), "variants": parse_variants(variants),
            "cost_per_hour": parse_cost(cost_per_hour), "previous_pack": previous_pack,
            "gpus": parse_gpus(gpus)}


def default_requirement(has_gpu: bool) -> str:
    return "complete" if has_gpu else "partial"


def meets(label: str, requirement: str) -> bool:
    """Exit-status contract: does a pack of this label meet the requirement?"""
    from .labels import COMPLETE, PARTIAL

    if requirement == "complete":
        return label == COMPLETE
    return label in (COMPLETE, PARTIAL)


# The stages whose run lets a cross-stage gate decide something: one_binary compares the binary the build
# made with the one a stage loaded at run time (gates.one_binary_gate: SASS alone leaves it skipped).
CROSS_GATE_FEEDERS = {"one_binary": ("tensor_proof", "sanitize", "correctness", "stability", "bench")}


def gates_of_run(selected: list[str] | None) -> tuple[str, ...]:
    """The gates a run of the selected stages decides (None: every gate): the gate of each stage it runs,
    the stages they need included, and each cross-stage gate that one of those stages feeds."""
    from .model import GATE_ORDER, STAGE_GATES
    from .stages.order import with_dependencies

    if not selected:
        return GATE_ORDER
    ran = set(with_dependencies(selected))
    return tuple(g for g in GATE_ORDER if (STAGE_GATES[g][0] in ran if g in STAGE_GATES
                                           else ran.intersection(CROSS_GATE_FEEDERS.get(g, ()))))


def requirement_verdict(requirement: str, label: str, gate_status: dict[str, str],
                        selected: list[str] | None) -> tuple[bool, str]:
    """(met, the line that says so). A run of every stage meets `complete` with a complete pack and
    `partial` with a complete or partial one. A run of selected stages (`nox -s bench`) requires what it
    ran: complete, every gate of those stages passed; partial, none of them failed; and in both, no gate of
    the pack failed or errored. The gates of stages not selected are skipped and decide nothing."""
    from .model import ERROR, FAIL, PASS

    if not selected:
        ok = meets(label, requirement)
        return ok, f"requirement {requirement}: {'met' if ok else 'NOT met'} by {label}"
    mine = gates_of_run(selected)
    failed = [g for g, s in gate_status.items() if s in (FAIL, ERROR)]
    short = [g for g in mine if gate_status.get(g) != PASS] if requirement == "complete" else []
    ok = not failed and not short
    why = "; ".join(part for part in (
        ", ".join(f"{g} {gate_status[g]}" for g in failed),
        ", ".join(f"{g} {gate_status.get(g, 'missing')}" for g in short if g not in failed)) if part)
    return ok, (f"requirement {requirement} of the stages run ({', '.join(selected)}; gates {', '.join(mine)}): "
                f"{'met' if ok else 'NOT met'} by {label}" + (f" ({why})" if why else ""))
