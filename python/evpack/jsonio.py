"""JSON and text files of a pack: strict reads, atomic writes (temp file + rename)."""
from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

from .packfs import write_bytes

COMPACT_FROM_BYTES = 64 << 10  # a file larger than this indented is written without indentation (machine files)
MAX_DEPTH = 64  # arrays/objects inside each other; the deepest file a pack holds today is 8 levels
# A JSON string (its closing quote optional, so an unterminated one ends the scan instead of being
# retried from every later quote: linear time) or one bracket.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.S)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class JsonFileError(ValueError):
    """A file that is not strict JSON of a sane shape; the message is one line naming the file."""

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(f"{path}: {what}")
        self.path, self.what = path, what

    def __reduce__(self):  # crosses process pools (verify derives stages in worker processes)
        return type(self), (self.path, self.what)


def nesting_depth(text: str, limit: int = MAX_DEPTH) -> int:
    """How deep arrays and objects nest in `text` (brackets inside strings do not count); limit + 1
    for anything deeper (the scan stops there). Needs no parse, so no recursion: for text that is
    not JSON it counts the brackets a parser would reach before its first error, or more."""
    depth = deepest = 0
    for m in _TOKENS.finditer(text):
        c = m.group()
        if c in ("[", "{"):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        elif c in ("]", "}"):
            depth -= 1
    return deepest


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"duplicate key {dup[:80]!r}")
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (a pack file holds finite numbers only)")


def _check_strings(obj: Any) -> None:
    """Every string (keys too) is valid Unicode: no lone surrogate from a \\uD800-style escape."""
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, str):
            o.encode("utf-8")
        elif isinstance(o, dict):
            stack += o.keys()
            stack += o.values()
        elif isinstance(o, list):
            stack += o


def parse_json(text: str, path: Path, *, allow_nan: bool = False) -> Any:
    """Strict JSON: nesting at most MAX_DEPTH deep (checked before the parser recurses), no
    duplicate keys, no lone surrogates, no NaN/Infinity unless `allow_nan`. JsonFileError otherwise."""
    if text.count("[") + text.count("{") > MAX_DEPTH and nesting_depth(text) > MAX_DEPTH:
        raise JsonFileError(path, f"nested deeper than {MAX_DEPTH} levels")
    try:
        obj = json.loads(text, object_pairs_hook=_unique_keys,
                         **({} if allow_nan else {"parse_constant": _no_constant}))
        if _SURROGATE_ESCAPE.search(text):
            _check_strings(obj)
    except UnicodeEncodeError:
        raise JsonFileError(path, "a string holds a lone surrogate (not valid Unicode)") from None
    except json.JSONDecodeError as exc:
        raise JsonFileError(path, f"not valid JSON ({exc})") from None
    except (ValueError, RecursionError) as exc:
        raise JsonFileError(path, str(exc) or type(exc).__name__) from None
    return obj


def read_json(path: Path, *, allow_nan: bool = False) -> Any:
    """Parse a file of a pack as strict JSON (see parse_json); JsonFileError names the file and
    what is wrong (not UTF-8, not JSON, too deep, a duplicate key, NaN/Infinity). OSError as raised
    (FileNotFoundError: callers tell a missing file from a corrupt one).

    `allow_nan`: only for the raw result files of the oracle programs, which write +-Infinity and
    NaN for a failed case (json.dump's default; the committed reference packs hold such files:
    correctness/canary_partial_write.json, stability/canary_wrong_stream.json). Everything this
    package writes is strict (write_json)."""
    mode = os.stat(path).st_mode  # FileNotFoundError as raised
    if not stat.S_ISREG(mode):  # a folder, a named pipe (would block) or a device (endless) is no JSON file
        raise JsonFileError(path, "not a regular file")
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonFileError(path, f"not UTF-8 (byte {exc.start})") from None
    return parse_json(text, path, allow_nan=allow_nan)


def read_member_json(folder: Path, name: str, *, allow_nan: bool = False) -> Any:
    """Member `name` of a pack folder as strict JSON, in whichever form it is stored (`name`, `name.xz`,
    `name.gz`: packfs.member). JsonFileError (a ValueError) when it is not JSON, cannot be inflated or is stored
    twice; FileNotFoundError when no form is present."""
    from .packfs import member, read_stored  # noqa: PLC0415 (packfs is standard library only too)

    try:
        path = member(Path(folder), name)
    except ValueError as exc:
        raise JsonFileError(Path(folder) / name, str(exc)) from None
    if path.name == name:
        return read_json(path, allow_nan=allow_nan)
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise JsonFileError(path, "not a regular file")
    try:
        text = read_stored(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonFileError(path, f"not UTF-8 (byte {exc.start})") from None
    except ValueError as exc:
        raise JsonFileError(path, str(exc)) from None
    return parse_json(text, path, allow_nan=allow_nan)


def json_text(obj: Any) -> str:
    """The JSON text a pack file holds: indented for people, or without indentation when the indented text
    would be over COMPACT_FROM_BYTES (the large machine files: whitespace was a quarter of them)."""
    text = json.dumps(json_safe(obj), indent=2, ensure_ascii=True, allow_nan=False)
    if len(text) > COMPACT_FROM_BYTES:
        text = json.dumps(json_safe(obj), separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return text + "\n"


def write_member_json(path: Path, obj: Any) -> None:
    """JSON in the stored form the suffix of `path` names (`x.json.xz`: inside an xz stream; packfs)."""
    from .packfs import write_stored  # noqa: PLC0415

    write_stored(path, json_text(obj).encode("ascii"))


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
    is written as null, so every file a pack holds is strict JSON. Large files without indentation (json_text)."""
    write_bytes(path, json_text(obj).encode("ascii"))


def write_text(path: Path, text: str) -> None:
    """Atomic UTF-8 text write (atomic_file)."""
    write_bytes(path, text.encode("utf-8"))
