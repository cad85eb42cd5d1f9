"""report.html: the report's blocks in a jinja2 template, the Markdown runs rendered by markdown-it-py, plots embedded.

The page is self-contained (styles inline, images as data: URIs, no script, no link out), so it reads
offline. Nothing from a pack can become an element or an attribute:
  - markdown-it-py runs in CommonMark mode with GFM tables, raw HTML off and the rules that make links,
    images, autolinks and link references disabled (a value that reaches it unescaped still renders as text);
  - the collapsed parts (<details>/<summary>) and the figures come from the template, autoescape on;
  - the only attributes the renderer adds are its own: a status class on table cells that hold a status
    word, a wrap class on cells and code spans with long words, and the scroll wrapper around each table.
"""
from __future__ import annotations

import base64
import re
import struct
from collections.abc import Sequence
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from ..records.migrations import read_pack_view
from ..stages.base import read_json
from . import RENDERER_PINS
from .blocks import Block, Details, Figure, Md

TEMPLATE = "report.html.j2"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
LONG_CODE = 40  # characters: a longer code span or word may wrap anywhere
OFF_RULES = ("html_block", "html_inline", "link", "image", "autolink", "reference")
# A table cell that holds a status word gets the class of its colour ("status pass" ...).
STATUS_CLASS = {"PASS": "pass", "FAIL": "fail", "ERROR": "error", "SKIPPED": "skipped", "SAME": "pass",
                "FASTER": "pass", "SLOWER": "fail", "UNSURE": "unsure"}
_STATUS_CELL = re.compile(r"^(?:\*\*)?(?:(PASS|FAIL|ERROR|SKIPPED|SAME|FASTER|SLOWER|UNSURE)(?![\w-])"
                          r"|(pass|fail|error|skipped)(?::|$))")


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk; ValueError when the bytes are not a PNG."""
    if data[:8] != PNG_SIGNATURE or data[12:16] != b"IHDR":
        raise ValueError("not a PNG file")
    return struct.unpack(">II", data[16:24])


def _cell_classes(state) -> None:
    """Core rule: the class of a cell whose text starts with a status word; `wrap` on a cell holding a word too
    long for a column (a mangled symbol), so that it breaks anywhere instead of widening the table."""
    tokens = state.tokens
    for i, tok in enumerate(tokens[:-1]):
        if tok.type == "td_open" and tokens[i + 1].type == "inline":
            content = tokens[i + 1].content
            m = _STATUS_CELL.match(content)
            if m:
                tok.attrJoin("class", "status " + STATUS_CLASS[(m.group(1) or m.group(2)).upper()])
            if any(len(word) > LONG_CODE for word in content.split()):
                tok.attrJoin("class", "wrap")


def _code_inline(self, tokens, idx, options, env) -> str:
    """A long code span (a kernel name, a tool line) may wrap anywhere; a short one keeps its table column wide."""
    if len(tokens[idx].content) > LONG_CODE:
        tokens[idx].attrJoin("class", "long")
    return type(self).code_inline(self, tokens, idx, options, env)


_COMMA = re.compile(r",(?=\S)")


def _text(self, tokens, idx, options, env) -> str:
    """Plain text as markdown-it renders it (escaped); then a break opportunity after each comma inside a word."""
    return _COMMA.sub(",<wbr>", type(self).text(self, tokens, idx, options, env))


def _wrapped(open_: bool):
    def render(self, tokens, idx, options, env) -> str:
        tag = self.renderToken(tokens, idx, options, env)
        return f'<div class="table-wrap">\n{tag}' if open_ else f"{tag}</div>\n"
    return render


@lru_cache(maxsize=1)
def _markdown():
    from markdown_it import MarkdownIt  # noqa: PLC0415 (the renderer is imported only where it renders)

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table")
    md.disable(list(OFF_RULES))
    md.core.ruler.push("cell_classes", _cell_classes)
    md.add_render_rule("code_inline", _code_inline)
    md.add_render_rule("text", _text)
    md.add_render_rule("table_open", _wrapped(True))
    md.add_render_rule("table_close", _wrapped(False))
    return md


def markdown_to_html(md: str) -> str:
    """Markdown of this package's reports to HTML: raw HTML, links and images off."""
    return _markdown().render(md)


def generator() -> str:
    """The renderer versions actually used (recorded in the page: the rendering is part of the pack)."""
    from ..version import __version__ as evpack_version

    versions = []
    for dist in ("markdown-it-py", "jinja2"):
        try:
            versions.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{dist} unknown (pinned {RENDERER_PINS[dist]})")
    return f"evpack {evpack_version}; " + "; ".join(versions)


def _environment():
    import jinja2  # noqa: PLC0415

    return jinja2.Environment(loader=jinja2.PackageLoader("evpack.reporting", "templates"),
                              autoescape=jinja2.select_autoescape(default=True), keep_trailing_newline=True,
                              undefined=jinja2.StrictUndefined)


def _figure(pack_dir: Path, fig: Figure) -> dict:
    path = (pack_dir / fig.path).resolve()
    try:
        if not path.is_relative_to(pack_dir.resolve()):
            raise ValueError("outside the pack")
        data = path.read_bytes()
        width, height = png_size(data)
    except (OSError, ValueError) as exc:
        return {"kind": "missing", "caption": fig.caption, "path": fig.path, "why": str(exc)}
    return {"kind": "figure", "caption": fig.caption, "path": fig.path, "width": width, "height": height,
            "data": base64.b64encode(data).decode("ascii")}


def _context(pack_dir: Path, blocks: Sequence[Block]) -> list[dict]:
    import markupsafe  # noqa: PLC0415

    out = []
    for b in blocks:
        if isinstance(b, Md):
            out.append({"kind": "md", "html": markupsafe.Markup(markdown_to_html(b.text))})
        elif isinstance(b, Details):
            out.append({"kind": "details", "summary": b.summary, "body": _context(pack_dir, b.body)})
        elif isinstance(b, Figure):
            out.append(_figure(pack_dir, b))
    return out


def render_html(pack_dir: Path, blocks: Sequence[Block]) -> str:
    pj = read_pack_view(read_json(pack_dir / "pack.json"))
    label = str(pj.label)
    verdict = label.split(":")[-1]
    return _environment().get_template(TEMPLATE).render(
        pack_id=str(pj.pack_id), label=label, verdict=verdict if verdict in ("complete", "partial", "failed")
        else "unknown", generator=generator(), blocks=_context(pack_dir, blocks))
