"""One walker for comparing a stored record with the one derived again from a pack's files.

verify's decision views (derivation.view_differences), the provenance statement's facts
(provenance.statement.diff_facts) and a merged verdict's member records (merge.verify.differences)
walk two nested dicts the same way and differ only in their rules: which keys are compared, what counts
as equal, where the walk stops, and the words of each message. Each names its rules here.
Standard library only: verify imports it.
"""
from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

MISSING = object()  # the side of a key that one dict lacks


def common_keys(stored: dict, derived: dict) -> Iterable:
    """Keys of both sides (a key of one side only is a schema difference, not a mismatch)."""
    return [k for k in derived if k in stored]


def all_keys(stored: dict, derived: dict) -> Iterable:
    """The derived side's keys, then the stored side's others."""
    return [*derived, *(k for k in stored if k not in derived)]


def sorted_keys(stored: dict, derived: dict) -> Iterable:
    return sorted(set(stored) | set(derived))


@dataclass(frozen=True)
class Rules:
    mismatch: Callable[[str, Any, Any], str]  # (path, stored, derived) -> the message; MISSING for an absent side
    keys: Callable[[dict, dict], Iterable] = all_keys
    same: Callable[[Any, Any], bool] = operator.eq
    leaf: Callable[[str], bool] = lambda key: False  # a key whose dicts are compared whole
    lists: Callable[[str, int, int], str] | None = None  # walk lists element-wise: (path, n stored, n derived)


def differences(stored: Any, derived: Any, rules: Rules, path: str = "") -> list[str]:
    """Where `stored` and `derived` disagree under `rules`, one message each, in walk order."""
    if isinstance(stored, dict) and isinstance(derived, dict):
        out: list[str] = []
        for k in rules.keys(stored, derived):
            sub = f"{path}.{k}" if path else str(k)
            a, b = stored.get(k, MISSING), derived.get(k, MISSING)
            if isinstance(a, dict) and isinstance(b, dict) and rules.leaf(str(k)):
                out += [] if rules.same(a, b) else [rules.mismatch(sub, a, b)]
            elif a is MISSING or b is MISSING:
                out += [] if rules.same(a, b) else [rules.mismatch(sub, a, b)]
            else:
                out += differences(a, b, rules, sub)
        return out
    if rules.lists is not None and isinstance(stored, list) and isinstance(derived, list):
        if len(stored) != len(derived):
            return [rules.lists(path, len(stored), len(derived))]
        out = []
        for i, (a, b) in enumerate(zip(stored, derived, strict=True)):
            out += differences(a, b, rules, f"{path}[{i}]")
        return out
    return [] if rules.same(stored, derived) else [rules.mismatch(path, stored, derived)]
