"""A report as blocks: Markdown runs, collapsible parts and plots (standard library only).

The structure a report needs beyond Markdown (a collapsed <details> part, an embedded plot) is a block,
never raw HTML inside the Markdown: report.md writes a <details> block with an escaped summary around
blank lines (GitHub renders the Markdown inside), report.html gets each part from its jinja2 template and
renders only the Markdown runs, with raw HTML off.

Stage sections that are Markdown text are read into blocks by from_markdown(): the `<details><summary>S
</summary>` ... `</details>` lines a section writes become a Details block, and a table longer than
LONG_TABLE_ROWS rows outside one is collapsed into its own.
"""
from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

LONG_TABLE_ROWS = 16
_OPEN = re.compile(r"^<details><summary>(.*)</summary>\s*$")
_CLOSE = re.compile(r"^</details>\s*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}#{1,6} +(.*?)(?: +#+)? *$")


@dataclass(frozen=True)
class Md:
    """Markdown made with evpack.markdown's helpers: no raw HTML, no link or image from a value."""

    text: str


@dataclass(frozen=True)
class Details:
    """A collapsed part: the summary is plain text (escaped wherever it is written)."""

    summary: str
    body: tuple[Block, ...]


@dataclass(frozen=True)
class Figure:
    """A PNG of the pack, by its path inside the pack (report.html embeds it; report.md leaves it out)."""

    path: str
    caption: str


Block = Md | Details | Figure


def to_markdown(blocks: Iterable[Block]) -> str:
    """The blocks as Markdown (report.md, comment.md): each separated by a blank line."""
    parts: list[str] = []
    for b in blocks:
        if isinstance(b, Md):
            if b.text.strip():
                parts.append(b.text.strip("\n"))
        elif isinstance(b, Details):
            inner = to_markdown(b.body)
            parts.append(f"<details><summary>{html.escape(b.summary)}</summary>\n\n{inner}\n\n</details>")
    return "\n\n".join(parts)


def plain(md_inline: str) -> str:
    """The text of a line of Markdown written by this package (escapes undone, code and strong marks dropped)."""
    return re.sub(r"\\(.)|[`*]", lambda m: m.group(1) or "", md_inline).strip()


def _flush(out: list[Block], lines: list[str]) -> None:
    text = "\n".join(lines).strip("\n")
    if text.strip():
        out.append(Md(text))
    lines.clear()


def from_markdown(md: str, title: str = "table", min_rows: int = LONG_TABLE_ROWS) -> list[Block]:
    """Blocks of a Markdown section: its <details> lines as Details, long tables outside one collapsed.

    A collapsed table's summary names it by the nearest heading above (else `title`) and its row count.
    Fenced code is left alone (a SASS line may start with '|' or '<details>'). An unclosed <details> ends
    with the section.
    """
    stack: list[tuple[str, list[Block]]] = []
    out: list[Block] = []
    lines: list[str] = []
    heading, fence, i = title, "", 0
    src = md.split("\n")
    while i < len(src):
        ln = src[i]
        m = _FENCE.match(ln)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not ln.strip(" `~"):
                fence = ""
            lines.append(ln)
            i += 1
            continue
        if m:
            fence = m.group(1)
            lines.append(ln)
            i += 1
            continue
        opened, closed = _OPEN.match(ln), _CLOSE.match(ln)
        if opened:
            _flush(out, lines)
            stack.append((opened.group(1).strip(), out))
            out = []
            i += 1
            continue
        if closed and stack:
            _flush(out, lines)
            summary, parent = stack.pop()
            parent.append(Details(summary, tuple(out)))
            out = parent
            i += 1
            continue
        h = _HEADING.match(ln)
        if h:
            heading = plain(h.group(1)) or heading
        if not ln.startswith("|"):
            lines.append(ln)
            i += 1
            continue
        j = i
        while j < len(src) and src[j].startswith("|"):
            j += 1
        block, body_rows = src[i:j], j - i - 2
        if not stack and body_rows > min_rows:
            _flush(out, lines)
            out.append(Details(f"{heading} (table of {body_rows} rows)", (Md("\n".join(block)),)))
        else:
            lines += block
        i = j
    _flush(out, lines)
    while stack:
        summary, parent = stack.pop()
        parent.append(Details(summary, tuple(out)))
        out = parent
    return out


def section_blocks(section: str | Sequence[Block], title: str) -> list[Block]:
    """A stage hook's section (Markdown text or blocks) as blocks, long tables collapsed."""
    if isinstance(section, str):
        return from_markdown(section, title)
    out: list[Block] = []
    for b in section:
        out += from_markdown(b.text, title) if isinstance(b, Md) else [b]
    return out


def figure_paths(blocks: Iterable[Block]) -> set[str]:
    """Every figure path the blocks place (nested parts included)."""
    out: set[str] = set()
    for b in blocks:
        if isinstance(b, Figure):
            out.add(b.path)
        elif isinstance(b, Details):
            out |= figure_paths(b.body)
    return out
