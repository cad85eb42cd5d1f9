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

Rule 2 (RULE; packs record it in bench/run.json `compare_rule`; packs without it were judged by rule 1, and
their verify re-derives them by rule 1): a row's drift is at least the largest |shift| of the SDPA rows of its
own shape and mode (the row itself left out). Between two machine sessions the shift of untouched code depends on
the shape, and a median over every shape hides that: on 2026-11-25 two H200 sessions of the same kernels
(tests/fixtures/compare) had a drift of 0.41% while SDPA's rows at B=2 H=8 S=512 causal moved up to +1.85%, and
rule 1 called two unchanged WMMA rows of that shape (+1.1%, +1.3%) SLOWER. On those two sessions rule 2 calls no
row of ours SLOWER, and still finds a kernel made 3% slower on 13 of its 24 rows, 5% slower on 18.

Both packs are verified first (the command line does it, as for label and report): only whole
packs are compared, never a bench folder or a summary.json on its own.

Exit status: 0 no regression; 1 any SLOWER row of our variants (impl "evpack"), or a pack that does
not verify; 2 bad input (not a pack, no bench data), with a one-line error on stderr.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..records.bench import BenchRow
from ..records.view import number

K = 2.0
RULE = 2  # what new packs record; 1: the global SDPA drift only
RULES = (1, 2)
SAME, FASTER, SLOWER, NEW, GONE, NA = "SAME", "FASTER", "SLOWER", "NEW", "GONE", "N/A"
MARKS = (SAME, FASTER, SLOWER, NEW, GONE, NA)
OURS, SDPA = "evpack", "sdpa"


class CompareInputError(Exception):
    """A pack that cannot be compared (message is one line)."""


KEY_FIELDS = ("impl", "variant", "config", "shape", "mode")


def row_problem(r) -> str | None:
    """Why a row of bench/summary.json cannot be compared (None when it can)."""
    if not isinstance(r, dict):
        return f"a row is {type(r).__name__}, not an object"
    bad = [k for k in KEY_FIELDS if k not in r or not (r[k] is None or isinstance(r[k], str))]
    if bad:
        return f"a row's {', '.join(bad)} is missing or not a string"
    for k in ("median_us", "iqr_us"):
        if r.get(k) is not None and not number(r[k]):
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


Row = BenchRow | Mapping


def _typed(rows: Sequence[Row]) -> list[BenchRow]:
    return [r if isinstance(r, BenchRow) else BenchRow.from_json(r) for r in rows]


def _key(r: BenchRow) -> tuple:
    return tuple(getattr(r, k) for k in KEY_FIELDS)


@dataclass(frozen=True)
class CompareEntry:
    """One joined row: its key fields, the mark, both medians and (for a timed pair) the change and noise."""

    impl: Any
    variant: Any
    config: Any
    shape: Any
    mode: Any
    mark: str
    median_a_us: Any = None
    median_b_us: Any = None
    delta_pct: float | None = None
    threshold_us: float | None = None
    note: str = ""  # why a pair could not be compared (N/A): the two statuses


@dataclass(frozen=True)
class Comparison:
    drift: float
    k: float
    rows: tuple[CompareEntry, ...]
    rule: int = RULE

    @property
    def counts(self) -> dict[str, int]:
        return {m: sum(1 for e in self.rows if e.mark == m) for m in MARKS}

    def to_json(self) -> dict[str, Any]:
        """`compare --format json`: the drift, K, every row (a note only where there is one) and the counts."""
        rows = [{k: v for k, v in asdict(e).items() if k != "note" or v} for e in self.rows]
        return {"drift": self.drift, "k": self.k, "rule": self.rule, "rows": rows, "counts": self.counts}


def sdpa_shifts(rows_a: Sequence[Row], rows_b: Sequence[Row]) -> dict[tuple, float]:
    """{key: |m_b - m_a| / m_a} of the SDPA rows both packs timed: what the drift terms are made of."""
    b = {_key(r): r for r in _typed(rows_b)}
    return {_key(r): abs(b[_key(r)].median_us - r.median_us) / r.median_us for r in _typed(rows_a)
            if r.impl == SDPA and r.timed and _key(r) in b and b[_key(r)].timed}


def _median_shift(shifts: dict[tuple, float], exclude: tuple | None = None) -> float:
    xs = [v for k, v in shifts.items() if k != exclude]
    return statistics.median(xs) if xs else 0.0


def _shape_max_shift(shifts: dict[tuple, float], key: tuple) -> float:
    return max((v for k, v in shifts.items() if k[3] == key[3] and k[4] == key[4] and k != key), default=0.0)


def drift(rows_a: Sequence[Row], rows_b: Sequence[Row], exclude: tuple | None = None) -> float:
    """Median relative shift of the SDPA rows both packs timed (0 if none); `exclude` leaves one row out."""
    return _median_shift(sdpa_shifts(rows_a, rows_b), exclude)


def shape_drift(rows_a: Sequence[Row], rows_b: Sequence[Row], key: tuple) -> float:
    """Rule 2: the largest relative shift of the SDPA rows of `key`'s shape and mode that both packs timed (that
    row left out; 0 if none)."""
    return _shape_max_shift(sdpa_shifts(rows_a, rows_b), key)


def threshold(a: BenchRow, b: BenchRow, drift_: float, k: float = K) -> float:
    return k * math.hypot(a.iqr_us or 0.0, b.iqr_us or 0.0) + drift_ * (a.median_us + b.median_us) / 2


def classify(a: BenchRow, b: BenchRow, drift_: float, k: float = K) -> str:
    d = b.median_us - a.median_us
    t = threshold(a, b, drift_, k)
    return SLOWER if d > t else FASTER if -d > t else SAME


def _entry(key: tuple, a: BenchRow | None, b: BenchRow | None, shifts: dict[tuple, float], dr: float, k: float,
           rule: int) -> CompareEntry:
    medians = {"median_a_us": a.median_us if a else None, "median_b_us": b.median_us if b else None}
    if a is None or b is None:
        return CompareEntry(*key, mark=NEW if a is None else GONE, **medians)
    if not (a.timed and b.timed):
        return CompareEntry(*key, mark=NA, note=f"{a.status} -> {b.status}", **medians)
    d = _median_shift(shifts, exclude=key) if key[0] == SDPA else dr  # an SDPA row: the other SDPA rows' drift
    if rule >= 2:
        d = max(d, _shape_max_shift(shifts, key))
    return CompareEntry(*key, mark=classify(a, b, d, k), delta_pct=100.0 * (b.median_us - a.median_us) / a.median_us,
                        threshold_us=threshold(a, b, d, k), **medians)


def compare_rows(rows_a: Sequence[Row], rows_b: Sequence[Row], k: float = K, rule: int = RULE) -> Comparison:
    """Every row of A and B joined on its key fields, marked by `rule` (RULES); the drift of the SDPA rows."""
    if rule not in RULES:
        raise ValueError(f"unknown compare rule {rule!r} (known: {', '.join(map(str, RULES))})")
    rows_a, rows_b = _typed(rows_a), _typed(rows_b)
    shifts = sdpa_shifts(rows_a, rows_b)  # once: every row's drift terms are read from it
    dr = _median_shift(shifts)
    a_by, b_by = {_key(r): r for r in rows_a}, {_key(r): r for r in rows_b}
    keys = list(a_by) + [k_ for k_ in b_by if k_ not in a_by]
    return Comparison(dr, k, tuple(_entry(key, a_by.get(key), b_by.get(key), shifts, dr, k, rule)
                                   for key in keys), rule)


def recorded_rule(value) -> int | None:
    """The rule a pack's bench/run.json `compare_rule` names: 1 when absent (packs made before rule 2), None when
    this code does not know it."""
    rule = value or 1
    return rule if rule in RULES else None


def regressions(diff: Comparison) -> list[CompareEntry]:
    return [e for e in diff.rows if e.impl == OURS and e.mark == SLOWER]


def exit_code(diff: Comparison) -> int:
    return 1 if regressions(diff) else 0


def drift_note(rule: int) -> str:
    """What the footer adds for a rule that takes a row's own shape into account."""
    return ", at least the largest shift of SDPA's rows of the row's own shape and mode" if rule >= 2 else ""


def _fmt(x, spec=".2f") -> str:
    return "-" if x is None else format(x, spec)


def render(diff: Comparison, only_changed: bool = False, markdown: bool = True) -> str:
    head = ["mark", "impl", "variant", "config", "shape", "mode", "A µs", "B µs", "Δ %", "noise µs"]
    lines = []
    for e in diff.rows:
        if only_changed and e.mark == SAME:
            continue
        lines.append([e.mark + (f" ({e.note})" if e.note else ""), e.impl, e.variant, e.config or "-", e.shape, e.mode,
                      _fmt(e.median_a_us), _fmt(e.median_b_us), _fmt(e.delta_pct, "+.1f"), _fmt(e.threshold_us)])
    c = diff.counts
    foot = (f"{c[SAME]} same, {c[FASTER]} faster, {c[SLOWER]} slower, {c[NEW]} new, {c[GONE]} gone, "
            f"{c[NA]} n/a; noise rule |Δ| > {diff.k:g}·sqrt(iqr_a²+iqr_b²) + drift·median, "
            f"drift (SDPA rows) {100 * diff.drift:.2f}%{drift_note(diff.rule)}")
    if not lines:
        return foot
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(cells) + " |" for cells in lines]
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(head, *lines, strict=True)]
        out = ["  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)) for row in [head, *lines]]
    return "\n".join(out + ["", foot])
