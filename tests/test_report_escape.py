"""Pack values in the reports are data, never markup: properties over arbitrary (hypothesis) and hostile strings.

Two renderers read what evpack.markdown writes: markdown-it-py as report.html uses it, and cmark-gfm, the
parser behind GitHub's Markdown (cmarkgfm, with GitHub's extensions: tables, autolinks, strikethrough), for
report.md and comment.md on a pull request. For any value:
  - text(v) renders as one paragraph (or one table cell) holding exactly v's text, with no element inside;
  - code(v) renders as one code span holding v; fence(lines) as one code block holding the lines;
  - a whole report of a pack whose every free-text field is v has the same elements and attributes as the
    report of the same pack with a plain value in those fields (html.parser), and shows v as text.
cmark-gfm runs with raw HTML allowed (the unsafe option): GitHub filters HTML after parsing, this test does not
count on it.
"""
from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from evpack.markdown import WORD_JOINER, code, fence, table, text
from evpack.reporting.report_html import markdown_to_html
from evpack.reporting.write import write_reports

cmarkgfm = pytest.importorskip("cmarkgfm", reason="cmarkgfm (GitHub's cmark-gfm) is in the test extra")
from cmarkgfm.cmark import Options  # noqa: E402

HOSTILE = [
    "<script>window.__pwned=1</script>",
    '<img src=x onerror="window.__pwned=1">',
    "[click](javascript:window.__pwned=1)",
    "![pwn](https://evil.example/x.png)",
    "<https://evil.example/auto>",
    "https://evil.example/bare www.evil.example mail me@evil.example @octocat",
    '#error "<img src=x onerror=alert(1)>"',
    "</details><details open><summary>x</summary>",
    "| a | b |\n|---|---|\n| c | d |",
    "line one\n\n- item\n# heading\n```\ncode\n```",
    "**bold** _em_ ~~del~~ `tick` $math$ &lt;entity&gt; &amp; \\*",
    "[ref]: https://evil.example\n[ref]",
    "a\\|b `c|d` e\\",
    "\u202eevil bidi\u2066 \x00 nul \x1b[31m",
    "- 1. + > = ---",
    "<!-- comment --> <?php ?> <![CDATA[x]]>",
]
# Arbitrary text, weighted towards the characters Markdown and HTML give meaning to.
PIECES = list("<>&\"'`*_[]()!|#~$@:/.\\-+= \n\tawjsx1") + ["www.", "://", "javascript:", "<img ", "<script>",
                                                            "onerror=", "\r\n", "\u2028", "http", "&amp;", "1. "]
MARKUP = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)
VALUES = st.one_of(MARKUP, st.text(max_size=40), st.sampled_from(HOSTILE))
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def gfm(md: str) -> str:
    return cmarkgfm.github_flavored_markdown_to_html(md, options=Options.CMARK_OPT_UNSAFE)


def shown(value: object) -> str:
    """What a reader must see for text(value): the value on one line (whitespace runs as one space, control and
    bidi characters as U+FFFD), a word joiner after each @."""
    from evpack.markdown import _clean

    return " ".join(_clean(value).split()).replace("@", "@" + WORD_JOINER)


class Tree(HTMLParser):
    """Start tags with their attributes, and the text. The renderer's own break opportunity, a bare <wbr> right
    after a comma, is counted apart (`breaks`); any other <wbr> is a tag like the rest."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, tuple]] = []
        self.text: list[str] = []
        self.breaks = 0

    def handle_starttag(self, tag, attrs):
        if tag == "wbr" and not attrs and self.text and self.text[-1].endswith(","):
            self.breaks += 1
            return
        self.tags.append((tag, tuple(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, tuple(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def handle_comment(self, data):
        self.tags.append(("<!--", (("text", data),)))

    def handle_pi(self, data):
        self.tags.append(("<?", (("text", data),)))

    def unknown_decl(self, data):
        self.tags.append(("<!", (("text", data),)))


def tree(html: str) -> Tree:
    t = Tree()
    t.feed(html)
    t.close()
    return t


# ------------------------------------------------------------------------------------ the helpers
@FUZZ
@given(VALUES)
@example("www.evil.example")
@example("a@b.org")
def test_text_renders_as_exactly_the_value_in_both_renderers(value):
    md = text(value)
    assert "\n" not in md
    for render in (markdown_to_html, gfm):
        t = tree(render(md))
        want = shown(value)
        if not want:
            assert t.tags == [], t.tags
            continue
        assert [tag for tag, _ in t.tags] == ["p"], (render.__name__, md, t.tags)
        assert "".join(t.text).strip("\n") == want, (render.__name__, md)


def test_a_shape_key_may_break_after_its_commas_and_stays_text():
    """report.html only: a bare <wbr> after each comma inside a word (so a long shape key wraps in its table cell
    instead of widening the table); nothing else becomes markup, and the words read as before."""
    value = "B=32,H=16,S=256,<img src=x onerror=alert(1)>,a, b"
    t = tree(markdown_to_html(text(value)))
    assert [tag for tag, _ in t.tags] == ["p"] and t.breaks == 4, (t.tags, t.breaks)
    assert "".join(t.text).strip("\n") == shown(value)
    assert tree(gfm(text(value))).breaks == 0  # the PR comment's renderer is left as it was


@FUZZ
@given(VALUES, VALUES)
def test_text_and_code_stay_in_their_table_cell(a, b):
    md = "\n".join(table(["x", "y"], [[text(a), code(b, in_table=True)]]))
    for render in (markdown_to_html, gfm):
        t = tree(render(md))
        tags = [tag for tag, _ in t.tags if tag not in ("div",)]
        cells = [tag for tag in tags if tag in ("td", "th")]
        assert cells == ["th", "th", "td", "td"], (render.__name__, md, tags)
        assert set(tags) <= {"table", "thead", "tbody", "tr", "th", "td", "code"}, (render.__name__, md, tags)


@FUZZ
@given(VALUES)
@example("`x`")
@example(" a ")
@example("``")
def test_code_span_holds_the_value(value):
    md = code(value)
    from evpack.markdown import _clean

    want = _clean(value)
    for render in (markdown_to_html, gfm):
        t = tree(render(md))
        if not want:
            assert md == "" and t.tags == []
            continue
        assert [tag for tag, _ in t.tags] == ["p", "code"], (render.__name__, md, t.tags)
        assert "".join(t.text).strip("\n") == want, (render.__name__, md)


@FUZZ
@given(st.lists(VALUES, max_size=5))
def test_fence_holds_every_line(lines):
    md = "\n".join(fence(lines))
    from evpack.markdown import _clean

    for render in (markdown_to_html, gfm):
        t = tree(render(md))
        assert [tag for tag, _ in t.tags] == ["pre", "code"], (render.__name__, md, t.tags)
        body = "".join(t.text)  # the lines, then the line break after </pre>
        assert body == "".join(_clean(ln) + "\n" for ln in lines) + "\n", (render.__name__, md)


# ------------------------------------------------------------------------------ a whole pack's reports
def _pack(root: Path, v: str) -> Path:
    """A small pack whose free-text fields all hold v: GPU name, build error line, gate and stage reasons, a
    warning, the canary matrix (variant description, observed tool text), stability rows, the A/B (base ref,
    variant, config, shape, reason of SLOWER and UNSURE rows). Written as the stages write them."""
    pack = root / "pack"
    for d in ("build", "canaries", "stability", "bench"):
        (pack / d).mkdir(parents=True)
    gates = {"build": {"status": "fail", "reason": f"build exited 1: {v}"},
             "gates_live": {"status": "pass", "reason": v}, "performance": {"status": "fail", "reason": v}}
    stages = {"build": {"status": "fail", "reason": f"build exited 1: {v}", "duration_s": 1.0},
              "stability": {"status": "pass", "reason": v, "duration_s": 2.0},
              "canaries": {"status": "pass", "reason": v, "duration_s": 3.0},
              "bench": {"status": "pass", "reason": v, "duration_s": 4.0}}
    pj = {"schema_version": 2, "pack_id": "20990101T000000Z-aaaaaaaaaaaa", "created_utc": "2099-01-01T00:00:00Z",
          "git": {"commit": "a" * 40, "dirty": False}, "toolchain": {"nvcc": v}, "warnings": [v], "stages": stages,
          "gates": gates, "label": "evidence:failed", "labels": ["evidence:failed"], "so_sha256": "b" * 64,
          "timings": {"total_s": 10.0}, "signing": {"key_type": v, "key_fingerprint": v, "key_comment": v}}
    (pack / "pack.json").write_text(json.dumps(pj))
    (pack / "env.json").write_text(json.dumps({"gpu_name": v, "driver_version": v, "torch_version": "2.11",
                                               "cuda_version": "13.0"}))

    def outcome(stage: str, status: str, reason: str, data: dict) -> None:
        (pack / stage / "outcome.json").write_text(json.dumps({"status": status, "reason": reason, "data": data}))

    outcome("build", "fail", f"build exited 1: {v}", {})
    outcome("stability", "pass", v, {"variants": {v: {"status": "pass", "reason": v}}})
    outcome("canaries", "pass", v, {"matrix": [{"canary": v, "fault": v, "gate": v, "caught": True, "observed": v}]})
    outcome("bench", "pass", v, {})
    side = {"n": 20, "median_us": 10.0, "iqr_us": 0.1}
    rows = [{"key": f"{verdict}-{v}", "variant": v, "config": v, "shape": v, "mode": v, "head": side, "base": side,
             "ratio": 1.05, "ci_lo": 1.01, "ci_hi": 1.09, "verdict": verdict, "reason": v}
            for verdict in ("SLOWER", "UNSURE", "SAME")]
    ab = {"schema": 1, "status": "pass", "reason": "", "base_ref": v, "base_commit": "c" * 40,
          "head_commit": "a" * 40, "head_dirty": False, "self_check": False, "base_so_sha256": v, "head_so_sha256": v,
          "rows": rows, "new": [{"variant": v, "config": v}], "removed": [],
          "counts": {"SAME": 1, "FASTER": 0, "SLOWER": 1, "UNSURE": 1}, "regressions": [rows[0]["key"]],
          "rule": {"name": "median-ratio-ci", "conf": 0.99, "min_effect": 0.02, "min_n": 10}}
    (pack / "bench" / "ab.json").write_text(json.dumps(ab))
    return pack


def _render(root: Path, v: str) -> dict[str, str]:
    pack = _pack(root, v)
    files = write_reports(pack, root / "out", environ={})
    return {p.name: p.read_text(encoding="utf-8") for p in files.all()}


# Classes the renderer sets from what a cell or span holds (a status word, a long code span): a value may
# change them, within this vocabulary only, and the structure comparison leaves them out.
STATUSES = ("pass", "fail", "error", "skipped", "unsure")
VALUE_CLASSES = {"long", "wrap", *(f"status {c}" for c in STATUSES), *(f"status {c} wrap" for c in STATUSES)}


def _skeleton(html: str) -> list[tuple[str, tuple]]:
    """Elements and attributes, less the renderer's value classes and the code spans (a value with a backslash
    before a pipe cannot be a code span in a GFM table and is written as text: _check_reports asserts a value
    never adds one)."""
    out = []
    for tag, attrs in tree(html).tags:
        if tag == "code":
            continue
        kept = tuple((k, v) for k, v in attrs if not (k == "class" and v in VALUE_CLASSES))
        out.append((tag, kept))
    return out


def _codes(html: str) -> int:
    return sum(1 for tag, _ in tree(html).tags if tag == "code")


PLAIN = "plain value"


@pytest.fixture(scope="module")
def plain_reports(tmp_path_factory):
    return _render(tmp_path_factory.mktemp("plain"), PLAIN)


def _check_reports(reports: dict[str, str], plain: dict[str, str], value: str) -> None:
    # report.html: the same elements with the same attributes as with a plain value; the value shown as text.
    got, want = _skeleton(reports["report.html"]), _skeleton(plain["report.html"])
    if got != want:
        diff = next(i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b) if got[:len(want)] != want \
            else len(want)
        raise AssertionError(f"report.html structure changed by the value {value!r} at element {diff}: "
                             f"{got[diff:diff + 3]} instead of {want[diff:diff + 3]}")
    assert _codes(reports["report.html"]) <= _codes(plain["report.html"])
    t = tree(reports["report.html"])
    assert not any(tag == "script" for tag, _ in t.tags)
    assert {v for _, attrs in t.tags for k, v in attrs if k == "class"} <= VALUE_CLASSES | {"table-wrap", "verdict-failed"}
    assert not any(name.lower().startswith("on") or name.lower() in ("href", "src", "style") for _, attrs in t.tags
                   for name, _value in attrs)
    page = " ".join("".join(t.text).split())
    if shown(value):
        assert shown(value) in page, (value, shown(value))
    # report.md and comment.md through GitHub's parser: the same elements and attributes as with a plain value.
    for name in ("report.md", "comment.md"):
        got, want = _skeleton(gfm(reports[name])), _skeleton(gfm(plain[name]))
        assert got == want, (name, value, [x for x in got if x not in want][:5])
        assert _codes(gfm(reports[name])) <= _codes(gfm(plain[name])), (name, value)


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_pack_values_render_as_text(tmp_path, plain_reports, value):
    reports = _render(tmp_path, value)
    _check_reports(reports, plain_reports, value)
    # The decision names the SLOWER and UNSURE rows, escaped.
    comment = reports["comment.md"]
    assert comment.splitlines()[1].startswith("# ❌ **evidence:failed** · **1 row SLOWER** than ")
    assert "**SLOWER** (1)" in comment and "**UNSURE** (1)" in comment


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VALUES.filter(lambda v: v.strip() != ""))
def test_any_pack_value_leaves_the_reports_structure_alone(tmp_path_factory, plain_reports, value):
    _check_reports(_render(tmp_path_factory.mktemp("v"), value), plain_reports, value)


def test_the_check_sees_a_value_that_skips_the_escape(tmp_path, plain_reports, monkeypatch):
    """With the escape taken out of the GPU line, the check fails on GitHub's rendering of report.md (an img
    element from the value) while report.html stays inert: raw HTML is off in its renderer."""
    import evpack.reporting.common as common

    monkeypatch.setattr(common, "text", str)
    value = '<img src=x onerror="window.__pwned=1">'
    reports = _render(tmp_path, value)
    with pytest.raises(AssertionError, match="report.md"):
        _check_reports(reports, plain_reports, value)
    assert _skeleton(reports["report.html"]) == _skeleton(plain_reports["report.html"])
    assert ("img", (("src", "x"), ("onerror", "window.__pwned=1"))) in _skeleton(gfm(reports["report.md"]))
