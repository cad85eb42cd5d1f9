"""Timing-integrity rules applied to benchmark rows in derive (pure, standard library only).

- Speed of light: a row whose median is below the same-run floor, max(FLOPs / matmul rate,
  bytes / copy bandwidth) (roofline.py), is an `error` "faster than physically possible",
  never a win. Warm mode may find its inputs in L2, so there only the FLOP floor applies.
- Device drain (ours): after the measuring stream's last end event the harness waits for the
  whole device; a median wait above DRAIN_LIMIT_US means work was still running on another
  stream, which the events did not time: `error`.
- Persisting L2 (ours): the harness resets it before every batch; a batch after which the
  persisting-L2 limit was non-zero again means the op raised it during timed calls: `error`.
- Timed outputs (ours): kept outputs of timed calls that differ from an untimed call: `fail`.

Added with summary schema 2 (rows of packs written with it; older rows keep the rules above):
- Speed of light: the attention floor, max(mma, exp, memory) (roofline.attention_floors; warm: mma, exp).
- Unique content (ours): a timed row whose calls did not all see new content (timed_content_unique not
  true): `error`, its times may come from a cache.
- Timed outputs against the reference (ours): a kept timed output farther from the fp32 reference of the
  inputs that call saw than the bound from PyTorch's own error on them: `fail`.
- Content-keyed cache (ours): a kernel the content probe (timing/content_probe.py) flags, identical content
  markedly faster than fresh content: every row of that variant/config is an `error`.
"""
from __future__ import annotations

from ..records.bench import BenchRow
from . import roofline
from .suites import parse_shape

IMPOSSIBLE = "faster than physically possible"
NOT_UNIQUE = "timed content not unique"
CONTENT_CACHE = "content-keyed cache"
RULES = ("speed_of_light", "drain", "l2", "timed_outputs", "unique_content", "content_cache", "timed_reference")
DRAIN_LIMIT_US = 1000.0  # real rows: row medians <= 100 us, single batches <= 123 us (H200, bench/NOTES.md)


def floor_us(row: dict, rates: dict[str, float], *, schema: int = 1, physics=None) -> float:
    """The speed-of-light time of the row's shape: schema 1, max(FLOP, byte) floor (FLOP floor only in warm
    mode); schema 2, the attention floor (roofline.attention_floors)."""
    shape = parse_shape(row["shape"])
    if schema >= 2:
        return roofline.attention_floors(shape, row["mode"], rates[f"matmul_{shape.dtype}"], rates["bandwidth"],
                                         physics).floor_s * 1e6
    roof = roofline.roofline(roofline.shape_flops(shape), roofline.shape_bytes(shape),
                             rates[f"matmul_{shape.dtype}"], rates["bandwidth"])
    return (roof.compute_s if row["mode"] == "warm" else roof.floor_s) * 1e6


def row_problems(row: dict, rates: dict[str, float], *, schema: int = 1, physics=None,
                 cache_flags: dict | None = None) -> list[tuple[str, str]]:
    """(status, reason) for every rule the row breaks. cache_flags: (variant, config) -> the content probe's
    reason, for the kernels it flagged (schema 2)."""
    return [(st, why) for _, st, why in rule_problems(row, rates, schema=schema, physics=physics,
                                                      cache_flags=cache_flags)]


def rule_problems(row: dict, rates: dict[str, float], *, schema: int = 1, physics=None,
                  cache_flags: dict | None = None) -> list[tuple[str, str, str]]:
    """(rule, status, reason) for every rule the row breaks; rule is one of RULES."""
    out = []
    r = BenchRow.from_json(row)
    med = r.median_us
    if med is not None:
        fl = floor_us(row, rates, schema=schema, physics=physics)
        if med < fl:
            out.append(("speed_of_light", "error", f"{IMPOSSIBLE}: median {med:.3g} us < same-run floor {fl:.3g} us"))
    if r.impl != "evpack":
        return out
    if schema >= 2:
        if med is not None and r.timed_content_unique is not True:
            out.append(("unique_content", "error", f"{NOT_UNIQUE}: {r.unique_calls} of the timed calls saw new content "
                                  f"(method {r.content_uniqueness!r})"))
        flag = (cache_flags or {}).get((r.variant, r.config))
        if flag:
            out.append(("content_cache", "error", f"{CONTENT_CACHE}: {flag}"))
        if r.timed_ref_failures:
            out.append(("timed_reference", "fail", f"{r.timed_ref_failures} of {r.timed_ref_checks} kept timed outputs "
                                f"off the fp32 reference of the inputs they saw (worst {r.timed_ref_worst} "
                                f"x the bound)"))
    drain = r.drain_us_median
    if drain is not None and drain > DRAIN_LIMIT_US:
        out.append(("drain", "error", f"the device was still busy {drain:.0f} us (median) after the timed calls: work on "
                             f"another stream that the timing events missed"))
    if r.l2_error:
        out.append(("l2", "error", f"persisting-L2 reset or read-back failed: {r.l2_error}"))
    if r.l2_violations:
        out.append(("l2", "error", f"the persisting-L2 limit was raised during timed calls in {r.l2_violations} "
                             f"batches"))
    if r.timed_mismatches:
        out.append(("timed_outputs", "fail", f"{r.timed_mismatches} elements of kept timed outputs differ from an untimed "
                            f"call ({r.timed_checks} checks)"))
    return out


def judge(rows: list[dict], rates: dict[str, float], *, schema: int = 1, physics=None,
          cache_flags: dict | None = None) -> tuple[list[dict], dict]:
    """Rows with the integrity rules applied (status/reason replaced where broken) and a summary."""
    judged, broken = [], []
    for r in rows:
        probs = row_problems(r, rates, schema=schema, physics=physics, cache_flags=cache_flags)
        if probs:
            status = "error" if any(s == "error" for s, _ in probs) else "fail"
            r = dict(r, status=status, reason="; ".join(p for _, p in probs))
            broken.append(BenchRow.from_json(r))
        judged.append(r)
    checked = [r for r in map(BenchRow.from_json, rows) if r.timed_checks is not None]
    summary = {"broken_rows": len(broken), "impossible_rows": sum(IMPOSSIBLE in r.reason for r in broken),
               "timed_checks": sum(r.timed_checks or 0 for r in checked),
               "first": f"{broken[0].key}: {broken[0].reason}" if broken else None}
    if schema >= 2:
        summary.update(not_unique_rows=sum(NOT_UNIQUE in r.reason for r in broken),
                       content_cache_rows=sum(CONTENT_CACHE in r.reason for r in broken),
                       timed_ref_checks=sum(r.timed_ref_checks or 0 for r in checked))
    return judged, summary
