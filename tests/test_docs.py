"""The docs: README.md a front door of at most 16,000 bytes, docs/ pages whose tables are written from the
code (python -m evpack.docsgen) and fail here when stale, links that resolve, commands that exist, and
default-kernel statements that agree with python/evpack/dispatch_table.json."""
from __future__ import annotations

import argparse
import ast
import dataclasses
import re
import shutil
from pathlib import Path

import pytest
from conftest import REPO
from markdown_it import MarkdownIt

from evpack import cli, dispatch, docsgen, model, registry
from evpack.stages import canaries as canaries_stage

README = REPO / "README.md"
API_DOC = REPO / "docs" / "python-api.md"
# Pages other branches add; links to them are allowed before they exist.
PENDING = {"docs/ci-and-signing.md", "docs/cloud-safety.md", "docs/benchmark-physics.md"}
MD = MarkdownIt("commonmark").enable("table")


def linked_docs() -> list[Path]:
    return [README, *sorted((REPO / "docs").rglob("*.md")), REPO / "artifacts" / "reference" / "README.md"]


def _inline_text(token) -> str:
    return "".join(c.content for c in token.children or [] if c.type in ("text", "code_inline"))


def slugs(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    tokens = MD.parse(path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for i, t in enumerate(tokens):
        if t.type != "heading_open":
            continue
        slug = re.sub(r"[^\w\- ]", "", _inline_text(tokens[i + 1]).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(path: Path) -> list[str]:
    out = []
    for t in MD.parse(path.read_text(encoding="utf-8")):
        for c in t.children or []:
            if c.type == "link_open":
                out.append(c.attrs["href"])
            elif c.type == "image":
                out.append(c.attrs["src"])
    return out


def link_problems(path: Path) -> list[str]:
    problems = []
    for href in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", href):
            continue  # https:, mailto: ...
        target, _, fragment = href.partition("#")
        dest = (path.parent / target).resolve() if target else path
        rel = dest.relative_to(REPO).as_posix() if dest.is_relative_to(REPO) else str(dest)
        if not dest.exists():
            if rel not in PENDING:
                problems.append(f"{path.relative_to(REPO)}: link {href!r}: no such file {rel}")
            continue
        if fragment and dest.suffix == ".md" and fragment not in slugs(dest):
            problems.append(f"{path.relative_to(REPO)}: link {href!r}: {rel} has no heading #{fragment}")
    return problems


# ------------------------------------------------------------------------------------------ the front door
def test_readme_is_at_most_16000_bytes():
    size = len(README.read_bytes())
    assert size <= 16_000, f"README.md is {size} bytes; move detail into docs/"


def test_readme_holds_the_two_commands_in_a_shell_block():
    blocks = [t.content for t in MD.parse(README.read_text()) if t.type == "fence" and t.info.strip() == "bash"]
    lines = [ln.split("#")[0].strip() for b in blocks for ln in b.splitlines()]
    for cmd in ("python -m pip install nox", "nox -s evidence", "nox -s tests"):
        assert cmd in lines, f"README.md: no shell line {cmd!r}"
    text = README.read_text()
    assert "report.html" in text and "artifacts/packs/" in text


def test_every_relative_link_resolves():
    problems = [p for doc in linked_docs() for p in link_problems(doc)]
    assert problems == []


def test_the_link_check_sees_a_broken_link_and_a_missing_heading(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Title\n\n## Some `code` here, too\n")
    doc = tmp_path / "docs" / "b.md"
    doc.write_text("[ok](a.md#some-code-here-too) [gone](c.md) [bad](a.md#nope) [pending](cloud-safety.md) "
                   "[web](https://example.org/x) [self](#own) ![img](../pic.png)\n\n## Own\n")
    problems = link_problems(doc)
    assert len(problems) == 3, problems
    assert any("c.md" in p for p in problems) and any("#nope" in p for p in problems)
    assert any("pic.png" in p for p in problems)


# ------------------------------------------------------------------------------------- generated tables
def test_generated_regions_are_current():
    result = docsgen.refresh(REPO, check=True)
    assert result.written == ()
    stale = [f.line(REPO) for f in result.stale]
    assert stale == [], "run `python -m evpack.docsgen`: " + "; ".join(stale)
    assert result.missing == ()
    assert [f.line(REPO) for f in result.claims] == []


def _copy_docs(root: Path) -> None:
    shutil.copy(README, root / "README.md")
    shutil.copytree(REPO / "docs", root / "docs")
    shutil.copy(REPO / "noxfile.py", root / "noxfile.py")


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_check_names_a_stale_region_writes_nothing_and_the_rewrite_restores_it(tmp_path, capsys):
    _copy_docs(tmp_path)
    page = tmp_path / "docs" / "gates-and-canaries.md"
    good = page.read_text()
    start = good.index("<!-- generated:canaries -->")
    end = good.index("<!-- /generated:canaries -->")
    page.write_text(good[:start] + "<!-- generated:canaries -->\n| stale |\n" + good[end:])
    before = _files(tmp_path)
    assert docsgen.main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "docs/gates-and-canaries.md: generated region 'canaries' is stale" in err
    assert "'gates'" not in err and "Traceback" not in err
    assert _files(tmp_path) == before
    assert docsgen.main(["--root", str(tmp_path)]) == 0
    assert page.read_text() == good
    assert docsgen.main(["--check", "--root", str(tmp_path)]) == 0


def test_check_names_a_region_no_doc_holds(tmp_path, capsys):
    _copy_docs(tmp_path)
    page = tmp_path / "docs" / "running.md"
    text = page.read_text()
    start, end = text.index("<!-- generated:nox-sessions -->"), text.index("<!-- /generated:nox-sessions -->")
    page.write_text(text[:start] + text[end + len("<!-- /generated:nox-sessions -->"):])
    assert docsgen.main(["--check", "--root", str(tmp_path)]) == 1
    assert "'nox-sessions' appears in no doc" in capsys.readouterr().err


@pytest.mark.parametrize("bad, what", [
    ("<!-- generated:no-such-table -->\n<!-- /generated:no-such-table -->\n", "unknown generated region"),
    ("<!-- generated:gates -->\ntext\n", "never closed"),
    ("<!-- generated:gates -->\n<!-- generated:labels -->\n<!-- /generated:labels -->\n<!-- /generated:gates -->\n",
     "opens inside region"),
    ("<!-- /generated:gates -->\n", "with no region open"),
    ("<!-- generated:gates -->\n<!-- /generated:labels -->\n", "inside region 'gates'"),
    ("<!-- generated: gates -->\n", "malformed region marker"),
])
def test_bad_markers_are_one_line_exit_2_and_nothing_written(tmp_path, capsys, bad, what):
    _copy_docs(tmp_path)
    (tmp_path / "docs" / "zz-bad.md").write_text("# Bad\n\n" + bad)
    other = tmp_path / "docs" / "gates-and-canaries.md"  # a stale region elsewhere must not be rewritten
    other.write_text(other.read_text().replace("| `build` |", "| `built` |"))
    before = _files(tmp_path)
    assert docsgen.main(["--root", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("docsgen: ") and what in lines[0], captured.err
    assert "docs/zz-bad.md:" in lines[0]
    assert _files(tmp_path) == before


def test_code_that_moved_under_a_generator_is_one_line_naming_the_region(tmp_path, capsys, monkeypatch):
    _copy_docs(tmp_path)
    monkeypatch.delattr(model, "STAGE_GATES")
    before = _files(tmp_path)
    assert docsgen.main(["--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "region 'gates'" in err[0] and "STAGE_GATES" in err[0], err
    assert _files(tmp_path) == before


def test_tables_read_what_other_code_adds(monkeypatch):
    """Nothing is hard-coded: a canary, a gate and a finer label added to the code appear in the tables."""
    extra = dataclasses.replace(registry.CANARIES[0], name="canary_extra_probe", description="a new planted fault",
                                expect_caught_by="stability")
    monkeypatch.setattr(registry, "CANARIES", registry.CANARIES + (extra,))
    monkeypatch.setattr(model, "STAGE_GATES", {**model.STAGE_GATES, "new_gate": ("bench", "a new question")})
    monkeypatch.setattr(model, "GATE_ORDER", tuple(model.STAGE_GATES) + model.CROSS_STAGE_GATES)
    ctx = docsgen.Ctx(REPO, REPO / "docs")
    canaries = docsgen.gen_canaries(ctx)
    row = next(line for line in canaries.splitlines() if "canary_extra_probe" in line)
    assert "a new planted fault" in row and "`stability`" in row and "none yet" in row
    gates = docsgen.gen_gates(ctx)
    row = next(line for line in gates.splitlines() if "`new_gate`" in line)
    assert "a new question" in row and "`bench`" in row and "none yet" in row
    assert len(canaries.splitlines()) == len(registry.CANARIES) + 2


def test_a_canary_whose_check_no_stage_runs_is_named(monkeypatch):
    odd = dataclasses.replace(registry.CANARIES[0], name="canary_orphan", expect_caught_by="no_such_check")
    monkeypatch.setattr(registry, "CANARIES", (odd,))
    with pytest.raises(docsgen.DocsError, match="canary_orphan.*no_such_check"):
        docsgen.gen_canaries(docsgen.Ctx(REPO, REPO / "docs"))


def test_markdown_in_the_code_cannot_break_a_table(monkeypatch):
    """Descriptions are prose from the code: a pipe, emphasis, HTML, a backtick or a newline stays text in
    its own cell when the table is rendered."""
    nasty = "a | b *c* _d_ <script>x</script> `e|f` [g](h) \\ end\nnext line"
    probe = dataclasses.replace(registry.CANARIES[0], name="canary_nasty", description=nasty)
    monkeypatch.setattr(registry, "CANARIES", (probe,))
    html = MD.render(docsgen.gen_canaries(docsgen.Ctx(REPO, REPO / "docs")))
    cells = re.findall(r"<td>(.*?)</td>", html, flags=re.S)
    assert len(cells) == 7, html
    assert "<script>" not in html and "<em>" not in html and "<a href=\"h\"" not in html
    assert "a | b *c* _d_ &lt;script&gt;" in cells[1] and "<code>e</code> | <code>f</code>" in cells[1]
    assert "next line" in cells[1]


def test_every_command_and_option_of_the_parser_is_in_the_cli_table():
    text = docsgen.gen_cli(docsgen.Ctx(REPO, REPO / "docs"))
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    public = [c.dest for c in sub._choices_actions]
    assert public, "the parser lists no commands"
    for name in public:
        assert re.search(rf"^### .*`{re.escape(name)}`", text, flags=re.M), f"command {name} missing"
        for act in sub.choices[name]._actions:
            if act.help != argparse.SUPPRESS and not isinstance(act, argparse._HelpAction):
                for opt in act.option_strings:
                    assert f"`{opt}`" in text, f"{name} {opt} missing"
    assert not re.search(r"^### .*`_", text, flags=re.M), "internal commands are not listed"


# ---------------------------------------------------------------------------------------------- nox sessions
def test_nox_sessions_are_read_from_decorators():
    source = '''
import nox
from nox import session
nox.options.sessions = ["a", "renamed"]

@nox.session
def a(session):
    """First line.

    More."""

@nox.session(python=None, name="renamed")
def b(session):
    """B."""

@session(venv_backend="none")
def c(session):
    pass

def _helper(session):
    """Not a session."""

@other.decorator
def d(session):
    """Not a session either."""
'''
    got = docsgen.nox_sessions(source)
    assert [(s.name, s.doc, s.default) for s in got] == [
        ("a", "First line.", True), ("renamed", "B.", True), ("c", "", False)]
    assert all(s.default for s in docsgen.nox_sessions("import nox\n@nox.session\ndef x(s):\n    pass\n"))


def test_nox_and_evpack_commands_in_the_docs_exist():
    sessions = {s.name for s in docsgen.nox_sessions((REPO / "noxfile.py").read_text())}
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    problems = []
    for doc in linked_docs():
        text = re.sub(r"\\(.)", r"\1", doc.read_text(encoding="utf-8"))  # Markdown escapes as rendered
        problems += [f"{doc.name}: nox -s {s}" for s in re.findall(r"nox -s ([a-z_][\w-]*)", text)
                     if s not in sessions]
        problems += [f"{doc.name}: python -m evpack {c}" for c in re.findall(r"python3? -m evpack ([a-z][\w-]*)", text)
                     if c not in sub.choices]
    assert problems == []
    assert {"evidence", "tests"} <= sessions


# ------------------------------------------------------------------------------------------ default kernels
def _region(text: str, name: str) -> str:
    return text[text.index(f"<!-- generated:{name} -->"):text.index(f"<!-- /generated:{name} -->")]


def test_python_api_doc_says_what_the_dispatch_table_says():
    """Read the page as a user would, independently of the generator, and compare with the JSON."""
    table = dispatch.load_table()
    assert table is not None
    region = _region(API_DOC.read_text(), "dispatch")
    rows, exact = set(), set()
    for line in region.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 9 or cells[0] not in registry.DTYPES:
            continue
        causal = cells[2] == "yes"
        if cells[3] in dispatch.SIZES:  # the class table
            variant, config = cells[5].strip("`").split()
            rows.add((cells[0], int(cells[1]), causal, cells[3], cells[4], variant, config))
        else:  # the measured-shape table: batch, heads, seq len, then the kernel
            variant, config = cells[6].strip("`").split()
            exact.add((cells[0], int(cells[1]), causal, int(cells[3]), int(cells[4]), int(cells[5]), variant, config))
    want = {(c["dtype"], c["head_dim"], c["causal"], c["size"], c["seq"], c["variant"], c["config"])
            for d in table["devices"] for c in d["choices"]}
    assert rows == want
    want_exact = {(e["dtype"], e["head_dim"], e["causal"], e["batch"], e["heads"], e["seqlen"], e["variant"],
                   e["config"]) for d in table["devices"] for e in d["exact"]}
    assert want_exact and exact == want_exact
    assert table["source_pack"] in region
    assert set(docsgen.PACK_ID.findall(region)) == {table["source_pack"]}
    fb_variant, fb_config = dispatch.fallback()
    assert f"`{fb_variant}` `{fb_config}`" in region


OLD_API_PARAGRAPH = """With `variant=None` (the default) the call runs the kernel that `python/evpack/dispatch_table.json`
names for the device (compute capability, then GPU name) and the shape class (dtype, head dim,
causal, and batch x heads below or above the device's SM count): on an H200, `mma` `m64n64w4s2` for
the canonical fp16 D=64 shape. The table is never typed by hand: `evpack.dispatch.generate_table(pack)`
derives it from the benchmark of an `evidence:complete` reference pack (for each class, the
(variant, config) with the smallest geometric mean of median times over the class's shapes, among
those that ran within their error bound on all of them), and it names that pack
(`source_pack`, today `20261121T142018Z-b40b5c2fd4c6`); `tests/test_dispatch.py` re-generates it from
the pack and compares. An explicit `variant` (and `config`) always wins; a device or class with no
row gets the registry's first tensor variant (`wmma`, its first config)."""  # README.md at b2997d5


def test_default_claims_that_drifted_from_the_table_are_named():
    table = dispatch.load_table()
    problems = docsgen.default_claim_problems(OLD_API_PARAGRAPH, table)
    assert any("mma m64n64w4s2" in p for p in problems), problems
    assert any("20261121T142018Z-b40b5c2fd4c6" in p for p in problems), problems
    chosen = table["devices"][0]["choices"][0]
    fixed = (OLD_API_PARAGRAPH.replace("`mma` `m64n64w4s2`", f"`{chosen['variant']}` `{chosen['config']}`")
             .replace("20261121T142018Z-b40b5c2fd4c6", table["source_pack"]))
    assert docsgen.default_claim_problems(fixed, table) == []
    other = f"The default is `variant=\"scalar\", config=\"{registry.get('scalar').configs[0].name}\"`."
    assert docsgen.default_claim_problems(other, table)
    assert docsgen.default_claim_problems(other.replace("default", "control"), table) == []
    # a table that moves on makes yesterday's true statement stale
    moved = {**table, "source_pack": "20991231T000000Z-0123456789ab"}
    assert docsgen.default_claim_problems(fixed, moved)


def test_the_api_doc_and_the_readme_name_no_default_kernel_the_table_does_not_choose():
    table = dispatch.load_table()
    for doc in (API_DOC, README):
        lines = doc.read_text().split("\n")
        prose = docsgen._outside_regions(lines, docsgen.find_regions(lines, str(doc)))
        assert docsgen.default_claim_problems(prose, table) == [], doc.name


def test_the_canary_table_agrees_with_the_canary_stage():
    """Each canary row names the stage stages/canaries.py reads its result from and that stage's gate."""
    region = _region((REPO / "docs" / "gates-and-canaries.md").read_text(), "canaries")
    for c in registry.CANARIES:
        row = next(line for line in region.splitlines() if f"`{c.name}`" in line)
        stage = canaries_stage.source_stage(c.expect_caught_by)
        assert f"| `{stage}` | `{model.GATE_OF_STAGE[stage]}` |" in row, row


def test_docsgen_reads_the_noxfile_without_importing_nox():
    tree = ast.parse((REPO / "python" / "evpack" / "docsgen.py").read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "nox" not in imported
