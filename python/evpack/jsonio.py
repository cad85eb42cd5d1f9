"""JSON and text files of a pack: strict reads, atomic writes (temp file + rename)."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def read_json(path: Path) -> Any:
    """Parse a JSON file. NaN and Infinity are accepted: raw files of oracle programs (and packs made by
    older code) may hold them, and a pack is read as it is; what this package writes is strict."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def json_safe(obj: Any) -> Any:
    """The object with every non-finite float (NaN, +-inf: not JSON) replaced by null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def write_json(path: Path, obj: Any) -> None:
    """Atomic JSON write, keys in the order given (schemas keep their order); a non-finite number
    is written as null, so every file a pack holds is strict JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(json_safe(obj), f, indent=2, ensure_ascii=True, allow_nan=False)
        f.write("\n")
    tmp.replace(path)


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
