"""The package's layers (evpack/layers.py): every import runs down, no import cycles, nothing edits the import path."""
from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "python" / "evpack"


def _module_name(path: Path, root: Path = PACKAGE) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, name: str) -> set[str]:
    """evpack modules that `path` imports, at module level or inside functions (both can cycle)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("evpack")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("evpack"):
                continue
            if node.module:  # `from . import registry` names the submodule, not the package's __init__
                out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}
    return out


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    files = {_module_name(p, root): p for p in root.rglob("*.py")}
    return {name: {m for m in _imports(p, name) if m in files and m != name} for name, p in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (c := visit(m)):
                return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (c := visit(n)):
            return c
    return None


def room(module: str) -> str:
    """The room of a module: its top-level module or subpackage under evpack (layers.py)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_table() -> dict[str, tuple[int, str]]:
    """room -> (layer index, layer name); a room named twice is an error."""
    from evpack.layers import LAYERS

    out: dict[str, tuple[int, str]] = {}
    for i, (name, rooms) in enumerate(LAYERS):
        for r in rooms:
            assert r not in out, f"{r} is in two layers: {out[r][1]} and {name}"
            out[r] = (i, name)
    return out


def layer_problems(graph: dict[str, set[str]], table: dict[str, tuple[int, str]]) -> list[str]:
    """Every module without a layer, every table row without a module, and every import that runs up."""
    rooms = {room(m) for m in graph}
    out = [f"{m}: its room {room(m)!r} is in no layer of evpack/layers.py" for m in sorted(graph)
           if room(m) not in table]
    out += [f"layers.py names {r!r}, which is no module or package of evpack" for r in sorted(set(table) - rooms)]
    for m in sorted(graph):
        for t in sorted(graph[m]):
            if room(m) in table and room(t) in table and table[room(t)][0] > table[room(m)][0]:
                out.append(f"{m} (layer {table[room(m)][1]}) imports {t} (layer {table[room(t)][1]}, higher)")
    return out


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m, targets in graph.items():
        out.setdefault(room(m), set()).update(room(t) for t in targets if room(t) != room(m))
    return out


def test_every_module_has_one_layer_and_every_import_runs_down():
    assert layer_problems(import_graph(), layer_table()) == []


def test_the_rooms_import_each_other_without_a_cycle():
    cycle = find_cycle(room_graph(import_graph()))
    assert cycle is None, " -> ".join(cycle)


def test_at_most_eleven_layers():
    from evpack.layers import LAYERS

    assert 1 <= len(LAYERS) <= 11


def test_the_layer_check_names_planted_faults(tmp_path):
    """An upward import inside a function, an upward import at module level, a module in no layer and a
    cycle between two rooms of one layer, each planted in a copy of the package, are each named."""
    copy = tmp_path / "evpack"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    table = layer_table()
    assert layer_problems(import_graph(copy), table) == []  # the copy is as clean as the package
    jsonio = copy / "jsonio.py"
    jsonio.write_text(jsonio.read_text() + "\n\ndef _planted():\n    from .cli import main\n\n    return main\n")
    (copy / "timing" / "stats.py").write_text((copy / "timing" / "stats.py").read_text() +
                                              "\nfrom ..stages import base as _planted  # noqa\n")
    (copy / "newroom.py").write_text("from . import jsonio\n")
    problems = layer_problems(import_graph(copy), table)
    assert any(p.startswith("evpack.jsonio (layer base) imports evpack.cli (layer interface") for p in problems)
    assert any(p.startswith("evpack.timing.stats (layer timing) imports evpack.stages.base (layer stages")
               for p in problems)
    assert "evpack.newroom: its room 'newroom' is in no layer of evpack/layers.py" in problems
    assert all(p.startswith(("evpack.newroom:", "evpack.jsonio ", "evpack.timing.stats ")) for p in problems), problems
    gates = copy / "gates.py"
    gates.write_text(gates.read_text() + "\nfrom . import verify as _planted  # noqa\n")
    assert find_cycle(room_graph(import_graph(copy))) is not None


def closure(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for m in graph.get(todo.pop(), ()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def test_pack_and_the_low_layers_reach_nothing_that_imports_the_torch_op():
    """The op (evpack.op, evpack.api and the package's __init__ that fronts it) sits in layer `build and
    op`: nothing below it, and not the pack writer, reaches it through any chain of imports."""
    graph, table = import_graph(), layer_table()
    op_layer = table["api"][0]
    op = {"evpack", "evpack.api", "evpack.op", "evpack.timing.ab_runner", "evpack.timing.shape_runner"}
    low = [m for m in graph if table[room(m)][0] < op_layer] + ["evpack.pack", "evpack.verify"]
    hits = {m: sorted(closure(graph, m) & op) for m in low}
    assert {m: h for m, h in hits.items() if h} == {}
    assert "evpack.api" in closure(graph, "evpack.stages.bench")  # the check sees a chain that does reach it


def test_find_cycle_sees_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert "evpack.verify" in graph and graph["evpack.verify"], "the graph must see verify's imports"
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_nothing_edits_the_import_path():
    pattern = re.compile(r"sys\.path\.(insert|append)")
    sources = [*(REPO / "python").rglob("*.py"), *(REPO / "oracles").rglob("*.py"), REPO / "noxfile.py",
               REPO / "setup.py"]
    hits = [f"{p.relative_to(REPO)}:{i}" for p in sources for i, line in enumerate(p.read_text().splitlines(), 1)
            if pattern.search(line)]
    assert hits == []


def test_verify_imports_nothing_outside_the_standard_library():
    """A reviewer verifies on a bare Python: no third-party module on verify's import closure."""
    import subprocess
    import sys

    code = ("import sys, evpack.verify; import evpack.stages.order as o\n"
            "[o.stage_module(s) for s in o.STAGE_ORDER]\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "{'torch','numpy','pandas','matplotlib','jinja2','markdown_it','scipy'})\n"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_no_module_takes_a_name_from_the_package_that_holds_the_op():
    """evpack/__init__.py holds the torch op (flash_attention): a module that imports a name from it (as
    pack.py once took __version__) sits above the op. Names live in the module that defines them
    (version.py, model.py)."""
    hits = []
    for path in PACKAGE.rglob("*.py"):
        name = _module_name(path)
        if name == "evpack":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module is None and node.level:
                pkg = (name if path.name == "__init__.py" else name.rsplit(".", 1)[0]).split(".")
                target = ".".join(pkg[: len(pkg) - node.level + 1])
                if target == "evpack":
                    hits += [f"{name}: from {'.' * node.level} import {a.name}" for a in node.names
                             if f"evpack.{a.name}" not in import_graph_files()]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "evpack":
                hits += [f"{name}: from evpack import {a.name}" for a in node.names
                         if f"evpack.{a.name}" not in import_graph_files()]
    assert hits == []


def import_graph_files() -> set[str]:
    return {_module_name(p) for p in PACKAGE.rglob("*.py")}


def test_the_package_exports_the_schema_packs_are_written_with():
    import evpack
    from evpack import model, version

    assert evpack.PACK_SCHEMA_VERSION == model.SCHEMA_VERSION and evpack.__version__ == version.__version__
    assert _imports(PACKAGE / "version.py", "evpack.version") == set()  # a leaf: nothing to pull in
