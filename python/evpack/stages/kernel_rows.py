"""Per-kernel rows shared by the PTXAS and SASS stages: the build's kernel list, canary rows, the archs
each variant's kernels must have rows on, status counts, the CSV form of a table."""
from __future__ import annotations

import re
from pathlib import Path

from .. import registry
from ..jsonio import write_text
from ..records.build import BuiltKernel
from ..records.canary import CanaryRecord
from ..records.kernel_row import StatusRow
from .base import ERROR, FAIL, PASS, SKIPPED, read_json, worst


def load_built_kernels(pack_dir: Path) -> tuple[dict | None, str]:
    """build/kernels.json as {(variant, config, dtype, head_dim): row} (BuiltKernel's objects); (None, why) when
    unusable."""
    path = pack_dir / "build" / "kernels.json"
    if not path.exists():
        return None, "build/kernels.json is missing (the build did not finish)"
    try:
        rows = read_json(path)
        out = {}
        for r in rows:
            if not isinstance(r, dict):
                raise TypeError(f"a row that is not an object: {r!r:.40}")
            out[BuiltKernel.from_json(r).key()] = r
        return out, ""
    except (ValueError, KeyError, TypeError) as e:
        return None, f"build/kernels.json is unreadable: {e}"


def unknown_built(built: dict) -> list[str]:
    """kernels.json entries that name no registry kernel."""
    grid = {(v.name, c.name, dt, d) for v, c, dt, d in registry.kernel_grid(include_canaries=True)}
    return [f"{k[0]}/{k[1]}/{k[2]}/d{k[3]}" for k in built if k not in grid]


def split_canaries(rows: list[dict], tool: str) -> tuple[list[dict], list[dict]]:
    """(non-canary rows, one entry per canary variant in the form the canary matrix reads:
    {name, tool, expected, caught, observed, reason, status, kernels}). `caught`: this gate fired."""
    main, can = [], {}
    for r in rows:
        v = StatusRow.from_json(r)
        if v.canary:
            can.setdefault(v.variant, []).append(r)
        else:
            main.append(r)
    out = []
    for name, rs in can.items():
        views = [StatusRow.from_json(r) for r in rs]
        st = worst(r.status for r in views)
        bad = [f"{r.arch}: {r.reason}" for r in views if r.status != PASS]
        target = registry.get(name, include_canaries=True).expect_caught_by
        out.append(CanaryRecord(name, st == FAIL, bad[0] if bad else f"{len(rs)} kernel x arch rows pass", tool=tool,
                                expected=f"caught by {target}, not by {tool}", reason="; ".join(bad), status=st,
                                kernels=rs).to_json())
    return main, out


def registry_variant(name: str) -> registry.Variant | None:
    try:
        return registry.get(name, include_canaries=True)
    except ValueError:
        return None


_ARCH_SPECIFIC = re.compile(r"^sm_\d+[af]$")  # sm_90a, sm_100a, sm_100f: targets only some variants need


def required_archs(variant: str, archs) -> list[str]:
    """Of the archs an extension was compiled for, those a kernel of `variant` must have a row on: its registry
    `archs` when it declares some; else every arch but the arch-specific ones (sm_90a), which are added for
    the variants that declare them (a build whose only archs are arch-specific requires those)."""
    var = registry_variant(variant)
    if var is not None and var.archs:
        return [a for a in archs if var.targets(a)]
    plain = [a for a in archs if not _ARCH_SPECIFIC.match(a)]
    return plain or list(archs)


def split_off_target(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(rows on archs their variant is built for, the others). A variant with registry `archs` (e.g. 90a)
    may still be compiled for the extension's other archs as a stub; those rows prove nothing either way."""
    keep, off = [], []
    for r in rows:
        v = StatusRow.from_json(r)
        var = registry_variant(v.variant) if v.variant else None
        if var is not None and not var.targets(v.arch):
            off.append({**r, "status": SKIPPED,
                        "reason": f"not a target arch of {var.name} (archs {', '.join(var.archs)}): decides nothing"})
        else:
            keep.append(r)
    return keep, off


def summary_counts(rows: list[dict]) -> dict:
    out = {"rows": len(rows)}
    for s in (PASS, FAIL, ERROR, SKIPPED):
        out[s] = sum(1 for r in rows if StatusRow.from_json(r).status == s)
    return out


def write_csv(path: Path, df) -> None:
    """Atomic CSV write; integer columns with gaps stay integers (pandas nullable Int64)."""
    for col in df.columns:
        vals = df[col].dropna()
        if len(vals) and all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
            df[col] = df[col].astype("Int64")
    write_text(path, df.to_csv(index=False))
