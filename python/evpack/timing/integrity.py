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
"""
from __future__ import annotations

from . import roofline
from .suites import parse_shape

IMPOSSIBLE = "faster than physically possible"
DRAIN_LIMIT_US = 1000.0  # real rows: row medians <= 100 us, single batches <= 123 us (H200, bench/NOTES.md)


def floor_us(row: dict, rates: dict[str, float]) -> float:
    """The speed-of-light time of the row's shape (FLOP floor only in warm mode)."""
    shape = parse_shape(row["shape"])
    roof = roofline.roofline(roofline.shape_flops(shape), roofline.shape_bytes(shape),
                             rates[f"matmul_{shape.dtype}"], rates["bandwidth"])
    return (roof.compute_s if row["mode"] == "warm" else roof.floor_s) * 1e6


def row_problems(row: dict, rates: dict[str, float]) -> list[tuple[str, str]]:
    """(status, reason) for every rule the row breaks."""
    out = []
    med = row.get("median_us")
    if med is not None:
        fl = floor_us(row, rates)
        if med < fl:
            out.append(("error", f"{IMPOSSIBLE}: median {med:.3g} us < same-run floor {fl:.3g} us"))
    if row.get("impl") != "evpack":
        return out
    drain = row.get("drain_us_median")
    if drain is not None and drain > DRAIN_LIMIT_US:
        out.append(("error", f"the device was still busy {drain:.0f} us (median) after the timed calls: work on "
                             f"another stream that the timing events missed"))
    if row.get("l2_error"):
        out.append(("error", f"persisting-L2 reset or read-back failed: {row['l2_error']}"))
    if row.get("l2_violations"):
        out.append(("error", f"the persisting-L2 limit was raised during timed calls in {row['l2_violations']} "
                             f"batches"))
    if row.get("timed_mismatches"):
        out.append(("fail", f"{row['timed_mismatches']} elements of kept timed outputs differ from an untimed "
                            f"call ({row.get('timed_checks')} checks)"))
    return out


def judge(rows: list[dict], rates: dict[str, float]) -> tuple[list[dict], dict]:
    """Rows with the integrity rules applied (status/reason replaced where broken) and a summary."""
    judged, broken = [], []
    for r in rows:
        probs = row_problems(r, rates)
        if probs:
            status = "error" if any(s == "error" for s, _ in probs) else "fail"
            r = dict(r, status=status, reason="; ".join(p for _, p in probs))
            broken.append(r)
        judged.append(r)
    checked = [r for r in rows if r.get("timed_checks") is not None]
    summary = {"broken_rows": len(broken), "impossible_rows": sum(IMPOSSIBLE in r["reason"] for r in broken),
               "timed_checks": sum(r["timed_checks"] or 0 for r in checked),
               "first": f"{broken[0]['key']}: {broken[0]['reason']}" if broken else None}
    return judged, summary
