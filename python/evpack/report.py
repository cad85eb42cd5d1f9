"""report.md (for a PR comment) and report.html (self-contained, plots embedded) from pack files only."""
from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from .gates import STAGE_GATES
from .model import StageOutcome
from .provenance import report_line
from .stages.base import read_json, write_text
from .stages.order import STAGE_ORDER, stage_module

ICON = {"pass": "PASS", "fail": "FAIL", "error": "ERROR", "skipped": "SKIPPED"}


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_md(pack_dir: Path) -> str:
    pj = read_json(pack_dir / "pack.json")
    env = read_json(pack_dir / "env.json")
    git = pj["git"]
    lines = [
        "<!-- evidence-pack -->",
        f"# Evidence pack `{pj['pack_id']}`: **{pj['label']}**",
        "",
        f"Labels: {', '.join(f'`{x}`' for x in pj['labels'])}",
        "",
        f"- commit `{git['commit']}`{' (dirty)' if git['dirty'] else ''}; created {pj['created_utc']}",
        f"- GPU: {env.get('gpu_name') or 'none'}; driver {env.get('driver_version') or '-'}; "
        f"torch {env.get('torch_version') or '-'} (CUDA {env.get('cuda_version') or '-'})",
        "- toolchain: " + ", ".join(f"{k} {v or '-'}" for k, v in pj["toolchain"].items()),
        f"- binary sha256: `{pj.get('so_sha256') or '-'}`",
    ]
    signature = report_line(pj)  # None for packs made before signed provenance: their report is unchanged
    if signature:
        lines.append(signature)
    for w in pj.get("warnings", []):
        lines.append(f"- WARNING: {w}")
    zd = pj.get("zero_delta")
    if zd:
        lines.append(f"- zero-delta: {'same content as' if zd['same'] else 'differs from'} pack "
                     f"`{zd['previous_pack']}` of the same commit (timestamps excluded)")
    lines += ["", "## Gates", "", "| gate | status | reason |", "|---|---|---|"]
    for g, v in pj["gates"].items():
        lines.append(f"| {g} | {ICON[v['status']]} | {_cell(v['reason'])} |")
    lines += ["", "## Stages", "", "| stage | status | time | reason |", "|---|---|---|---|"]
    for s, v in pj["stages"].items():
        dur = v.get("duration_s")
        lines.append(f"| {s} | {ICON[v['status']]} | {'-' if dur is None else f'{dur:.1f} s'} | "
                     f"{_cell(v['reason'])} |")
    for s in STAGE_ORDER:
        if s not in pj["stages"]:
            continue
        mod = stage_module(s)
        if not hasattr(mod, "report_md"):
            continue
        outcome = StageOutcome.from_json(read_json(pack_dir / s / "outcome.json"))  # the checked outcome
        if outcome.status == "skipped":
            continue
        try:
            section = mod.report_md(pack_dir / s, outcome).strip()
        except Exception as exc:  # a broken section must not cost the whole report
            section = f"(this section could not be rendered: {type(exc).__name__}: {exc})"
        if section:
            lines += ["", f"## {s}", "", section]
    lines += ["", f"Every result above is re-derivable: `python -m evpack verify {pj['pack_id']}`.", ""]
    return "\n".join(lines)


def figures(pack_dir: Path) -> list[Path]:
    out = []
    pj = read_json(pack_dir / "pack.json")
    for s in STAGE_ORDER:
        mod = stage_module(s)
        if s in pj["stages"] and hasattr(mod, "figures") and (pack_dir / s).is_dir():
            out += [p for p in mod.figures(pack_dir / s) if p.exists()]
    return out


def _inline(text: str) -> str:
    t = html.escape(text)
    t = re.sub(r"`([^`]+)`", r"<code>\1</code>", t)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", t)


def md_to_html(md: str) -> str:
    """The markdown subset report_md uses: headings, tables, lists, fenced code, paragraphs."""
    out, i, lines = [], 0, md.splitlines()
    while i < len(lines):
        ln = lines[i]
        if ln.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append("<pre>" + html.escape("\n".join(lines[i + 1:j])) + "</pre>")
            i = j + 1
            continue
        if ln.startswith("<!--"):
            i += 1
            continue
        m = re.match(r"^(#{1,4}) (.*)", ln)
        if m:
            n = len(m.group(1))
            out.append(f"<h{n}>{_inline(m.group(2))}</h{n}>")
        elif ln.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(lines[i])
                i += 1
            cells = [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", r)[1:-1]] for r in rows]
            body = [c for c in cells[1:] if not all(set(x) <= set("-: ") for x in c)]
            out.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in cells[0]) + "</tr>"
                       + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in body)
                       + "</table>")
            continue
        elif ln.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{_inline(lines[i][2:])}</li>")
                i += 1
            out.append("<ul>" + "".join(items) + "</ul>")
            continue
        elif ln.strip():
            out.append(f"<p>{_inline(ln)}</p>")
        i += 1
    return "\n".join(out)


CSS = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
       "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 7px;"
       "font-size:13px;text-align:left}pre{background:#f4f4f4;padding:8px;overflow-x:auto}"
       "img{max-width:100%;border:1px solid #ddd;margin:6px 0}")


def render_html(pack_dir: Path, md: str) -> str:
    imgs = []
    for p in figures(pack_dir):
        data = base64.b64encode(p.read_bytes()).decode("ascii")
        rel = p.relative_to(pack_dir).as_posix()
        imgs.append(f'<figure><img alt="{html.escape(rel)}" src="data:image/png;base64,{data}">'
                    f"<figcaption>{html.escape(rel)}</figcaption></figure>")
    plots = ("<h2>Plots</h2>" + "".join(imgs)) if imgs else ""
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>evidence pack</title>"
            f"<style>{CSS}</style></head><body>{md_to_html(md)}{plots}</body></html>\n")


def write_reports(pack_dir: Path, out_dir: Path | None = None) -> tuple[Path, Path]:
    out_dir = out_dir or pack_dir
    md = render_md(pack_dir)
    write_text(out_dir / "report.md", md)
    write_text(out_dir / "report.html", render_html(pack_dir, md))
    return out_dir / "report.md", out_dir / "report.html"


__all__ = ["render_md", "render_html", "write_reports", "md_to_html", "STAGE_GATES"]
