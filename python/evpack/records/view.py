"""Read-only typed views of a pack's JSON records (records/bench.py, records/sass.py).

A view keeps every value as the file holds it (a reader checks a value's type where it formats it: a pack's
values are untrusted until verify has run), gives None for a field the file does not hold, and keeps the whole
object in `raw` for the fields it does not name. A view of something that is not an object is a view of an
empty one, so a corrupted pack renders as "-" cells rather than a traceback.
"""
from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any


def obj(value: Any) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def objects(value: Any) -> list[Mapping]:
    """The objects of a JSON list (anything else in it, or a value that is no list: left out)."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def view(cls, value: Any):
    """cls's fields from a JSON object (None where absent) and the object itself as `raw`. A field whose type is
    a view is that view of the value, `tuple[View, ...]` the views of the list's objects, `Mapping` the value
    when it is an object (else {}); any other field is the value as the file holds it."""
    o = obj(value)
    return cls(**{name: read(o.get(name)) for name, read in _readers(cls)}, raw=o)


class View:
    """A view dataclass (a `raw` field, the rest read by `view`)."""

    @classmethod
    def from_json(cls, value: Any):
        return view(cls, value)


@functools.cache
def _readers(cls) -> tuple[tuple[str, Callable[[Any], Any]], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f.name, _reader(hints[f.name])) for f in fields(cls) if f.name != "raw")


def _is_view(t: Any) -> bool:
    return isinstance(t, type) and dataclasses.is_dataclass(t) and "raw" in {f.name for f in fields(t)}


def _reader(hint: Any) -> Callable[[Any], Any]:
    if _is_view(hint):
        return functools.partial(view, hint)
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple and args and _is_view(args[0]):
        return lambda value: tuple(view(args[0], o) for o in objects(value))
    if hint is Mapping:
        return obj
    return lambda value: value


def number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class KernelNamed:
    """For a view of a kernel row (variant, config, dtype, head_dim, symbol, arch fields): how readers name it."""

    variant: Any
    config: Any
    dtype: Any
    head_dim: Any
    symbol: Any
    arch: Any

    @property
    def kernel(self) -> tuple:
        """(variant, config, dtype, head_dim): the registry's name of the kernel."""
        return self.variant, self.config, self.dtype, self.head_dim

    @property
    def short(self) -> str:
        """variant/config/dtype/dHEAD (the symbol for a kernel the registry does not know) on ARCH."""
        name = f"{self.variant}/{self.config}/{self.dtype}/d{self.head_dim}" if self.variant else str(self.symbol)
        return f"{name} on {self.arch}"
