"""Views with required fields (records/view.py): reading a required field that the object does not hold raises
KeyError(name), as `row[name]` on the dict did, so a result file that lacks a number the verdict needs is refused
with the same line as before instead of being judged on None. A required field typed as a view must be an
object: one that is not raises TypeError (a view of a non-object would read as an empty, clean record).
Optional fields read None when absent, as every view's do.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from .view import View


class Strict(View):
    """A view whose fields named in `required` must be in the object when read."""

    required: ClassVar[frozenset[str]] = frozenset()

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if name in type(self).required:
            raw = object.__getattribute__(self, "raw")
            if name not in raw:
                raise KeyError(name)
            if isinstance(value, View) and not isinstance(raw.get(name), Mapping):
                raise TypeError(f"{name} is not an object")
        return value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.raw)!r})"

    def has(self, name: str) -> bool:
        """Whether the object holds `name` (an older writer's rows lack the fields it did not record)."""
        return name in self.raw

    def given(self, name: str) -> bool:
        """Whether the object holds `name` with a value other than null."""
        return self.raw.get(name) is not None


def as_view(cls: type, value: Any) -> Any:
    """value itself when it is already a `cls` view, else the `cls` view of it (callers pass dicts or views)."""
    return value if isinstance(value, cls) else cls.from_json(value)
