"""`python -m evpack compare PACK_A PACK_B`: is B faster, slower or the same as A, row by row?

Rows are joined on (impl, variant, config, shape, mode). For medians m_a, m_b with
interquartile ranges iqr_a, iqr_b, B is SLOWER when m_b - m_a > T, FASTER when
m_a - m_b > T, else SAME, where

    T = K * sqrt(iqr_a^2 + iqr_b^2)  +  drift * (m_a + m_b) / 2

Why the per-sample spread (IQR) and not the CI of the median: within one run the CI
shrinks like 1/sqrt(n) and, with a few hundred samples, is far narrower than what moves
between two runs (clock and thermal state, memory placement, driver queues). A change
smaller than the spread of single calls is not one a reviewer should act on. For normal
data IQR = 1.35 sd, so with K = 2 the first term is ~2.7 sd of a single-call difference:
two runs of the same code land inside it nearly always, a real regression of a few
percent on a kernel with a 1% spread does not.

Why the drift term: the same run measures SDPA's backends, code the change did not touch.
drift = median over SDPA rows present and ok in both packs of |m_b - m_a| / m_a: the
measured run-to-run shift of untouched code. A GPU that runs 3% slower across the board
then moves our rows by ~3% too, and that is not called a regression of our kernel.
An SDPA row itself is judged with the drift of the other SDPA rows (leave one out).
With no shared SDPA rows drift = 0 (only the spread counts).

Both packs are verified first (the command line does it, as for label and report): only whole
packs are compared, never a bench folder or a summary.json on its own.

Exit status: 0 no regression; 1 any SLOWER row of our variants (impl "evpack"), or a pack that does
not verify; 2 bad input (not a pack, no bench data), with a one-line error on stderr.
"""
from __future__ import annotations

import math
from pathlib import Path

K = 2.0
SAME, FASTER, SLOWER, NEW, GONE, NA = "SAME", "FASTER", "SLOWER", "NEW", "GONE", "N/A"
OURS, SDPA = "evpack", "sdpa"


class CompareInputError(Exception):
    """A pack that cannot be compared (message is one line)."""


KEY_FIELDS = ("impl", "variant", "config", "shape", "mode")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def row_problem(r) -> str | None:
    """Why a row of bench/summary.json cannot be compared (None when it can)."""
    if not isinstance(r, dict):
        return f"a row is {type(r).__name__}, not an object"
    bad = [k for k in KEY_FIELDS if k not in r or not (r[k] is None or isinstance(r[k], str))]
    if bad:
        return f"a row's {', '.join(bad)} is missing or not a string"
    for k in ("median_us", "iqr_us"):
        if r.get(k) is not None and not _number(r[k]):
            return f"a row's {k} is not a number: {r[k]!r}"
    return None


def load(pack: Path) -> dict:
    """bench/summary.json of a pack folder (the caller verifies the pack first): its rows, each
    checked to be comparable. CompareInputError (one line) when there are none or one is malformed."""
    pack = Path(pack)
    from .summary import has_summary, read_summary

    if not has_summary(pack / "bench"):
        raise CompareInputError(f"compare: {pack.name}: no bench data (no bench/summary.json: the bench stage "
                                "did not run in this pack)")
    try:
        data = read_summary(pack / "bench")
    except (OSError, ValueError) as exc:
        raise CompareInputError(f"compare: {pack.name}: bench/summary.json unreadable: {exc}") from None
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise CompareInputError(f"compare: {pack.name}: bench/summary.json holds no bench rows")
    for r in rows:
        problem = row_problem(r)
        if problem:
            raise CompareInputError(f"compare: {pack.name}: bench/summary.json: {problem}")
    return data


def _key(r: dict) -> tuple:
    return tuple(r[k] for k in KEY_FIELDS)


def _timed(r: dict | None) -> bool:
    """A row with a measured, positive median (0 is no measurement, and would divide by zero)."""
    return bool(r) and r.get("status") == "ok" and _number(r.get("median_us")) and r["median_us"] > 0


def drift(rows_a: list[dict], rows_b: list[dict], exclude: tuple | None = None) -> float:
    """Median relative shift of the SDPA rows both packs timed (0 if none); `exclude` leaves one row out."""
    b = {_key(r): r for r in rows_b}
    shifts = sorted(abs(b[_key(r)]["median_us"] - r["median_us"]) / r["median_us"] for r in rows_a
                    if r["impl"] == SDPA and _key(r) != exclude and _timed(r) and _timed(b.get(_key(r))))
    if not shifts:
        return 0.0
    n = len(shifts)
    return shifts[n // 2] if n % 2 else (shifts[n // 2 - 1] + shifts[n // 2]) / 2


def threshold(a: dict, b: dict, drift_: float, k: float = K) -> float:
    return k * math.hypot(a.get("iqr_us") or 0.0, b.get("iqr_us") or 0.0) + drift_ * (a["median_us"] + b["median_us"]) / 2


def classify(a: dict, b: dict, drift_: float, k: float = K) -> str:
    d = b["median_us"] - a["median_us"]
    t = threshold(a, b, drift_, k)
    return SLOWER if d > t else FASTER if -d > t else SAME


def compare_rows(rows_a: list[dict], rows_b: list[dict], k: float = K) -> dict:
    """{'drift', 'k', 'rows': [{key fields, mark, medians, delta_pct, threshold_us}], 'counts'}."""
    dr = drift(rows_a, rows_b)
    a_by, b_by = {_key(r): r for r in rows_a}, {_key(r): r for r in rows_b}
    out = []
    for key in list(a_by) + [k_ for k_ in b_by if k_ not in a_by]:
        a, b = a_by.get(key), b_by.get(key)
        entry = dict(zip(("impl", "variant", "config", "shape", "mode"), key, strict=True))
        entry.update(median_a_us=a.get("median_us") if a else None, median_b_us=b.get("median_us") if b else None,
                     delta_pct=None, threshold_us=None)
        if a is None:
            entry["mark"] = NEW
        elif b is None:
            entry["mark"] = GONE
        elif not (_timed(a) and _timed(b)):
            entry["mark"] = NA
            entry["note"] = f"{a.get('status')} -> {b.get('status')}"
        else:  # an SDPA row is judged against the drift of the other SDPA rows
            d = drift(rows_a, rows_b, exclude=key) if key[0] == SDPA else dr
            entry["mark"] = classify(a, b, d, k)
            entry["delta_pct"] = 100.0 * (b["median_us"] - a["median_us"]) / a["median_us"]
            entry["threshold_us"] = threshold(a, b, d, k)
        out.append(entry)
    counts = {m: sum(1 for e in out if e["mark"] == m) for m in (SAME, FASTER, SLOWER, NEW, GONE, NA)}
    return {"drift": dr, "k": k, "rows": out, "counts": counts}


def regressions(diff: dict) -> list[dict]:
    return [e for e in diff["rows"] if e["impl"] == OURS and e["mark"] == SLOWER]


def exit_code(diff: dict) -> int:
    return 1 if regressions(diff) else 0


def _fmt(x, spec=".2f") -> str:
    return "-" if x is None else format(x, spec)


def render(diff: dict, only_changed: bool = False, markdown: bool = True) -> str:
    head = ["mark", "impl", "variant", "config", "shape", "mode", "A µs", "B µs", "Δ %", "noise µs"]
    lines = []
    for e in diff["rows"]:
        if only_changed and e["mark"] == SAME:
            continue
        lines.append([e["mark"] + (f" ({e['note']})" if e.get("note") else ""), e["impl"], e["variant"], e["config"] or "-", e["shape"], e["mode"],
                      _fmt(e["median_a_us"]), _fmt(e["median_b_us"]), _fmt(e["delta_pct"], "+.1f"),
                      _fmt(e["threshold_us"])])
    c = diff["counts"]
    foot = (f"{c[SAME]} same, {c[FASTER]} faster, {c[SLOWER]} slower, {c[NEW]} new, {c[GONE]} gone, "
            f"{c[NA]} n/a; noise rule |Δ| > {diff['k']:g}·sqrt(iqr_a²+iqr_b²) + drift·median, "
            f"drift (SDPA rows) {100 * diff['drift']:.2f}%")
    if not lines:
        return foot
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(cells) + " |" for cells in lines]
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(head, *lines, strict=True)]
        out = ["  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)) for row in [head, *lines]]
    return "\n".join(out + ["", foot])
