"""report.html: report.md rendered by markdown-it-py into a jinja2 template, the plots embedded.

The page is self-contained (styles inline, images as data: URIs, no script, no link out), so it reads
offline. markdown-it-py runs in CommonMark mode with GFM tables and raw HTML passed through, so the
<details>/<summary> blocks and <br> of report.md render as elements, never as text.
"""
from __future__ import annotations

import base64
import struct
from importlib import metadata
from pathlib import Path

from ..stages.base import read_json
from ..stages.order import STAGE_ORDER, stage_module
from . import RENDERER_PINS

TEMPLATE = "report.html.j2"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk; ValueError when the bytes are not a PNG."""
    if data[:8] != PNG_SIGNATURE or data[12:16] != b"IHDR":
        raise ValueError("not a PNG file")
    return struct.unpack(">II", data[16:24])


def figures(pack_dir: Path) -> list[Path]:
    """The PNG files the stages offer for the report (stage hook `figures`), in pipeline order."""
    stages = read_json(pack_dir / "pack.json")["stages"]
    out: list[Path] = []
    for s in STAGE_ORDER:
        mod = stage_module(s)
        if s in stages and hasattr(mod, "figures") and (pack_dir / s).is_dir():
            out += [p for p in mod.figures(pack_dir / s) if p.is_file()]
    return out


def markdown_to_html(md: str) -> str:
    from markdown_it import MarkdownIt  # noqa: PLC0415 (the renderer is imported only where it renders)

    return MarkdownIt("commonmark", {"html": True}).enable("table").render(md)


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


def render_html(pack_dir: Path, md: str) -> str:
    import markupsafe  # noqa: PLC0415

    pj = read_json(pack_dir / "pack.json")
    figs = []
    for p in figures(pack_dir):
        data = p.read_bytes()
        width, height = png_size(data)
        figs.append({"caption": p.relative_to(pack_dir).as_posix(), "width": width, "height": height,
                     "data": base64.b64encode(data).decode("ascii")})
    return _environment().get_template(TEMPLATE).render(
        pack_id=pj["pack_id"], label=pj["label"], verdict=pj["label"].split(":")[-1],
        generator=generator(), body=markupsafe.Markup(markdown_to_html(md)), figures=figs)
