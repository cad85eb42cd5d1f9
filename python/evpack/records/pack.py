"""pack.json: the pack's record of itself, read and written here only.

`PackRecord.to_json()` writes the keys in the order the writers of every schema wrote them; a field a
pack does not hold (schema 1 has no `requirement` and no `signing`, packs before incremental evidence no
`incremental`) is ABSENT and not written, so a
pack read and written again gives back the same bytes.

Reading is lenient about values and strict about nothing but the shape of the whole: values are kept as
the file holds them (verify judges a forged value by comparing it with what the pack's files give; a
reader never coerces one into something that passes). Keys this code does not know (fields a newer
writer adds) are kept in `extra`, in their order, and written back after the known ones: a newer pack
never breaks reading.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import ModelError
from .incremental import IncrementalRecord
from .view import View, view
from .view import obj as _obj


class _Absent:
    """A field the pack does not hold (written by an older schema, or by none)."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT: Any = _Absent()


def present(value: Any) -> Any:
    """A field's value, None where the pack does not hold it (ABSENT)."""
    return None if value is ABSENT else value


def _record(cls, value: Any):
    """A nested record from its JSON object; keys missing from it are ABSENT (not written back)."""
    names = [f.name for f in fields(cls) if f.name != "extra"]
    obj = _obj(value)
    return cls(**{n: obj.get(n, ABSENT) for n in names},
               extra=tuple((k, v) for k, v in obj.items() if k not in names))


def _json(rec) -> dict[str, Any]:
    out = {f.name: getattr(rec, f.name) for f in fields(rec) if f.name != "extra"}
    return {**{k: v for k, v in out.items() if v is not ABSENT}, **dict(rec.extra)}


@dataclass(frozen=True)
class GitRecord:
    commit: Any = None  # the full commit, None when git was unavailable
    dirty: Any = None
    error: Any = None
    extra: tuple[tuple[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return _json(self)


@dataclass(frozen=True)
class StageEntry:
    """pack.json -> stages -> <name>: the stage's status, its reason (a view) and how long it took."""

    status: Any
    reason: Any = ""
    duration_s: Any = None
    extra: tuple[tuple[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return _json(self)


@dataclass(frozen=True)
class GateEntry:
    """pack.json -> gates -> <name>."""

    status: Any
    reason: Any = ""
    extra: tuple[tuple[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return _json(self)


@dataclass(frozen=True)
class Summary:
    gpu_name: Any = None
    canonical_speedup: Any = None
    extra: tuple[tuple[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return _json(self)


@dataclass(frozen=True)
class ZeroDelta:
    """Whether this pack decided and measured the same as the previous pack of its commit."""

    previous_pack: Any
    previous_digest: Any
    same: Any
    extra: tuple[tuple[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return _json(self)


@dataclass(frozen=True)
class StageTiming(View):
    """pack.json -> timings -> stages -> <name> (schema 3 on): seconds from the run's start."""

    start_s: Any
    end_s: Any
    duration_s: Any
    raw: Mapping


@dataclass(frozen=True)
class Timings(View):
    """pack.json -> timings, as the file holds it: total_s and stages_s (every schema), wall_s, mode and
    stages (how the run went: schema 3 on)."""

    total_s: Any
    stages_s: Any
    wall_s: Any
    mode: Any
    stages: Any
    raw: Mapping

    def holds(self, name: str) -> bool:
        return name in self.raw


@dataclass(frozen=True)
class PackGit(View):
    commit: Any = None
    dirty: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class PackGate(View):
    status: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class SigningEntry(View):
    """pack.json -> signing (schema 2 on; None: unsigned): the key that signed the provenance statement."""

    key_type: Any = None
    key_fingerprint: Any = None
    key_comment: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class PythonInfo(View):
    """pack.json -> python: the interpreter that made the pack."""

    executable: Any = None
    version: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class PackJson(View):
    """A pack.json object as the file holds it, for readers that have not (or need not) run the reader of its
    schema version (migrations.read_pack -> PackRecord): verify before it knows the schema, the provenance
    predicate and a merged verdict's member record, which repeat its fields."""

    pack_id: Any = None
    schema_version: Any = None
    created_utc: Any = None
    tool_version: Any = None
    git: PackGit = field(default_factory=PackGit)
    toolchain: Any = None
    python: Any = None
    options: Any = None
    stages: Any = None  # as the file holds it: verify refuses a pack whose stages or gates are no object
    gates: Any = None
    label: Any = None
    labels: Any = None
    timings: Any = None
    complete: Any = None
    signing: Any = None
    incremental: Any = None  # as the file holds it (see incremental_record)
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def incremental_record(self) -> IncrementalRecord:
        return view(IncrementalRecord, self.incremental)

    @property
    def python_info(self) -> PythonInfo:
        return view(PythonInfo, self.python)

    @property
    def toolchain_table(self) -> Mapping:
        """tool -> version text ({} when the file holds no object)."""
        return _obj(self.toolchain)

    @property
    def stage_table(self) -> Mapping:
        return _obj(self.stages)

    @property
    def gate_statuses(self) -> dict:
        return {g: view(PackGate, v).status for g, v in _obj(self.gates).items()}


@dataclass(frozen=True)
class PackRecord:
    schema_version: Any
    pack_id: Any
    created_utc: Any = None
    tool_version: Any = None
    git: GitRecord = field(default_factory=GitRecord)
    toolchain: Any = None  # tool -> version text (free-form: the tools found)
    python: Any = None  # {"executable", "version"}
    warnings: Any = ()
    options: Any = None  # the run's options as given (free-form: a view of the command line)
    stages: dict[str, StageEntry] = field(default_factory=dict)
    gates: dict[str, GateEntry] = field(default_factory=dict)
    label: Any = None
    labels: Any = ()
    requirement: Any = ABSENT  # schema 2 on: "complete" / "partial" / None
    so_sha256: Any = None
    summary: Summary = field(default_factory=Summary)
    timings: Any = None  # {"total_s", "stages_s"} (free-form: newer writers add keys)
    content_digest: Any = None
    zero_delta: ZeroDelta | None = None
    complete: Any = False
    signing: Any = ABSENT  # schema 2 on: the signing key's record, or None (unsigned)
    # schema 3 on, every evidence run: what was carried from earlier packs, from where, and every key
    # (incremental/run.py; free-form here, checked by incremental/chain.py); absent from older packs
    incremental: Any = ABSENT
    extra: tuple[tuple[str, Any], ...] = ()  # keys of a newer writer, kept in order

    # --- reading ---------------------------------------------------------------------------------
    @classmethod
    def from_json(cls, obj: Any) -> PackRecord:
        """The record as the file holds it (see migrations.read_pack for the reader of a schema version)."""
        if not isinstance(obj, dict):
            raise ModelError("pack.json is not an object")
        names = [f.name for f in fields(cls) if f.name != "extra"]
        values = {n: obj.get(n, ABSENT) for n in names}
        values["git"] = _record(GitRecord, obj.get("git"))
        values["stages"] = {k: _record(StageEntry, v) for k, v in _obj(obj.get("stages")).items()}
        values["gates"] = {k: _record(GateEntry, v) for k, v in _obj(obj.get("gates")).items()}
        values["summary"] = _record(Summary, obj.get("summary"))
        zd = obj.get("zero_delta")
        values["zero_delta"] = _record(ZeroDelta, zd) if isinstance(zd, dict) else zd
        return cls(**values, extra=tuple((k, v) for k, v in obj.items() if k not in names))

    # --- writing ---------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if value is ABSENT:
                continue
            if f.name in ("stages", "gates"):
                value = {k: v.to_json() for k, v in value.items()}
            elif hasattr(value, "to_json"):
                value = value.to_json()
            out[f.name] = value
        return {**out, **dict(self.extra)}

    # --- what readers ask ------------------------------------------------------------------------
    @property
    def commit(self) -> Any:
        return self.git.commit or None

    def gate_statuses(self) -> dict[str, Any]:
        return {g: None if v.status is ABSENT else v.status for g, v in self.gates.items()}

    def stage_status(self, name: str) -> Any:
        entry = self.stages.get(name)
        return entry.status if entry is not None and entry.status is not ABSENT else None

    @property
    def total_s(self) -> Any:
        """The run's wall time in seconds (timings.total_s), None when not recorded."""
        return view(Timings, self.timings).total_s

    @property
    def has_signing_record(self) -> bool:
        """Whether the pack was made by code that records signing (schema 2 on)."""
        return self.signing is not ABSENT

    def get(self, name: str, default: Any = None) -> Any:
        """A field by name as JSON (unknown or absent fields: default): for readers of optional fields."""
        extra = dict(self.extra)
        if name in extra:
            return extra[name]
        value = getattr(self, name, ABSENT) if name in {f.name for f in fields(self)} else ABSENT
        if value is ABSENT:
            return default
        return value.to_json() if hasattr(value, "to_json") else value
