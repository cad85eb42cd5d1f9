"""The reports: report.md, report.html (markdown-it-py + jinja2) and comment.md, on the committed
reference packs (re-rendered into tmp_path with today's code) and on packs of the stand-in stages."""
from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
import reference
import tomllib
from conftest import REPO, copy_pack, fake_pack, run_cli, verify_fake

from evpack.jsonio import read_member_json, write_member_json
from evpack.packfs import member
from evpack.reporting import RENDERER_PINS
from evpack.reporting.blocks import LONG_TABLE_ROWS, Details, Md, from_markdown, to_markdown
from evpack.reporting.comment_md import COMMENT_MAX_CHARS, MAX_LIST, ci_links, fit, render_comment
from evpack.reporting.common import MARKER
from evpack.reporting.report_html import markdown_to_html
from evpack.reporting.report_md import render_md
from evpack.reporting.write import write_reports
from evpack.stages.base import read_json

# the schema-1 `nox -s evidence -- --suite full` pack (evidence:complete) of commit b40b5c2 while it is committed:
# the literal checks below are its numbers
FULL = next((p for p in reference.SAME_COMMIT_V1 if reference.info(p).label == "evidence:complete"), None)
needs_v1_full = pytest.mark.skipif(FULL is None, reason="needs the schema-1 complete full-suite pack of the "
                                   "compatibility fixture's commit (SAME_COMMIT_V1)")
BENCH_ONLY = reference.COMPAT  # nox -s bench -- --suite full, evidence:partial (the compatibility fixture)
needs_bench_only = reference.needs("COMPAT")
CI_ENV = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "octo/kernels", "GITHUB_RUN_ID": "4242"}


@pytest.fixture(scope="module")
def full_reports(tmp_path_factory):
    if FULL is None:
        pytest.skip("needs the schema-1 complete full-suite pack (SAME_COMMIT_V1)")
    out = tmp_path_factory.mktemp("full")
    files = write_reports(FULL, out, environ=CI_ENV)
    return {p.name: p.read_text(encoding="utf-8") for p in files.all()}


def _order(text: str, *needles: str) -> None:
    at = [text.find(n) for n in needles]
    assert all(i >= 0 for i in at), dict(zip(needles, at, strict=True))
    assert at == sorted(at), dict(zip(needles, at, strict=True))


# ----------------------------------------------------------------------------------------- pins
def test_renderer_pins_match_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for group in (project["dependencies"], project["optional-dependencies"]["cpu"]):
        pins = dict(d.split(";")[0].strip().split("==") for d in group if "==" in d)  # "name==v; marker"
        for dist, version in RENDERER_PINS.items():
            assert pins.get(dist) == version, (dist, version, group)
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "reporting/templates/*.j2" in package_data["evpack"]


# ------------------------------------------------------------------------------------- comment.md
def test_comment_of_the_full_reference_pack(full_reports):
    c = full_reports["comment.md"]
    assert len(c) <= COMMENT_MAX_CHARS
    # The decision first: the label, then what the benchmark was compared with (here: nothing).
    assert c.startswith(MARKER + "\n# ✅ **evidence:complete** · no performance decision: no base to compare with")
    _order(c, "Report: `report.html` in the pack `20261121T142018Z-b40b5c2fd4c6`",
           "Labels: `evidence:complete`, `tensor-cores-verified`", "## Gates", "## Leaderboard at the canonical",
           "## Skipped")
    pj = read_json(FULL / "pack.json")
    for gate, v in pj["gates"].items():
        assert f"| {gate} | {v['status'].upper()} |" in c
    board = [ln for ln in c[c.index("## Leaderboard"):c.index("## Skipped")].splitlines() if ln.startswith("| ")]
    assert len(board) == 1 + 8  # header + the top 8 of 12 rows
    assert "| 3 | evpack | mma | m64n64w4s2 | 66.94 |" in c
    assert "Best of ours: `mma/m64n64w4s2` = **0.73×** SDPA default" in c
    assert "Nothing was skipped" in c
    # The CI links of the environment it was rendered in: the run that holds the pack, the commit.
    assert "an artifact of [CI run 4242](https://github.com/octo/kernels/actions/runs/4242)" in c
    assert "https://github.com/octo/kernels/actions/runs/4242#artifacts" in c
    assert "(https://github.com/octo/kernels/commit/b40b5c2fd4c6d1ffc1e4d90221a8922f584ada8f)" in c


@needs_bench_only
def test_comment_of_the_bench_only_pack_says_what_was_skipped():
    c = render_comment(BENCH_ONLY, environ={})
    assert c.startswith(MARKER + "\n# ⚠️ **evidence:partial** · no regression against pack "
                        "`20261121T142018Z-b40b5c2fd4c6`: 669 SAME, 2 FASTER, 1 SLOWER (0 of ours)")
    assert "not a same-run A/B" in c and "actions/runs" not in c
    # Outside CI the report is the file beside comment.md in the pack.
    assert "Report: [report.html](report.html) in the pack `20261121T142707Z-b40b5c2fd4c6`" in c
    assert "- ptxas, sass, tensor_proof, sanitize, correctness, stability, canaries: not selected for this run" in c
    assert "gates not run (never a pass): ptxas_resources, sass_tensor_proof" in c


NEWEST = reference.FULL  # the newest full suite, made with --baseline or --self-check: a same-run A/B
needs_newest_ab = pytest.mark.skipif(not (NEWEST and reference.info(NEWEST).ab),
                                     reason="no reference pack of role FULL with a same-run A/B (bench/ab.json)")


def _ab_of(pack) -> tuple[dict, str, dict]:
    """(ab.json, the base as the comment names it, the verdict counts of its rows): read from the pack."""
    ab = read_member_json(pack / "bench", "ab.json")  # ab.json or ab.json.xz, as the pack stores it
    counts = {v: sum(e["verdict"] == v for e in ab["rows"]) for v in ("SAME", "UNSURE", "SLOWER")}
    base = "itself (A/B self-check)" if ab.get("self_check") else f"`{ab['base_commit'][:7]}`"
    return ab, base, counts


@needs_newest_ab
def test_comment_starts_with_the_ab_decision_and_names_the_unsure_rows():
    c = render_comment(NEWEST, environ={})
    ab, base, n = _ab_of(NEWEST)
    assert n["SLOWER"] == 0 and n["UNSURE"] > 0, "the literal checks below need UNSURE rows and no SLOWER one"
    tally = f"{n['SAME']} SAME, {n['UNSURE']} UNSURE, 0 SLOWER"
    assert c.splitlines()[1] == f"# ✅ **evidence:complete** · no regression against {base}: {tally}"
    unsure = sorted((e for e in ab["rows"] if e["verdict"] == "UNSURE"), key=lambda e: e["key"])
    named = [ln for ln in c.splitlines() if ln.startswith("- `")]
    assert len(unsure) == n["UNSURE"] and len(named) == min(n["UNSURE"], MAX_LIST)
    more = [ln for ln in c.splitlines() if ln.startswith("- … and ")]
    assert more == ([f"- … and {n['UNSURE'] - MAX_LIST} more (report.md lists them)"] if n["UNSURE"] > MAX_LIST else [])
    for line, e in zip(named, unsure[:MAX_LIST], strict=True):
        assert line.startswith(f"- `{e['variant']}/{e['config']}` {e['shape']} {e['mode']}: time ")
    new = f"; {len(ab['new'])} new rows not compared." if ab["new"] else ""
    _order(c, f"Timed in the same run on the same GPU{new}", f"**UNSURE** ({n['UNSURE']})",
           "Report: [report.html](report.html)", "## Gates")
    md = render_md(NEWEST)
    assert f"Performance: no regression against {base}: {tally}." in md


@needs_newest_ab
def test_comment_names_the_slower_rows_first(tmp_path):
    pack = copy_pack(NEWEST, tmp_path)
    ab, base, n = _ab_of(pack)
    assert n["SAME"] >= 12 and n["UNSURE"] > 0
    slow = sorted(e["key"] for e in ab["rows"] if e["verdict"] == "SAME")[:12]
    for e in ab["rows"]:
        if e["key"] in slow:
            e.update(verdict="SLOWER", ratio=1.1, ci_lo=1.05, ci_hi=1.15)
    write_member_json(member(pack / "bench", "ab.json"), ab)
    c = render_comment(pack, environ={})
    assert c.splitlines()[1] == (f"# ✅ **evidence:complete** · **12 rows SLOWER** than {base}: "
                                 f"{n['SAME'] - 12} SAME, {n['UNSURE']} UNSURE, 12 SLOWER")
    section = c[c.index("**SLOWER** (12)"):c.index(f"**UNSURE** ({n['UNSURE']})")]
    listed = [ln for ln in section.splitlines() if ln.startswith("- ")]
    assert len(listed) == 10 + 1 and listed[-1] == "- … and 2 more (report.md lists them)"
    assert listed[0].endswith(": time +10.0%, CI +5.0%..+15.0%")


def test_ci_links_need_all_three_variables_and_check_them():
    assert ci_links({}) == {}
    assert ci_links({**CI_ENV, "GITHUB_RUN_ID": ""}) == {}
    assert ci_links({**CI_ENV, "GITHUB_RUN_ID": "12; rm -rf /"}) == {}
    assert ci_links({**CI_ENV, "GITHUB_RUN_ID": "١٢"}) == {}  # digits, but not ASCII ones
    assert ci_links({**CI_ENV, "GITHUB_RUN_ATTEMPT": "2"})["run"].endswith("/actions/runs/4242/attempts/2")
    assert ci_links({**CI_ENV, "GITHUB_SERVER_URL": "https://ghe.example.com:8443/"})["run"] == \
        "https://ghe.example.com:8443/octo/kernels/actions/runs/4242"
    for server in ("http://github.com", "javascript:alert(1)//", "https://github.com/evil", "https://a@github.com",
                   "https://github.com?x=1", "https://github.com#x", "https://gith ub.com", "https://github.com)[x](y",
                   "https:///x", "https://-bad-.com", "//github.com", "https://github.com:99999", ""):
        assert ci_links({**CI_ENV, "GITHUB_SERVER_URL": server}) == {}, server
    for repo in ("octo", "octo/kernels/x", "octo/..", "../kernels", "octo/ker nels", "octo/k)](javascript:x",
                 "-octo/kernels"):
        assert ci_links({**CI_ENV, "GITHUB_REPOSITORY": repo}) == {}, repo


def test_fit_cuts_at_a_line_boundary_and_says_so():
    lines = [f"- row {i} " + "x" * 90 for i in range(500)]
    text = fit(lines)
    assert len(text) <= COMMENT_MAX_CHARS and "cut at the comment limit" in text
    assert text.split("\n\n*(cut")[0].splitlines()[-1] in lines  # no half line
    assert fit(["short"]) == "short"


def test_failed_pack_comment_names_failures_and_skips(tmp_path, fake_env):
    fake_env({"correctness": "fail", "sanitize": "skipped", "sass": "error"})
    pack = fake_pack(tmp_path / "packs")
    c = (pack / "comment.md").read_text()
    assert "**evidence:failed**" in c.splitlines()[1]
    assert "- **sass** ERROR: sass says error" in c and "- **correctness** FAIL: correctness says fail" in c
    assert "- sanitize: sanitize says skipped" in c
    assert "comment.md" in read_json(pack / "index.json")["files"]  # written before the index: hashed
    assert verify_fake(pack) == []


# -------------------------------------------------------------------------------------- report.md
def test_report_md_puts_verdict_gates_and_leaderboard_first(full_reports):
    md = full_reports["report.md"]
    assert md.startswith(MARKER + "\n# Evidence pack `20261121T142018Z-b40b5c2fd4c6`: **evidence:complete**")
    _order(md, "## Gates", "## Leaderboard at the canonical shape", "## Pack", "## Stages", "## ptxas", "## bench")
    assert md.count("| # | impl | variant |") == 1  # the leaderboard once, at the top
    # The long tables are collapsed: PTXAS (84 rows), SASS, tensor proof, correctness, per shape.
    for name in ("PTXAS resources — pass (table of 84 rows)", "First tensor-core instructions of",
                 "tensor_proof (table of 56 rows)", "correctness (table of 28 rows)",
                 "Per shape (cold mode) (table of 24 rows)"):
        assert f"<details><summary>{name}" in md, name


def test_from_markdown_collapses_long_tables_and_reads_details_lines():
    def tbl(n: int) -> list[str]:
        return ["| a | b |", "|---|---|"] + [f"| {i} | x |" for i in range(n)]

    md = "\n".join(["### Short", "", *tbl(LONG_TABLE_ROWS), "", "### Long `one`", "", *tbl(LONG_TABLE_ROWS + 1),
                    "", "<details><summary>mine</summary>", "", *tbl(40), "", "</details>", "- a list right after",
                    "", "```", *tbl(30), "<details><summary>in a fence</summary>", "```"])
    blocks = from_markdown(md)
    details = [b for b in blocks if isinstance(b, Details)]
    assert [d.summary for d in details] == [f"Long one (table of {LONG_TABLE_ROWS + 1} rows)", "mine"]
    assert details[1].body == (Md("\n".join(tbl(40))),)  # a table inside an author's <details>: left whole
    assert isinstance(blocks[-1], Md) and blocks[-1].text.startswith("- a list right after")
    assert blocks[-1].text.endswith("\n".join(["```", *tbl(30), "<details><summary>in a fence</summary>", "```"]))
    # report.md: every <details> line stands between blank lines, so GitHub renders the Markdown around it.
    out = to_markdown(blocks)
    assert "</details>\n\n- a list right after" in out
    assert f"<details><summary>Long one (table of {LONG_TABLE_ROWS + 1} rows)</summary>\n\n| a | b |" in out
    assert out.count("</details>") == 2 and out.count("<details>") == 3  # the third is fenced text
    # A summary is text: escaped in report.md.
    assert to_markdown([Details("a <b> & c", (Md("x"),))]).startswith("<details><summary>a &lt;b&gt; &amp; c</summary>")


# ------------------------------------------------------------------------------------ report.html
class _Page(HTMLParser):
    """Tables (with their body row count), whether each sits inside <details>, images, and text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.details = 0
        self.tables: list[dict] = []
        self.images: list[dict] = []
        self.text: list[str] = []
        self.links: list[str] = []
        self._open: list[dict] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "details":
            self.details += 1
        elif tag == "table":
            self._open.append({"rows": 0, "in_details": self.details > 0})
        elif tag == "tr" and self._open:
            self._open[-1]["rows"] += 1
        elif tag == "img":
            self.images.append(a)
        for k in ("href", "src"):
            if k in a:
                self.links.append(a[k])

    def handle_endtag(self, tag):
        if tag == "details":
            self.details -= 1
        elif tag == "table" and self._open:
            self.tables.append(self._open.pop())

    def handle_data(self, data):
        self.text.append(data)


def test_report_html_renders_html_and_collapses_long_tables(full_reports):
    html = full_reports["report.html"]
    page = _Page()
    page.feed(html)
    text = "".join(page.text)
    for tag in ("details", "summary", "br", "table", "td"):
        assert f"<{tag}" not in text and f"&lt;{tag}" not in html, tag  # elements, never escaped text
    assert html.count("<details>") >= 5 and html.count("<summary>") == html.count("<details>")
    long_tables = [t for t in page.tables if t["rows"] - 1 > LONG_TABLE_ROWS]
    assert long_tables and all(t["in_details"] for t in long_tables)
    top = [t for t in page.tables if not t["in_details"]]
    assert top[0]["rows"] == 1 + 10 and top[1]["rows"] == 1 + 12  # gates, then the canonical leaderboard
    # Self-contained: every image is a data: URI, nothing is fetched from anywhere.
    assert len(page.images) == 4 and all(i["src"].startswith("data:image/png;base64,") for i in page.images)
    assert all(link.startswith(("data:", "#")) for link in page.links)
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", html) and "@import" not in html
    assert '<body class="verdict-complete">' in html
    assert re.search(r'<meta name="generator" content="evpack [^"]*markdown-it-py 4\.3\.0; jinja2 3\.1\.6"', html)
    assert "Invalid __global__ write" in text  # tool text stays literal (a code span), not bold
    # Status cells carry their colour's class; the gate table has one per gate.
    pj = read_json(FULL / "pack.json")
    assert html.count('<td class="status pass">PASS</td>') >= len(pj["gates"]) + len(pj["stages"])
    # The plots sit in the benchmark's section, before its later parts: not all at the end of the page.
    assert html.index("<figure>") > html.index("Per shape (cold mode)")
    assert html.rindex("</figure>") < html.index("SDPA kernels that ran")


def test_markdown_renderer_shows_html_links_and_images_as_text():
    """report.html renders Markdown with raw HTML, links, images, autolinks and references off: whatever reaches
    the renderer unescaped is text, never an element or an attribute."""
    hostile = ("<script>alert(1)</script> <img src=x onerror=alert(1)> [a](javascript:alert(1)) "
               "![i](https://evil.example/p.png) <https://evil.example> https://evil.example www.evil.example\n\n"
               "[ref]: https://evil.example\n\n<details><summary>S</summary>\n\n| a |\n|---|\n| x<br>y |\n\n</details>")
    out = markdown_to_html(hostile)
    page = _Page()
    page.feed(out)
    assert page.links == [] and page.images == []
    assert re.findall(r"<(\w+)", out) == ["p", "p", "p", "div", "table", "thead", "tr", "th", "tbody", "tr", "td",
                                          "p"], out
    assert "&lt;script&gt;" in out and "&lt;details&gt;" in out and "[ref]: https://evil.example" in out
    # Status cells are coloured; the table sits in a scroll wrapper; a long code span may wrap.
    table = markdown_to_html("| gate | status |\n|---|---|\n| a | PASS |\n| b | fail: x |\n| c | UNSURE |\n"
                             "| d | passes |\n| e | `" + "k" * 60 + "` |")
    assert '<div class="table-wrap">\n<table>' in table and table.rstrip().endswith("</table>\n</div>")
    assert '<td class="status pass">PASS</td>' in table and '<td class="status fail">fail: x</td>' in table
    assert '<td class="status unsure">UNSURE</td>' in table and "<td>passes</td>" in table
    assert '<code class="long">' in table


@needs_bench_only
def test_report_cli_writes_all_three_outside_the_pack(tmp_path):
    out = tmp_path / "r"
    proc = run_cli("report", str(BENCH_ONLY), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"WROTE {out / n}" for n in ("report.md", "report.html", "comment.md")]
    assert (out / "comment.md").read_text().startswith(MARKER)


@needs_bench_only
def test_verify_does_not_import_the_renderer(tmp_path):
    """verify runs on the standard library: hide the renderer's modules and it still verifies."""
    import os
    import subprocess
    import sys

    for mod in ("markdown_it", "jinja2", "markupsafe", "mdurl"):
        (tmp_path / mod).mkdir()
        (tmp_path / mod / "__init__.py").write_text(f"raise ImportError('{mod} hidden for this test')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO / "python")]))
    proc = subprocess.run([sys.executable, "-m", "evpack", "verify", str(BENCH_ONLY)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("verified"), proc.stdout + proc.stderr


def test_evidence_refuses_to_start_without_the_renderer(tmp_path, fake_env, monkeypatch):
    from evpack.pack import PackError

    fake_env({})
    monkeypatch.setattr("evpack.evidence.missing_renderer", lambda: "the report renderer is not importable: x")
    with pytest.raises(PackError, match="renderer is not importable"):
        fake_pack(tmp_path / "packs")
    assert not (tmp_path / "packs").exists() or not any((tmp_path / "packs").iterdir())


def test_missing_renderer_names_the_pins(monkeypatch):
    import importlib.util

    from evpack import reporting

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "markdown_it" else real(name, *a))
    msg = reporting.missing_renderer()
    assert msg and "markdown-it-py==4.3.0" in msg and "jinja2" not in msg
    monkeypatch.setattr(importlib.util, "find_spec", real)
    assert reporting.missing_renderer() is None
