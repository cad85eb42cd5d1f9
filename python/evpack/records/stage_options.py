"""A run's options (StageContext.options: the CLI's choices, passed to a shard process as JSON) as a typed,
read-only view (records/view.py) for the stages that read them: suite and shapes, the GPU list, variants,
the incremental run's carried cells, the cost rate, the previous pack and the A/B baseline.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .view import View


@dataclass(frozen=True)
class RunOptions(View):
    """The options a stage reads (the rest stay in `raw`)."""

    suite: Any = None  # the suite's name (None: quick)
    shapes: Any = None  # ad-hoc shape keys added to the suite
    shard_shapes: Any = None  # in a shard process of a sharded benchmark: its shapes (None outside one)
    gpus: Any = None  # the GPU list ({"index", "uuid", "name"} each; evpack/gpus.py) or None
    variants: Any = None  # the selected variants (None: all)
    carry: Any = None  # {stage: [variant, ...]} an incremental run carries from an earlier pack
    cost_per_hour: Any = None
    previous_pack: Any = None
    baseline: Any = None  # the A/B's base (records/ab.py BaselineOption), None without --baseline
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)
