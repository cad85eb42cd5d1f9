"""provenance.json (an in-toto Statement v1 of a pack) as typed, read-only views (records/view.py), the pack.json
and env.json fields its predicate repeats, and those facts as the record the writer builds.

provenance/statement.py writes the statement and checks its shape; provenance/check.py and merge/record.py read
it through these views. Values are kept as the file holds them (a statement is untrusted until verified).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .view import View, objects, view

_STR = (str, type(None))


@dataclass(frozen=True)
class GpuDevice(View):
    """One GPU of the nvidia-smi listing (predicate.gpu.devices.devices[i])."""

    index: Any = None
    name: Any = None
    uuid: Any = None
    driver: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def well_formed(self) -> bool:
        """An integer index (or null, never a bool) and a string (or null) name, uuid and driver."""
        return isinstance(self.index, (int, type(None))) and not isinstance(self.index, bool) and all(
            isinstance(v, _STR) for v in (self.name, self.uuid, self.driver))

    def to_json(self) -> dict:
        return {"index": self.index, "name": self.name, "uuid": self.uuid, "driver": self.driver}


@dataclass(frozen=True)
class GpuListing(View):
    """predicate.gpu.devices: what nvidia-smi listed and which devices the run could see."""

    source: Any = None
    devices: Any = None  # the list as the file holds it
    visible: Any = None
    error: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def entries(self) -> tuple[GpuDevice, ...]:
        """The listed devices that are objects."""
        return tuple(view(GpuDevice, d) for d in objects(self.devices))


@dataclass(frozen=True)
class TreeDigest(View):
    algorithm: Any = None
    sha256: Any = None
    files: Any = None
    missing: Any = None
    error: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class PredicateSource(View):
    commit: Any = None
    dirty: Any = None
    tree: TreeDigest = field(default_factory=TreeDigest)
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Invocation(View):
    command: Any = None
    options: Any = None
    stages: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class PredicateGpu(View):
    name: Any = None
    driver: Any = None
    compute_capability: Any = None
    cuda: Any = None
    devices: Any = None  # the listing as the file holds it (see `listing`)
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def listing(self) -> GpuListing | None:
        """The nvidia-smi listing when the predicate holds one (an object), else None."""
        return view(GpuListing, self.devices) if isinstance(self.devices, Mapping) else None


@dataclass(frozen=True)
class CiIdentity(View):
    system: Any = None
    variables: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def well_formed(self) -> bool:
        return isinstance(self.system, str) and isinstance(self.variables, dict) and all(
            isinstance(x, str) for x in self.variables.values())


@dataclass(frozen=True)
class Predicate(View):
    """The evpack provenance predicate (docs/provenance.md)."""

    pack_id: Any = None
    tool_version: Any = None
    created_utc: Any = None
    label: Any = None
    source: PredicateSource = field(default_factory=PredicateSource)
    invocation: Invocation = field(default_factory=Invocation)
    toolchain: Any = None
    python: Any = None
    gpu: PredicateGpu = field(default_factory=PredicateGpu)
    bench_clocks: Any = None
    ci: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class StatementSubject(View):
    name: Any = None
    digest: Any = None  # {"sha256": ...} as the file holds it
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def sha256(self) -> Any:
        return view(DigestSet, self.digest).sha256 if isinstance(self.digest, dict) else None


@dataclass(frozen=True)
class DigestSet(View):
    sha256: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Statement(View):
    """The in-toto Statement v1: its type, subjects (as the file holds them), predicate type and predicate."""

    _type: Any = None
    subject: Any = None
    predicateType: Any = None  # the in-toto field name
    predicate: Any = None  # as the file holds it (see `pred`)
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def pred(self) -> Predicate:
        return view(Predicate, self.predicate)


@dataclass(frozen=True)
class FactsGpu:
    name: Any = None
    driver: Any = None
    compute_capability: Any = None
    cuda: Any = None

    def as_dict(self) -> dict:
        return {"name": self.name, "driver": self.driver, "compute_capability": self.compute_capability,
                "cuda": self.cuda}


@dataclass(frozen=True)
class PackFacts:
    """The predicate fields that repeat what the pack's own files say (verify compares them)."""

    pack_id: Any
    tool_version: Any
    created_utc: Any
    label: Any
    commit: Any
    dirty: Any
    options: Any
    stages: Any
    toolchain: Any
    python: Any
    gpu: FactsGpu
    bench_clocks: Any

    def as_dict(self) -> dict:
        return {"pack_id": self.pack_id, "tool_version": self.tool_version, "created_utc": self.created_utc,
                "label": self.label, "source": {"commit": self.commit, "dirty": self.dirty},
                "options": self.options, "stages": self.stages, "toolchain": self.toolchain,
                "python": self.python, "gpu": self.gpu.as_dict(), "bench_clocks": self.bench_clocks}

    @classmethod
    def of_predicate(cls, p: Predicate) -> PackFacts:
        """The facts a statement's predicate states (inverse of the writer)."""
        g = p.gpu
        return cls(p.pack_id, p.tool_version, p.created_utc, p.label, p.source.commit, p.source.dirty,
                   p.invocation.options, p.invocation.stages, p.toolchain, p.python,
                   FactsGpu(g.name, g.driver, g.compute_capability, g.cuda), p.bench_clocks)
