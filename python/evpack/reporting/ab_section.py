"""The same-run A/B against the base (bench/ab.json) as report blocks: headline, rule, the rows that are not
SAME, then every compared row in a collapsed part. Every pack value escaped (evpack.markdown)."""
from __future__ import annotations

from pathlib import Path

from ..markdown import code, short, table, text
from ..timing import ab as ab_mod
from .blocks import Block, Details, Md
from .decision import base_name

_ORDER = {ab_mod.SLOWER: 0, ab_mod.FASTER: 1, ab_mod.UNSURE: 2, ab_mod.SAME: 3}
HEAD = ["kernel", "shape", "mode", "base µs (± IQR)", "head µs (± IQR)", "Δ time", "CI", "verdict", "why"]


def _us(side: object) -> str:
    if not isinstance(side, dict) or not isinstance(side.get("median_us"), (int, float)):
        return "-"
    iqr = side.get("iqr_us")
    med = side["median_us"]
    return f"{med:.2f}\u00a0±\u00a0{iqr:.2f}" if isinstance(iqr, (int, float)) else f"{med:.2f}"  # never broken


def _pct(x: object) -> str:
    return f"{x - 1:+.1%}" if isinstance(x, (int, float)) else "-"


def _row(e: dict, *, why: bool = True) -> list[str]:
    ci = "-" if e.get("ci_lo") is None else f"{_pct(e.get('ci_lo'))}..{_pct(e.get('ci_hi'))}"
    cells = [code(f"{e.get('variant')}/{e.get('config')}", in_table=True), text(e.get("shape")), text(e.get("mode")),
             _us(e.get("base")), _us(e.get("head")), _pct(e.get("ratio")), ci, text(e.get("verdict"))]
    return cells + [text(short(e.get("reason") or "", 160))] if why else cells


def ab_blocks(data: dict) -> list[Block]:
    """The A/B section of a loaded (and, for a sharded run, merged) ab.json."""
    head = f"{str(data.get('head_commit'))[:12]}" + (" with uncommitted changes" if data.get("head_dirty") else "")
    title = ("self-check: HEAD against itself" if data.get("self_check")
             else f"head {code(head)} against base {base_name(data)}")
    lines = [f"### A/B in one run: {title}", ""]
    if data.get("status") != "pass":
        lines += [f"**A/B {text(data.get('status'))}**: {text(short(data.get('reason') or '', 300))}. The head's "
                  "benchmark below is unaffected; no row was compared."]
        return [Md("\n".join(lines))]
    rows = [e for e in data.get("rows") or [] if isinstance(e, dict)]
    counts = data.get("counts") or {}
    tally = ", ".join(f"{counts[v]} {v}" for v in ab_mod.VERDICTS if counts.get(v))
    same = sum(1 for e in rows if e.get("verdict") == ab_mod.SAME)
    rule = data.get("rule") or {}
    lines += [f"{len(rows)} rows compared: {tally or 'none'}" + (f"; SAME rate {same / len(rows):.1%}" if rows else "")
              + f". Binaries: base {code(str(data.get('base_so_sha256'))[:12])}, "
              f"head {code(str(data.get('head_so_sha256'))[:12])}.", ""]
    try:
        lines += [f"Rule: time ratio = median(head) / median(base), CI = order-statistic CIs of both medians "
                  f"(joint >= {rule['conf']:.0%}); SLOWER / FASTER when the CI excludes 1 and the ratio is beyond "
                  f"±{rule['min_effect']:.0%}, SAME when the CI lies inside ±{rule['min_effect']:.0%}, else UNSURE "
                  f"(or fewer than {int(rule['min_n'])} samples).", ""]
    except (KeyError, TypeError, ValueError):
        lines += [f"Rule: {text(rule.get('name') if isinstance(rule, dict) else rule)}.", ""]
    notable = sorted((e for e in rows if e.get("verdict") != ab_mod.SAME),
                     key=lambda e: (_ORDER.get(e.get("verdict"), 9), str(e.get("key"))))
    lines += table(HEAD, [_row(e) for e in notable]) if notable else ["Every compared row is SAME."]
    for what, label in (("new", "New on the head (not compared)"), ("removed", "Removed from the base (not compared)")):
        entries = [e for e in data.get(what) or [] if isinstance(e, dict)]
        if entries:
            keys = sorted({f"{e.get('variant')}/{e.get('config')}" for e in entries})
            lines += ["", f"{label}, {len(entries)} rows: {', '.join(code(k) for k in keys)}."]
    out: list[Block] = [Md("\n".join(lines))]
    if rows:
        every = table(HEAD[:-1], [_row(e, why=False) for e in sorted(rows, key=lambda e: str(e.get("key")))])
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
