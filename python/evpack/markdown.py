"""Pack values into Markdown: every value a report shows goes through one of these (standard library only).

A pack is data from a machine or a pull request: a GPU name, a compiler's error line, a variant's
description, a reason. None of it may become Markdown structure, HTML, a link or an image, in report.md and
comment.md on GitHub (GFM) or in report.html (markdown-it). So:

  text(v)      inline text: every character that could open a construct is backslash-escaped (CommonMark:
               any escaped ASCII punctuation is literal), line breaks become spaces, control and bidi
               characters become U+FFFD; what renders is the value's text (plus a word joiner after @)
  code(v)      a code span (identifiers, tool lines): a backtick fence longer than any run inside, line
               breaks become spaces; in_table=True also escapes the pipes a GFM table would split on
  fence(lines) a fenced code block whose fence no line can close
  table(h, r)  a GFM table of cells already made by text() or code(in_table=True)

Autolinks are broken too (GFM links URLs and e-mail addresses in plain text): `://` and `www.` by a
backslash, `@` by an invisible word joiner after it (which also keeps GitHub from reading a mention).
"""
from __future__ import annotations

import re
import unicodedata

# Always escaped: the inline constructs (code, emphasis, links, images, autolinks, raw HTML, entities,
# GFM tables, strikethrough and GitHub's math) and the escape character itself.
_ALWAYS = frozenset("\\`*[]<>!|&~$")
# GFM links e-mail addresses after parsing (escapes do not stop it) and GitHub turns @name into a mention:
# an invisible word joiner after every @ stops both (neither a domain nor a user name starts with it).
WORD_JOINER = "\u2060"
# Where a value starts a line (a list item's text, say) it could open a block: a list item, a heading, a
# thematic break or a setext underline. Those need the marker followed by a space, the end or more of itself.
_BLOCK_START = re.compile(r"^(?:[-+=#](?![^\W_])|(\d{1,9})[.)](?: |$))")
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_LINE_BREAK = re.compile(r"\r\n|[\r\n\u2028\u2029\x85\x0b\x0c]")
_LONG_LIMIT = 100_000  # longer values are cut (a report must stay a page, whatever a pack holds)


def _clean(value: object) -> str:
    """The value as one line: line breaks are spaces, control/bidi/format characters U+FFFD."""
    s = _LINE_BREAK.sub(" ", str(value)[:_LONG_LIMIT]).replace("\t", " ")
    return "".join("\ufffd" if (ch in _BIDI or unicodedata.category(ch) in ("Cc", "Cs")) else ch for ch in s)


def text(value: object) -> str:
    """Markdown inline text that renders as exactly `value` (whitespace runs as one space)."""
    s = " ".join(_clean(value).split())
    out: list[str] = []
    n = len(s)
    for i, ch in enumerate(s):
        if ch in _ALWAYS:
            out.append("\\" + ch)
        elif ch == "_":  # between two letters or digits `_` never delimits emphasis: left as it is
            intraword = 0 < i < n - 1 and s[i - 1].isalnum() and s[i + 1].isalnum()
            out.append("_" if intraword else "\\_")
        elif ch == "@":
            out.append("@" + WORD_JOINER)
        elif ch == ":" and s.startswith("//", i + 1):  # scheme://: no autolink
            out.append("\\:")
        elif ch == "." and i >= 3 and s[i - 3:i].lower() == "www" and (i == 3 or not s[i - 4].isalnum()):
            out.append("\\.")  # www.: no autolink
        else:
            out.append(ch)
    escaped = "".join(out)
    m = _BLOCK_START.match(s)
    if m:  # "\- x", "\# x", "1\. x" (the characters up to there are never escaped: same place in both)
        at = len(m.group(1)) if m.group(1) else 0
        escaped = escaped[:at] + "\\" + escaped[at:]
    return escaped


def code(value: object, *, in_table: bool = False) -> str:
    """A code span showing `value` literally; '' for an empty value. In a table, pipes are escaped (GFM and
    markdown-it unescape them before the span is parsed); a value with a backslash before a pipe cannot
    be written as a span there, and is written as text() instead."""
    s = _clean(value)
    if not s:
        return ""
    if in_table and "|" in s:
        if "\\|" in s:
            return text(value)
        s = s.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", s)), default=0)
    tick = "`" * (longest + 1)
    pad = " " if (s[0] == "`" or s[-1] == "`" or (s[0] == " " and s[-1] == " " and s.strip())) else ""
    return f"{tick}{pad}{s}{pad}{tick}"


def fence(lines: list[str], info: str = "") -> list[str]:
    """A fenced code block of `lines` (each kept as one line); the fence is longer than any backtick run."""
    body = [_clean(ln) for ln in lines]
    longest = max((len(run) for ln in body for run in re.findall(r"`+", ln)), default=0)
    tick = "`" * max(3, longest + 1)
    return [tick + re.sub(r"[^A-Za-z0-9_+-]", "", info), *body, tick]


def table(head: list[str], rows: list[list[str]], align: list[str] | None = None) -> list[str]:
    """A GFM table; every cell must come from text(), code(in_table=True) or a constant."""
    rule = "|" + "|".join({"r": "---:", "c": ":---:"}.get(a, "---") for a in (align or ["l"] * len(head))) + "|"
    return ["| " + " | ".join(head) + " |", rule] + ["| " + " | ".join(r) + " |" for r in rows]


def short(value: object, limit: int) -> str:
    """The value on one line, cut to `limit` characters with an ellipsis (before escaping: never cuts an escape)."""
    t = " ".join(_clean(value).split())
    return t if len(t) <= limit else t[: limit - 1].rstrip() + "…"
