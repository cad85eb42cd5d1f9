"""A benchmark suite file (bench/suites/NAME.toml, parsed by tomllib) as read-only views (records/view.py): the
suite's fields and its [[group]] tables, as timing/suites.parse_suite validates them. TOML has no null, so a
field that is None is one the file does not give."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .view import View


@dataclass(frozen=True)
class SuiteGroup(View):
    """One [[group]]: shapes given as BH pairs, B x H or tokens / S x H, in every S, D, dtype and causal listed."""

    name: Any = None
    tokens: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class SuiteFile(View):
    name: Any = None
    description: Any = None
    canonical: Any = None  # the headline shape
    primary_mode: Any = None
    budget_s: Any = None
    sampling: Any = None  # the [sampling] table: StopRule's fields
    group: Any = None  # the [[group]] tables, as the file holds them
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)
