"""The recorded parts of a cell's keys, hashed from the checkout at run time (no pack file holds them).

  source  the variant's kernel body (registry `source`) and every source the extension is built from that is
          not another variant's body: csrc/ but csrc/variants/, setup.py and the build modules. A change to a
          shared header or to the bindings changes every variant's key; a change to one body, that variant's.
  check   the check code of a stage: every file of oracles/ (the programs the cells run and the canaries)
          and the Python files the stage module and the oracle programs import, transitively (evpack's
          modules and the stage package's own), found by reading their import statements.
"""
from __future__ import annotations

import ast
from pathlib import Path
from types import ModuleType

from .. import registry
from ..buildgen import files_digest

BUILD_FILES = ("setup.py", "python/evpack/buildgen.py", "python/evpack/buildtools.py")
_EVPACK = Path(__file__).resolve().parents[1]  # python/evpack


def source_digest(repo: Path, variant: str) -> str:
    """SHA-256 over the variant's body and the shared sources of the extension."""
    var = registry.get(variant)
    csrc = repo / "csrc"
    shared = [p for p in csrc.rglob("*") if p.is_file() and "variants" not in p.relative_to(csrc).parts[:1]]
    files = shared + [repo / var.source] + [repo / f for f in BUILD_FILES if (repo / f).is_file()]
    return files_digest(repo, files)


def _imported_files(path: Path) -> set[Path]:
    """The Python files `path` imports (at any depth of the module: imports inside functions too) that live in
    the evpack package or, for relative imports, in the importing file's own package; with their packages'
    __init__.py files, which run on import."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[Path] = set()
    for node in ast.walk(tree):
        names: list[tuple[Path, list[str]]] = []
        if isinstance(node, ast.Import):
            names = [(_EVPACK.parent, a.name.split(".")) for a in node.names if a.name.split(".")[0] == "evpack"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                parts = node.module.split(".") if node.module else []
            elif node.module and node.module.split(".")[0] == "evpack":
                base, parts = _EVPACK.parent, node.module.split(".")
            else:
                continue
            names = [(base, parts + [a.name]) for a in node.names] + [(base, parts)]
        for base, parts in names:
            out |= _module_files(base, parts)
    return out


def _module_files(base: Path, parts: list[str]) -> set[Path]:
    """The files that importing base/parts[0]/.../parts[-1] runs (packages' __init__.py, then the module);
    a trailing part that is a name, not a module, adds nothing."""
    out, here = set(), base
    for part in parts:
        if (here / part / "__init__.py").is_file():
            here = here / part
            out.add(here / "__init__.py")
        elif (here / f"{part}.py").is_file():
            out.add(here / f"{part}.py")
            break
        else:
            break
    return out


def import_closure(starts) -> set[Path]:
    seen: set[Path] = set()
    todo = [Path(p).resolve() for p in starts]
    while todo:
        p = todo.pop()
        if p in seen or p.suffix != ".py" or not p.is_file():
            continue
        seen.add(p)
        todo += [q.resolve() for q in _imported_files(p) if q.resolve() not in seen]
    return seen


def check_digest(repo: Path, stage_module: ModuleType) -> str:
    """SHA-256 over oracles/ and the import closure of the stage module and the oracle programs."""
    oracles = [p for p in (repo / "oracles").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    code = import_closure([Path(stage_module.__file__), *(p for p in oracles if p.suffix == ".py"),
                           _EVPACK / "__init__.py"])
    return files_digest(repo, [*oracles, *code])
