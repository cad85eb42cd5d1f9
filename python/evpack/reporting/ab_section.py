"""The same-run A/B against the base (bench/ab.json) as report blocks: headline, rule, the rows that are not
SAME, then every compared row in a collapsed part. Every pack value escaped (evpack.markdown)."""
from __future__ import annotations

from pathlib import Path

from ..markdown import code, short, table, text
from ..records.bench import AbRecord, AbRow, AbSide
from ..records.view import number
from ..timing import ab as ab_mod
from .blocks import Block, Details, Md
from .decision import base_name

_ORDER = {ab_mod.SLOWER: 0, ab_mod.FASTER: 1, ab_mod.UNSURE: 2, ab_mod.SAME: 3}
HEAD = ["kernel", "shape", "mode", "base µs (± IQR)", "head µs (± IQR)", "Δ time", "CI", "verdict", "why"]


def _us(side: AbSide) -> str:
    if not number(side.median_us):
        return "-"
    med, iqr = side.median_us, side.iqr_us
    return f"{med:.2f}\u00a0±\u00a0{iqr:.2f}" if number(iqr) else f"{med:.2f}"  # never broken


def _pct(x: object) -> str:
    return f"{x - 1:+.1%}" if number(x) else "-"


def _row(e: AbRow, *, why: bool = True) -> list[str]:
    ci = "-" if e.ci_lo is None else f"{_pct(e.ci_lo)}..{_pct(e.ci_hi)}"
    cells = [code(e.kernel, in_table=True), text(e.shape), text(e.mode), _us(e.base), _us(e.head), _pct(e.ratio),
             ci, text(e.verdict)]
    return cells + [text(short(e.reason or "", 160))] if why else cells


def _rule_line(ab: AbRecord) -> str:
    r = ab.rule
    if not all(number(x) for x in (r.conf, r.min_effect, r.min_n)):
        stored = ab.raw.get("rule")
        return f"Rule: {text(r.name if isinstance(stored, dict) else stored)}."
    line = (f"Rule: time ratio = median(head) / median(base), CI = order-statistic CIs of both medians "
            f"(joint >= {r.conf:.0%}); SLOWER / FASTER when the CI excludes 1 and the ratio is beyond "
            f"±{r.min_effect:.0%}, SAME when the CI lies inside ±{r.min_effect:.0%}, else UNSURE "
            f"(or fewer than {int(r.min_n)} samples).")
    if r.rule_version >= 2 and number(r.fdr_q):
        retimed = len(ab.confirm_keys) if isinstance(ab.confirm_keys, list) else 0
        which = "a SLOWER or FASTER row" if r.rule_version >= 3 else "a SLOWER row"
        line += (f" Rank-sum p-values under Benjamini-Hochberg at {r.fdr_q:g} over the rows; {which} must "
                 f"be confirmed by a second same-run round ({retimed} re-timed).")
    return line


def ab_blocks(data: dict) -> list[Block]:
    """The A/B section of a loaded (and, for a sharded run, merged) ab.json."""
    ab = AbRecord.from_json(data)
    head = f"{str(ab.head_commit)[:12]}" + (" with uncommitted changes" if ab.head_dirty else "")
    title = ("self-check: HEAD against itself" if ab.self_check
             else f"head {code(head)} against base {base_name(ab)}")
    lines = [f"### A/B in one run: {title}", ""]
    if not ab.passed:
        lines += [f"**A/B {text(ab.status)}**: {text(short(ab.reason or '', 300))}. The head's "
                  "benchmark below is unaffected; no row was compared."]
        return [Md("\n".join(lines))]
    rows = ab.rows
    tally = ", ".join(f"{ab.count(v)} {v}" for v in ab_mod.VERDICTS if ab.count(v))
    same = ab.count(ab_mod.SAME)
    lines += [f"{len(rows)} rows compared: {tally or 'none'}" + (f"; SAME rate {same / len(rows):.1%}" if rows else "")
              + f". Binaries: base {code(str(ab.base_so_sha256)[:12])}, "
              f"head {code(str(ab.head_so_sha256)[:12])}.", "", _rule_line(ab), ""]
    notable = sorted((e for e in rows if e.verdict != ab_mod.SAME), key=lambda e: (_ORDER.get(e.verdict, 9), str(e.key)))
    lines += table(HEAD, [_row(e) for e in notable]) if notable else ["Every compared row is SAME."]
    for entries, label in ((ab.new, "New on the head (not compared)"), (ab.removed, "Removed from the base (not compared)")):
        if entries:
            keys = sorted({e.kernel for e in entries})
            lines += ["", f"{label}, {len(entries)} rows: {', '.join(code(k) for k in keys)}."]
    out: list[Block] = [Md("\n".join(lines))]
    if rows:
        every = table(HEAD[:-1], [_row(e, why=False) for e in sorted(rows, key=lambda e: str(e.key))])
        out.append(Details(f"All {len(rows)} compared rows of the A/B", (Md("\n".join(every)),)))
    return out


def section(stage_dir: Path) -> list[Block]:
    """The A/B blocks of a bench folder ([] when the run had no baseline)."""
    from ..timing.ab_stage import load

    try:
        data = load(stage_dir)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [Md(f"A/B: {code(ab_mod.AB_FILE)} unreadable ({text(type(exc).__name__)})")]
    return [] if data is None else ab_blocks(data)
