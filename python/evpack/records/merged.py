"""merged.json (a merged verdict over several GPUs' packs) as typed, read-only views (records/view.py): what
the verdict's report.md, comment.md and label view read, what load_record checks first (MergedHead) and what
merge/verify.py reads of a stored member (StoredMember). merge/verdict.py writes the record as JSON and
merge/verify.py compares it with one rebuilt from the members; these views never write.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .view import View


@dataclass(frozen=True)
class MemberGpu(View):
    name: Any = None
    uuid: Any = None
    compute_capability: Any = None
    driver: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class MemberSignature(View):
    state: Any = None
    principal: Any = None
    fingerprint: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class MergeSource(View):
    commit: Any = None
    dirty: Any = None
    tree_sha256: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Member(View):
    """One member pack: its id, where it is copied, its label, gates, GPU, signature and headline numbers."""

    pack_id: Any = None
    path: Any = None
    source: MergeSource = field(default_factory=MergeSource)
    label: Any = None
    labels: Any = None
    gates: Mapping = field(default_factory=dict)  # gate -> status
    gpu: MemberGpu = field(default_factory=MemberGpu)
    signature: MemberSignature = field(default_factory=MemberSignature)
    headline: Mapping = field(default_factory=dict)  # name -> number or text
    digests: Mapping = field(default_factory=dict)  # file -> sha256
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def gpu_name(self) -> str:
        return str(self.gpu.name or "no GPU")


@dataclass(frozen=True)
class GpuType(View):
    name: Any = None
    members: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def count(self) -> int:
        return len(self.members) if isinstance(self.members, list) else 0


@dataclass(frozen=True)
class MergeRule(View):
    text: Any = None
    signatures_checked: Any = None
    require_signature: Any = None
    allowed_signers_sha256: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class StoredMember(View):
    """A member of merged.json as verify compares it: its id and signature as the file holds them."""

    pack_id: Any = None
    signature: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class MergedHead(View):
    """What load_record checks before anything else is read: the kind, the schema and the members list."""

    kind: Any = None
    schema: Any = None
    members: Any = None  # as the file holds it
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def member_objects(self) -> bool:
        return isinstance(self.members, list) and all(isinstance(m, dict) for m in self.members)


@dataclass(frozen=True)
class MergedRecord(View):
    verdict_id: Any = None
    label: Any = None
    labels: Any = None
    gates: Mapping = field(default_factory=dict)  # gate -> the combined status
    source: MergeSource = field(default_factory=MergeSource)
    rule: MergeRule = field(default_factory=MergeRule)
    gpu_types: tuple[GpuType, ...] = ()
    members: tuple[Member, ...] = ()
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

