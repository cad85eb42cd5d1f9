"""The package's layers: no import cycles among evpack's modules, nothing edits the import path."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "python" / "evpack"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
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
    files = {_module_name(p): p for p in root.rglob("*.py")}
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
