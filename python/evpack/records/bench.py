"""bench/summary.json, bench/ab.json, the bench run.json, clocks.json and content_probe.json as typed, read-only views
(records/view.py): what the readers (the reports, the decision, `compare`) see of a benchmark. The writers
(timing/summary.py, timing/ab.py) make the JSON and derive() compares it as written; these views never write.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .view import View, number
from .view import obj as _obj

# --- bench/summary.json ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BenchRow(View):
    """One row of summary.json: an implementation (ours or an SDPA backend) at a shape and mode."""

    key: Any = None
    impl: Any = None
    variant: Any = None
    config: Any = None
    shape: Any = None
    B: Any = None  # the shape's parts (batch, heads, sequence, head dim, dtype, causal)
    H: Any = None
    S: Any = None
    D: Any = None
    dtype: Any = None
    causal: Any = None
    mode: Any = None
    status: Any = None
    reason: Any = None
    median_us: Any = None
    iqr_us: Any = None
    tflops: Any = None
    floor_us: Any = None  # the physics floor of the shape and mode (timing/roofline.py)
    pct_floor: Any = None
    speedup_vs: Any = None  # backend -> median(backend) / median(this row)
    max_abs_err: Any = None
    err_bound: Any = None
    kernels: Any = None  # the SDPA kernels the profiler saw
    capture_ms: Any = None
    calls_per_sample: Any = None
    timed_content_unique: Any = None  # the timing-integrity record of a row of ours (timing/integrity.py)
    unique_calls: Any = None
    content_uniqueness: Any = None
    timed_ref_failures: Any = None
    timed_ref_checks: Any = None
    timed_ref_worst: Any = None
    drain_us_median: Any = None
    l2_error: Any = None
    l2_violations: Any = None
    timed_mismatches: Any = None
    timed_checks: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    def speedup(self, backend: str) -> Any:
        return _obj(self.speedup_vs).get(backend)

    @property
    def timed(self) -> bool:
        """ok with a measured, positive median (0 is no measurement)."""
        return self.status == "ok" and number(self.median_us) and self.median_us > 0

    @property
    def within_bound(self) -> bool:
        """Its output error was measured and is within its bound."""
        return number(self.max_abs_err) and number(self.err_bound) and self.max_abs_err <= self.err_bound

    @property
    def kernel_names(self) -> list:
        return self.kernels if isinstance(self.kernels, list) else []


def bench_rows(rows: Any) -> list[BenchRow]:
    """Rows as views: BenchRow kept, JSON objects viewed, anything else left out."""
    return [r if isinstance(r, BenchRow) else BenchRow.from_json(r)
            for r in (rows if isinstance(rows, (list, tuple)) else []) if isinstance(r, (BenchRow, Mapping))]


@dataclass(frozen=True)
class LeaderEntry(View):
    """One row of the leaderboard at the canonical shape, fastest first."""

    rank: Any = None
    impl: Any = None
    variant: Any = None
    config: Any = None
    status: Any = None
    median_us: Any = None
    iqr_us: Any = None
    tflops: Any = None
    pct_floor: Any = None
    speedup_vs_default: Any = None
    graph_median_us: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class BenchSummary(View):
    schema: Any = None
    suite: Any = None
    canonical: Any = None  # the canonical shape's key
    primary_mode: Any = None
    rows: tuple[BenchRow, ...] = ()
    leaderboard: tuple[LeaderEntry, ...] = ()
    canonical_speedup: Any = None
    canonical_best: Any = None
    canonical_speedup_vs: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    def speedups_vs(self) -> dict:
        return dict(_obj(self.canonical_speedup_vs))


# --- bench/ab.json -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AbSide(View):
    """One side's statistics of a compared row."""

    median_us: Any = None
    iqr_us: Any = None
    n: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class AbRow(View):
    """A row of ours timed on both sides (rows), or on one side only (new, removed: no sides, a status)."""

    key: Any = None
    variant: Any = None
    config: Any = None
    shape: Any = None
    mode: Any = None
    status: Any = None
    base: AbSide = field(default_factory=AbSide)
    head: AbSide = field(default_factory=AbSide)
    ratio: Any = None  # median(head) / median(base)
    ci_lo: Any = None
    ci_hi: Any = None
    verdict: Any = None
    reason: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def kernel(self) -> str:
        return f"{self.variant}/{self.config}"


@dataclass(frozen=True)
class AbRule(View):
    name: Any = None
    version: Any = None
    conf: Any = None
    min_effect: Any = None
    min_n: Any = None
    fdr_q: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def rule_version(self) -> int:
        return self.version if number(self.version) else 1


@dataclass(frozen=True)
class AbRecord(View):
    """ab.json (merged over the shards of a sharded benchmark)."""

    status: Any = None
    reason: Any = None
    base_ref: Any = None
    base_commit: Any = None
    head_commit: Any = None
    head_dirty: Any = None
    self_check: Any = None
    base_so_sha256: Any = None
    head_so_sha256: Any = None
    rule: AbRule = field(default_factory=AbRule)
    rows: tuple[AbRow, ...] = ()
    new: tuple[AbRow, ...] = ()
    removed: tuple[AbRow, ...] = ()
    counts: Any = None
    confirm_keys: Any = None
    regressions: Any = None
    rule_version: Any = None
    base_build: Any = None
    base_records: Any = None
    confirm_records: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def count(self, verdict: str) -> int:
        """Rows of that verdict (counted from the rows, never taken from `counts`)."""
        return sum(1 for e in self.rows if e.verdict == verdict)

    def with_verdict(self, verdict: str) -> tuple[AbRow, ...]:
        return tuple(sorted((e for e in self.rows if e.verdict == verdict), key=lambda e: str(e.key)))


# --- bench/run.json and clocks.json --------------------------------------------------------------------------

@dataclass(frozen=True)
class DeviceInfo(View):
    name: Any = None
    capability: Any = None
    sm_count: Any = None
    torch: Any = None
    cuda: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class GpuRef(View):
    index: Any = None
    uuid: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Shard(View):
    """One GPU's part of a benchmark sharded over several: its folder, its GPU and its shapes."""

    dir: Any = None
    gpu: GpuRef = field(default_factory=GpuRef)
    shapes: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def shape_count(self) -> int:
        return len(self.shapes) if isinstance(self.shapes, list) else 0


@dataclass(frozen=True)
class BenchRun(View):
    """run.json of the bench stage: the device, the cost and, for a sharded benchmark, its shards."""

    device: DeviceInfo = field(default_factory=DeviceInfo)
    gpu_seconds: Any = None
    cost_usd: Any = None
    cost_per_hour: Any = None
    previous_pack_id: Any = None
    compare_rule: Any = None  # the rule of the previous-pack comparison (timing/compare.RULES); absent: 1
    shards: tuple[Shard, ...] = ()
    suite: Any = None
    canonical: Any = None  # the suite's canonical shape and primary mode (newer packs)
    primary_mode: Any = None
    baseline_commit: Any = None
    options: Any = None  # the run's options as the benchmark recorded them (crosscheck: pack.json's options)
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class ClockReading(View):
    sm_mhz: Any = None
    max_sm_mhz: Any = None
    source: Any = None
    reasons_mask: Any = None  # NVML's clock-event reasons bit mask
    error: Any = None  # why neither source could be read (source "none")
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Clocks(View):
    """clocks.json: the SM clock under load before and after the benchmark, and whether it throttled."""

    before: ClockReading = field(default_factory=ClockReading)
    after: ClockReading = field(default_factory=ClockReading)
    throttled: Any = None
    reason: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)



# --- content_probe.json --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProbeEntry(View):
    """One kernel's probe: the fresh-content and repeated-content call times (or the error that stopped it)."""

    impl: Any = None
    variant: Any = None
    config: Any = None
    fresh_us: Any = None
    repeat_us: Any = None
    error: Any = None
    shape: Any = None  # the probe's shape, when a reader adds it to the entry
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class ContentProbe(View):
    """content_probe.json (timing/content_probe.py): the rule, the shape and every kernel's entry."""

    schema: Any = None
    shape: Any = None
    rule: Any = None
    pairs: Any = None
    entries: tuple[ProbeEntry, ...] = ()
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)
