"""pack.json's `incremental` record (the cells an evidence run carried from earlier packs, their source packs and
every cell key) and the rows read with it: a stage's procs.json entry, index.json's file list, sass/run.json's
binaries. Typed, read-only views (records/view.py): incremental/chain.py checks them, incremental/plan.py and
incremental/keys.py plan a rerun from them. Values are kept as the file holds them.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .view import View, view


@dataclass(frozen=True)
class CarriedRecord(View):
    """One carried cell as pack.json lists it."""

    stage: Any = None
    cell: Any = None
    variant: Any = None
    source_pack: Any = None
    keys: Any = None
    files: Any = None  # path in the pack -> sha256
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class SourceEntry(View):
    """incremental.sources.<pack id>: the digest of the source pack's index.json."""

    index_sha256: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class IncrementalRecord(View):
    carried: Any = None  # list of carried cells
    keys: Any = None  # stage -> variant -> key parts
    sources: Any = None  # source pack id -> SourceEntry
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    def _absent_or(self, name: str, value: Any, kind: type) -> bool:
        return name not in self.raw or isinstance(value, kind)

    @property
    def well_formed(self) -> bool:
        """carried a list, keys and sources objects, where present."""
        return self._absent_or("carried", self.carried, list) and self._absent_or("keys", self.keys, dict) and \
            self._absent_or("sources", self.sources, dict)

    def source(self, pack_id: Any) -> SourceEntry:
        return view(SourceEntry, (self.sources or {}).get(pack_id))


@dataclass(frozen=True)
class IndexFiles(View):
    """index.json: the SHA-256 of every file of the pack."""

    files: Mapping = field(default_factory=dict)
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)
