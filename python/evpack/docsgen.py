"""The docs' generated regions: tables read from the code, so the docs cannot drift from it.

A region in a Markdown file (README.md, docs/**/*.md) is

    <!-- generated:NAME -->
    ...text this module writes...
    <!-- /generated:NAME -->

`python -m evpack.docsgen` rewrites every region; `python -m evpack.docsgen --check` writes nothing and
exits 1 naming each stale region, each region no doc holds, and each default-kernel claim of the prose
that `dispatch_table.json` does not make. Everything comes from the code: the gates (model.STAGE_GATES,
gates.py), the canaries (registry.CANARIES and the stage that catches each, stages/canaries.py), the
finer labels (labels.py), the stages (stages/order.py and each stage module), the nox sessions
(noxfile.py read with `ast`: nox is never imported), the command line (cli.build_parser), the variants
(registry.VARIANTS) and the default kernels (dispatch_table.json). Top layer: nothing imports it.
"""
from __future__ import annotations

import argparse
import ast
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import cli, dispatch, gates, labels, model, registry
from .jsonio import write_text
from .records.dispatch import DispatchTable
from .records.view import view
from .stages import canaries as canaries_stage
from .stages import order

REPO = Path(__file__).resolve().parents[2]
OPEN = re.compile(r"^<!-- generated:(?P<name>[a-z0-9-]+) -->\s*$")
CLOSE = re.compile(r"^<!-- /generated:(?P<name>[a-z0-9-]+) -->\s*$")
NOTE = "<!-- Written by `python -m evpack.docsgen` from {src}. Edit the code, not this table. -->"
PACK_ID = re.compile(r"\b\d{8}T\d{6}Z-[0-9a-z]+\b")


class DocsError(ValueError):
    """A doc whose regions cannot be read (unknown, unclosed or nested markers) or code that cannot be read."""


@dataclass(frozen=True)
class Ctx:
    """What a generator may depend on: the repository root and the folder of the doc it writes into."""

    root: Path
    doc_dir: Path

    def link(self, repo_path: str) -> str:
        """A repository path as a link relative to the doc."""
        return Path(os.path.relpath(self.root / repo_path, self.doc_dir)).as_posix()


@dataclass(frozen=True)
class Region:
    name: str
    start: int  # index of the opening marker line
    end: int  # index of the closing marker line


@dataclass(frozen=True)
class Finding:
    path: Path
    what: str  # one line

    def line(self, root: Path) -> str:
        try:
            rel = self.path.relative_to(root)
        except ValueError:
            rel = self.path
        return f"{rel.as_posix()}: {self.what}"


@dataclass(frozen=True)
class Result:
    stale: tuple[Finding, ...]  # regions whose text differs from what the code gives (rewritten unless check)
    missing: tuple[str, ...]  # generated regions that no doc holds
    claims: tuple[Finding, ...]  # prose that names a default kernel dispatch_table.json does not choose
    written: tuple[Path, ...]

    @property
    def ok(self) -> bool:
        return not (self.stale or self.missing or self.claims)


# ---- Markdown helpers ------------------------------------------------------------------------------------

_ESCAPE = re.compile(r"([\\`*_\[\]|<>#])")


def text(value: object) -> str:
    """Prose from the code as one line of Markdown text: whitespace folded, Markdown syntax escaped."""
    return _ESCAPE.sub(r"\\\1", re.sub(r"\s+", " ", str(value)))


def code(value: object) -> str:
    """A code span (the name of a gate, file, option); a backtick inside widens the fence. A `|` splits it
    into spans joined by an escaped `|` outside them (a pipe inside a code span breaks table cells)."""
    s = " ".join(str(value).split())
    if "|" in s:
        return " \\| ".join(code(part) for part in s.split("|"))
    fence = "``" if "`" in s else "`"
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def prose(value: object) -> str:
    """Text from a docstring or help string: its `code spans` kept as code, the rest escaped as text()."""
    parts = re.split(r"(`[^`]+`)", " ".join(str(value).split()))
    return "".join(code(p[1:-1]) if p.startswith("`") and p.endswith("`") and len(p) > 1 else text(p)
                   for p in parts).strip()


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """A Markdown table; cells are Markdown already (use text() / code())."""
    for r in rows:
        if len(r) != len(header):
            raise DocsError(f"table row {r!r} has {len(r)} cells, the header {len(header)}")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c if c else " " for c in r) + " |" for r in rows]
    return "\n".join(lines)


def first_paragraph(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def _summary(doc: str | None) -> str:
    """A stage module's first docstring paragraph without its "Stage `x`:" / "X stage:" lead-in."""
    s = re.sub(r"^(Stage `?\w+`?|\w+ stage):\s*", "", first_paragraph(doc))
    return s[:1].upper() + s[1:]


# ---- generators: one per region ----------------------------------------------------------------------

def _schemas_holding(name: str, required: dict[int, tuple[str, ...]]) -> str:
    versions = [str(v) for v in sorted(required) if name in required[v]]
    return ", ".join(versions) if versions else "none yet"


def _cross_stage_question(gate: str) -> str:
    fn = getattr(gates, f"{gate}_gate", None)
    return first_paragraph(getattr(fn, "__doc__", None)) or "decided from several stages' files"


def gen_gates(ctx: Ctx) -> str:
    finer: dict[str, list[str]] = {}
    for label, needs in labels.FINER.items():
        for g in needs:
            finer.setdefault(g, []).append(label)
    rows = []
    for gate in model.GATE_ORDER:
        if gate in model.STAGE_GATES:
            stage, question = model.STAGE_GATES[gate]
            stage_cell = code(stage)
        else:
            stage_cell, question = "(several)", _cross_stage_question(gate)
        rows.append((code(gate), stage_cell, prose(question), ", ".join(code(x) for x in finer.get(gate, [])),
                     _schemas_holding(gate, model.REQUIRED_GATES)))
    return table(("gate", "stage", "passes when", "finer labels it feeds", "required in pack schema"), rows)


def gen_canaries(ctx: Ctx) -> str:
    rows = []
    for c in registry.CANARIES:
        try:
            stage = canaries_stage.source_stage(c.expect_caught_by)
        except KeyError as exc:
            raise DocsError(f"canary {c.name}: stages/canaries.py knows no stage for the check "
                            f"{c.expect_caught_by!r}") from exc
        gate = model.GATE_OF_STAGE.get(stage)
        if gate is None:
            raise DocsError(f"canary {c.name}: stage {stage!r} decides no gate in model.STAGE_GATES")
        built = [c.kind, "/".join(c.dtypes), "D" + "/".join(map(str, c.head_dims))]
        if c.archs:
            built.append("sm_" + "/".join(c.archs))
        rows.append((f"[{code(c.name)}]({ctx.link(c.source)})", prose(c.description), code(c.expect_caught_by),
                     code(stage), code(gate), text(", ".join(built)), _schemas_holding(c.name, model.REQUIRED_CANARIES)))
    return table(("canary", "planted fault", "caught by", "stage", "gate", "built as", "required in pack schema"),
                 rows)


def gen_labels(ctx: Ctx) -> str:
    rows = [(code(label), ", ".join(code(g) for g in needs)) for label, needs in labels.FINER.items()]
    return table(("finer label", "set when every one of these gates passes"), rows)


def gen_stages(ctx: Ctx) -> str:
    rows = []
    gates_of: dict[str, list[str]] = {}
    for gate, (stage, _q) in model.STAGE_GATES.items():
        gates_of.setdefault(stage, []).append(gate)
    for name in order.STAGE_ORDER:
        mod = order.stage_module(name)
        files = getattr(mod, "REQUIRED_FILES", None) or ()
        rows.append((f"[{code(name + '/')}]({ctx.link('python/evpack/stages/' + name + '.py')})",
                     ", ".join(code(g) for g in gates_of.get(name, [])) or "none",
                     "yes" if mod.NEEDS_GPU else "no",
                     ", ".join(code(d) for d in order.DEPENDS_ON.get(name, ())) or "nothing",
                     ", ".join(code(f) for f in files) or "none",
                     prose(_summary(mod.__doc__))))
    body = table(("stage (folder)", "decides gate", "needs a GPU", "needs", "raw files `verify` requires",
                  "what it does"), rows)
    run = ", ".join(code(s) for s in order.RUN_ORDER)
    groups = "; ".join(f"{code(g)} = {', '.join(code(s) for s in members)}" for g, members in order.GROUPS.items())
    return f"{body}\n\nRun order of `evidence`: {run}. Groups: {groups}."


_DECORATOR_NAMES = ("nox.session", "session")


def _decorator_target(dec: ast.expr) -> tuple[str, ast.Call | None]:
    call = dec if isinstance(dec, ast.Call) else None
    fn = dec.func if call is not None else dec
    return ast.unparse(fn), call


@dataclass(frozen=True)
class NoxSession:
    name: str
    doc: str
    default: bool


def nox_sessions(source: str) -> list[NoxSession]:
    """The sessions a noxfile defines (functions decorated with nox.session), read with ast; the default
    sessions are those `nox.options.sessions` names (all of them when it is not set)."""
    tree = ast.parse(source)
    defaults: list[str] | None = None
    found: list[tuple[str, str]] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(ast.unparse(t) == "nox.options.sessions" for t in node.targets):
            try:
                defaults = [str(x) for x in ast.literal_eval(node.value)]
            except ValueError as exc:
                raise DocsError("noxfile.py: nox.options.sessions is not a literal list") from exc
        if not isinstance(node, ast.FunctionDef):
            continue
        for dec in node.decorator_list:
            target, call = _decorator_target(dec)
            if target not in _DECORATOR_NAMES:
                continue
            name = node.name
            for kw in (call.keywords if call else []):
                if kw.arg == "name":
                    try:
                        name = str(ast.literal_eval(kw.value))
                    except ValueError as exc:
                        raise DocsError(f"noxfile.py: session {node.name}: name= is not a literal") from exc
            found.append((name, first_paragraph(ast.get_docstring(node))))
    return [NoxSession(n, d, defaults is None or n in defaults) for n, d in found]


def gen_nox(ctx: Ctx) -> str:
    path = ctx.root / "noxfile.py"
    try:
        sessions = nox_sessions(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError) as exc:
        raise DocsError(f"noxfile.py: cannot read its sessions: {exc}") from exc
    rows = [(code(f"nox -s {s.name}"), "yes" if s.default else "", prose(s.doc) or "(no docstring)")
            for s in sessions]
    return table(("session", "default", "what it runs"), rows)


def _option_rows(parser: argparse.ArgumentParser, root: Path) -> list[tuple[str, ...]]:
    rows = []
    for act in parser._actions:
        if isinstance(act, argparse._HelpAction) or act.help == argparse.SUPPRESS:
            continue
        name = ", ".join(act.option_strings) if act.option_strings else (act.metavar or act.dest)
        if act.choices is not None:
            value = "|".join(map(str, act.choices))
        elif act.nargs == 0:
            value = ""
        else:
            value = str(act.metavar or act.dest.upper()) if act.option_strings else ""
        if act.nargs in ("+", "*"):
            value = (value or name) + " ..."
        default = act.default
        if isinstance(default, Path):
            default = Path(os.path.relpath(default, root)).as_posix() if default.is_absolute() else default.as_posix()
        shown = "" if default in (None, False, [], argparse.SUPPRESS) else code(default)
        if act.required:
            shown = "required"
        rows.append((code(name), code(value) if value else "", shown, prose(act.help or "")))
    return rows


def _sentence(help_: str) -> str:
    s = prose(help_)
    return (s[:1].upper() + s[1:]).rstrip(".") + "."


def gen_cli(ctx: Ctx) -> str:
    ap = cli.build_parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help or "" for c in sub._choices_actions}
    groups: list[tuple[list[str], argparse.ArgumentParser, list[tuple[str, ...]], tuple]] = []
    for name, parser in sub.choices.items():
        if name.startswith("_") or name not in helps:
            continue  # internal commands (one process of a GPU stage, one bench shard): not listed
        rows = _option_rows(parser, ctx.root)
        # commands that differ only by their own name (the stage commands) share one entry
        shape = (helps[name].replace(name, "{}"), (parser.description or "").replace(name, "{}"), parser.epilog)
        for g in groups:
            if g[2] == rows and g[3] == shape:
                g[0].append(name)
                break
        else:
            groups.append(([name], parser, rows, shape))
    out = []
    for names, parser, rows, shape in groups:
        out += ["### " + ", ".join(f"`{n}`" for n in names), ""]
        out.append(_sentence(helps[names[0]] if len(names) == 1 else shape[0].replace("{}", "named")))
        desc = (parser.description or "") if len(names) == 1 else shape[1].replace("{}", "named")
        if parser.formatter_class is argparse.RawDescriptionHelpFormatter and "\n" in desc:
            out += ["", "```text", desc.rstrip(), "```"]
        elif desc:
            out += ["", _sentence(desc)]
        out += ["", table(("option", "value", "default", "meaning"), rows) if rows else "No options."]
        if parser.epilog:
            out += ["", _sentence(parser.epilog)]
        out.append("")
    return "\n".join(out).rstrip()


def gen_variants(ctx: Ctx) -> str:
    rows = []
    for v in registry.VARIANTS:
        configs = ", ".join(code(c.name) + (f" (D={'/'.join(map(str, c.head_dims))} only)" if c.head_dims else "")
                            for c in v.configs)
        rows.append((code(v.name), code(v.kind), configs, "/".join(v.dtypes),
                     "/".join(map(str, v.head_dims)), ", ".join(f"sm_{a}" for a in v.archs) or "every arch of the build",
                     f"[{code(v.source)}]({ctx.link(v.source)})", prose(v.description)))
    return table(("variant", "kind", "configs (the first when `config` is not given)", "dtypes", "head dims", "built for", "source",
                  "design"), rows)


def _kernel_cells(row) -> tuple[str, str, str]:
    """A dispatch row's dtype, head dim and mask as table cells."""
    return text(row.dtype), str(row.head_dim), "yes" if row.causal else "no"


def _runner_cell(ru, us) -> str:
    return f"{code(ru.variant + ' ' + ru.config)} {us} µs" if ru.raw else "none"


def gen_dispatch(ctx: Ctx) -> str:
    tbl = dispatch.load_table()
    fb_variant, fb_config = dispatch.fallback()
    fallback = (f"A device or shape class the table has no row for (or whose row names a kernel that is not "
                f"registered or does not take the dtype and head dim) gets the registry's first tensor variant and "
                f"its first config: {code(fb_variant)} {code(fb_config)}.")
    if tbl is None:
        return f"There is no readable `dispatch_table.json`. {fallback}"
    tbl = view(DispatchTable, tbl)
    head = (f"`dispatch_table.json` was generated by {code(tbl.generated_by)} from the reference pack "
            f"{code(tbl.source_pack)} (commit {code(str(tbl.source_commit)[:12])}, "
            f"{code(tbl.source_label)}, {text(tbl.mode)} mode). Its rule: {prose(tbl.rule)}.")
    out = [head, ""]
    for dev in tbl.devices:
        out.append(f"**{text(dev.name)}** (compute capability {text(dev.capability)}, {text(dev.sm_count)} SMs):")
        out.append("")
        rows = [(*_kernel_cells(c), text(c.size), text(c.seq), code(f"{c.variant} {c.config}"), f"{c.geomean_us} µs",
                 _runner_cell(c.runner_up, c.runner_up.geomean_us), str(len(c.shapes or []))) for c in dev.choices]
        out.append(table(("dtype", "head dim", "causal", "size", "seq", "default kernel", "geomean", "runner-up",
                          "shapes measured"), rows))
        out.append("")
        if dev.exact:
            out.append(f"A call of exactly a shape the pack measured, on a device named {text(dev.name)} with "
                       f"{text(dev.sm_count)} SMs, gets that shape's fastest kernel instead of its class's:")
            out.append("")
            rows = [(*_kernel_cells(e), str(e.batch), str(e.heads), str(e.seqlen), code(f"{e.variant} {e.config}"),
                     f"{e.median_us} µs", _runner_cell(e.runner_up, e.runner_up.median_us)) for e in dev.exact]
            out.append(table(("dtype", "head dim", "causal", "batch", "heads", "seq len", "default kernel", "median",
                              "runner-up"), rows))
            out.append("")
    out.append(fallback)
    return "\n".join(out)


GENERATORS: dict[str, tuple[Callable[[Ctx], str], str]] = {
    "gates": (gen_gates, "python/evpack/model.py, gates.py and labels.py"),
    "canaries": (gen_canaries, "python/evpack/registry.py (CANARIES), stages/canaries.py and model.py"),
    "labels": (gen_labels, "python/evpack/labels.py"),
    "stages": (gen_stages, "python/evpack/stages/order.py and the stage modules"),
    "nox-sessions": (gen_nox, "noxfile.py (read with ast)"),
    "cli": (gen_cli, "python/evpack/cli.py (build_parser)"),
    "variants": (gen_variants, "python/evpack/registry.py (VARIANTS)"),
    "dispatch": (gen_dispatch, "python/evpack/dispatch_table.json and dispatch.fallback()"),
}


# ---- regions ---------------------------------------------------------------------------------------------

def find_regions(lines: list[str], where: str = "") -> list[Region]:
    """The generated regions of a doc's lines. Raises DocsError on a marker that does not pair up."""
    regions, open_at, open_name = [], None, None
    for i, line in enumerate(lines):
        if m := OPEN.match(line):
            name = m["name"]
            if open_name is not None:
                raise DocsError(f"{where}:{i + 1}: region {name!r} opens inside region {open_name!r}")
            if name not in GENERATORS:
                raise DocsError(f"{where}:{i + 1}: unknown generated region {name!r} "
                                f"(known: {', '.join(GENERATORS)})")
            open_at, open_name = i, name
        elif m := CLOSE.match(line):
            name = m["name"]
            if open_name != name:
                raise DocsError(f"{where}:{i + 1}: closing marker of {name!r} "
                                + (f"inside region {open_name!r}" if open_name else "with no region open"))
            regions.append(Region(open_name, open_at, i))
            open_at, open_name = None, None
        elif "generated:" in line and line.lstrip().startswith("<!--"):
            raise DocsError(f"{where}:{i + 1}: malformed region marker {line.strip()!r}")
    if open_name is not None:
        raise DocsError(f"{where}:{open_at + 1}: region {open_name!r} is never closed")
    return regions


def doc_files(root: Path) -> list[Path]:
    docs = root / "docs"
    return [p for p in [root / "README.md", *sorted(docs.rglob("*.md"))] if p.is_file()]


def region_body(name: str, ctx: Ctx, cache: dict) -> list[str]:
    key = (name, ctx.doc_dir)
    if key not in cache:
        fn, src = GENERATORS[name]
        try:
            body = fn(ctx)
        except DocsError:
            raise
        except (AttributeError, KeyError, LookupError, TypeError, ValueError, ImportError) as exc:
            # the code moved under the generator (a renamed table, a new record shape): one line that says where
            raise DocsError(f"region {name!r} cannot be written from {src}: {type(exc).__name__}: {exc}") from exc
        cache[key] = [NOTE.format(src=src), *body.split("\n")]
    return cache[key]


def render(path: Path, text_: str, root: Path, cache: dict, where: str = "") -> tuple[str, list[str]]:
    """The doc with every region rewritten, and the names of the regions that changed."""
    lines = text_.split("\n")
    regions = find_regions(lines, where or str(path))
    ctx = Ctx(root, path.parent)
    out, pos, changed = [], 0, []
    for r in regions:
        body = region_body(r.name, ctx, cache)
        out += lines[pos: r.start + 1] + body
        if lines[r.start + 1: r.end] != body:
            changed.append(r.name)
        pos = r.end
    out += lines[pos:]
    return "\n".join(out), changed


# ---- default-kernel claims in prose --------------------------------------------------------------------

def _outside_regions(lines: list[str], regions: list[Region]) -> str:
    keep = [True] * len(lines)
    for r in regions:
        for i in range(r.start, r.end + 1):
            keep[i] = False
    return "\n".join(line if k else "" for line, k in zip(lines, keep, strict=True))


def default_claim_problems(prose: str, table_: dict | None) -> list[str]:
    """Prose paragraphs that speak of the default kernel (the word 'default' or the dispatch table) must name
    only kernels the table chooses (or the registry fallback) and only the table's source pack."""
    tbl = view(DispatchTable, table_)
    chosen = {c.kernel for d in tbl.devices for c in (*d.choices, *d.exact)}
    chosen.add(dispatch.fallback())
    source = tbl.source_pack
    names = "|".join(sorted((re.escape(v.name) for v in registry.VARIANTS), key=len, reverse=True))
    configs = "|".join(sorted({re.escape(c.name) for v in registry.VARIANTS for c in v.configs}, key=len,
                              reverse=True))
    kernel = re.compile(rf"(?<![\w-])({names})(?![\w-])[`'\"\s/,:]*(?:config\s*=\s*)?[`'\"]?({configs})(?![\w-])")
    problems = []
    for para in re.split(r"\n\s*\n", prose):
        if not re.search(r"\bdefault\b|dispatch.table", para, flags=re.I):
            continue
        head = " ".join(para.split())[:60]
        for variant, config in kernel.findall(para):
            if (variant, config) not in chosen:
                problems.append(f"names {variant} {config} as a default kernel, which dispatch_table.json does not "
                                f"choose (paragraph {head!r}...)")
        for pack in PACK_ID.findall(para):
            if pack != source:
                problems.append(f"names pack {pack} beside the default kernels; dispatch_table.json comes from "
                                f"{source} (paragraph {head!r}...)")
    return problems


# ---- the run --------------------------------------------------------------------------------------------

def refresh(root: Path = REPO, *, check: bool = False) -> Result:
    """Rewrite (or, with check, only compare) every generated region under root; DocsError on a bad doc."""
    cache: dict = {}
    stale, claims, written, seen = [], [], [], set()
    table_ = dispatch.load_table()
    outputs = {}
    for path in doc_files(root):
        where = path.relative_to(root).as_posix()
        old = path.read_text(encoding="utf-8")
        new, changed = render(path, old, root, cache, where)
        seen |= {r.name for r in find_regions(old.split("\n"), where)}
        stale += [Finding(path, f"generated region {n!r} is stale") for n in changed]
        lines = new.split("\n")
        prose = _outside_regions(lines, find_regions(lines, where))
        claims += [Finding(path, p) for p in default_claim_problems(prose, table_)]
        if new != old:
            outputs[path] = new
    if not check:
        for path, new in outputs.items():
            write_text(path, new)
            written.append(path)
    missing = tuple(n for n in GENERATORS if n not in seen)
    return Result(tuple(stale), missing, tuple(claims), tuple(written))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evpack.docsgen", allow_abbrev=False,
                                 description="Rewrite the docs' generated regions (tables of gates, canaries, "
                                             "labels, stages, nox sessions, CLI options, variants, default kernels) "
                                             "from the code.",
                                 epilog="exit status: 0 the docs are current (or were rewritten); 1 --check found a "
                                        "stale or missing region or a default-kernel claim the table does not make; "
                                        "2 a doc or the code cannot be read")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 naming every stale region")
    ap.add_argument("--root", type=Path, default=REPO,
                    help="repository root whose README.md, docs/ and noxfile.py are read and written (default: this "
                         "checkout); the other tables come from the imported evpack package")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    try:
        result = refresh(root, check=args.check)
    except (DocsError, OSError, SyntaxError, UnicodeDecodeError) as exc:
        print(f"docsgen: {exc}", file=sys.stderr)
        return 2
    for f in result.stale:
        print(f.line(root) + ("" if args.check else ": rewritten"), file=sys.stderr if args.check else sys.stdout)
    for n in result.missing:
        print(f"generated region {n!r} appears in no doc (README.md, docs/)", file=sys.stderr)
    for f in result.claims:
        print(f.line(root), file=sys.stderr)
    if args.check and result.stale:
        print("run `python -m evpack.docsgen` to rewrite the stale regions", file=sys.stderr)
    if result.missing or result.claims or (args.check and result.stale):
        return 1
    if not args.check:
        print(f"docs current ({len(result.written)} file(s) rewritten)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
