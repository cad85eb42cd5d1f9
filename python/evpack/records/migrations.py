"""One reader per pack.json schema version, each giving today's PackRecord.

Schema 1 (2026-11-21): no `requirement` (the run's requirement was not recorded) and no `signing` (no
provenance statement was written); both are ABSENT, and readers ask `has_signing_record`.
Schema 2: `requirement` and `signing` added (signing None: unsigned).
Schema 3: the record is schema 2's; what changed is what the stages hold (records/schema.py).
A newer schema than this code knows is refused by name (verify says: use a newer evpack); fields a newer
writer adds within a known schema (finer timings, say) are kept in PackRecord.extra.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ModelError
from .pack import PackRecord
from .schema import KNOWN_SCHEMAS, spec


def _read_v1(obj: dict) -> PackRecord:
    """requirement and signing stay ABSENT when the pack does not hold them (they are not invented: the
    pack's bytes are its signature's subject). A schema-1 pack that holds them keeps them, as verify
    always read it (its checks, not this reader, judge such a pack)."""
    return PackRecord.from_json(obj)


def _read_v2(obj: dict) -> PackRecord:
    return PackRecord.from_json(obj)


READERS: dict[int, Callable[[dict], PackRecord]] = {1: _read_v1, 2: _read_v2, 3: _read_v2}
assert set(READERS) == set(KNOWN_SCHEMAS), "every known schema has its reader"


def read_pack(obj: Any) -> PackRecord:
    """pack.json's content as today's record; ModelError naming what is wrong (not an object, a schema
    this code does not know)."""
    if not isinstance(obj, dict):
        raise ModelError("pack.json is not an object")
    version = obj.get("schema_version")
    if spec(version) is None:
        raise ModelError(f"pack.json schema_version {version!r} is unknown to this code (it knows "
                         f"{', '.join(map(str, KNOWN_SCHEMAS))}): use a newer evpack")
    return READERS[version](obj)


def read_pack_view(obj: Any) -> PackRecord:
    """pack.json for a view (reports, history): the reader of its schema version, or, for a version this code
    does not know, the record as the file holds it (a view shows what it can; verify refuses the pack)."""
    if isinstance(obj, dict) and spec(obj.get("schema_version")) is None:
        return PackRecord.from_json(obj)
    return read_pack(obj)
