"""What the bench stage (stages/bench.py, stages/bench_shards.py) reads beyond records/bench.py's views, as
read-only views (records/view.py): a summary row as the stage's decision sees it, the run.json fields its
derivation reads, binary.json's hash, content_probe.json and the probe's verdict of an entry, the integrity
verdict, the harness counters of a timed record, and a bench outcome's data; and the parts the stage adds to
that data (OutcomeExtras, which writes them in today's order).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .bench import BenchRow
from .view import View


@dataclass(frozen=True)
class StageRow(BenchRow):
    """A summary row with its record's must_run (a row the suite requires measured: not run is an error)."""

    must_run: Any = None


@dataclass(frozen=True)
class StageRun(View):
    """run.json of a bench folder: the fields the derivation reads, each as the file holds it."""

    shapes: Any = None  # the suite's shape keys (a sharded run's shards must cover them exactly once)
    device: Any = None  # harness.device_info of the (first shard's) GPU
    gpu_seconds: Any = None
    plot_error: Any = None  # why the plots failed (verify then does not require them)
    previous_pack_id: Any = None
    baseline_commit: Any = None  # the run had a baseline: ab.json is required
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class IntegrityVerdict(View):
    """timing/integrity.judge's summary: counters of broken rows by rule, and the first broken row."""

    broken_rows: Any = None
    first: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class HarnessCounters(View):
    """The timing-integrity counters of one timed record of the shape runner (None: not counted for it)."""

    timed_checks: Any = None
    l2_reset_us_per_batch: Any = None
    drain_us_median: Any = None
    timed_ref_checks: Any = None
    unique_calls: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class ProbeCount(View):
    """The content probe's part of a bench outcome: kernels probed, those flagged (variant/config)."""

    kernels: Any = None
    flagged: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class ShardGpu(View):
    """One shard's entry of a sharded bench outcome's gpus: its folder, GPU, status and shape count."""

    dir: Any = None
    index: Any = None
    uuid: Any = None
    status: Any = None
    shapes: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class BenchOutcomeData(View):
    """A bench outcome's data (stages/bench_outcome.summary_data and the parts OutcomeExtras adds)."""

    throttled: Any = None
    regressions: Any = None
    canonical_shape: Any = None
    canonical_best: Any = None
    canonical_speedup: Any = None
    canonical_speedup_vs: Any = None
    integrity: IntegrityVerdict = field(default_factory=IntegrityVerdict)
    canaries: Any = None
    content_probe: ProbeCount = field(default_factory=ProbeCount)
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class OutcomeExtras:
    """What the bench stage adds to an outcome's data after summary_data, each only when set, in this order."""

    gpus: list | None = None  # a sharded run: ShardGpu of each shard
    integrity: dict | None = None  # IntegrityVerdict (summed over the shards)
    canaries: list | None = None
    content_probe: dict | None = None  # ProbeCount
    physics: dict | None = None  # timing/roofline.Physics.to_json

    def to_json(self) -> dict:
        return {k: v for k, v in (("gpus", self.gpus), ("integrity", self.integrity), ("canaries", self.canaries),
                                  ("content_probe", self.content_probe), ("physics", self.physics)) if v is not None}
