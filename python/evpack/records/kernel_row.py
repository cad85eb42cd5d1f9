"""What the PTXAS and SASS stages' shared row code (stages/kernel_rows.py) reads of a kernel x arch row, as a
typed, read-only view (records/view.py): who the row is and its gate status. records/ptxas.py and
records/sass.py type the rest of each stage's row; this view never writes.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .view import View


@dataclass(frozen=True)
class StatusRow(View):
    """A kernel row's variant (None: a kernel the registry does not know), arch, canary flag and status."""

    variant: Any = None
    arch: Any = None
    canary: Any = None
    status: Any = None
    reason: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)
