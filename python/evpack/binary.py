"""The one binary: which shared object a process loaded, and its SHA-256.

Every stage that loads the kernels records `binary.json` ({"module", "path",
"sha256"}) in its stage folder; the pack gate `one_binary` requires every
recorded digest to equal the one the build stage recorded and the SASS stage
disassembled.
"""
from __future__ import annotations

import hashlib
import importlib
from pathlib import Path


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def find_built(repo: Path, module: str = "_C") -> Path | None:
    """The built extension file python/evpack/<module>*.so, if any."""
    hits = sorted((repo / "python" / "evpack").glob(f"{module}.*.so")) + sorted(
        (repo / "python" / "evpack").glob(f"{module}.so"))
    return hits[0] if hits else None


def loaded_binary(module: str = "evpack._C") -> dict:
    """Import the extension (if not yet) and describe the file this process actually loaded."""
    mod = importlib.import_module(module)
    path = Path(mod.__file__).resolve()
    return {"module": module, "path": str(path), "sha256": sha256_file(path)}
