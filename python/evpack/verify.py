"""`verify PACK`: re-hash every file and re-derive every stage, gate, label and the report."""
from __future__ import annotations

import json
from pathlib import Path

from . import PACK_SCHEMA_VERSION
from .binary import sha256_file
from .pack import PackError, derive_all, stage_names_of
from .pack import load_pack_file as _load
from .stages.base import read_json


def verify_pack(pack_dir: Path) -> list[str]:
    """Mismatches (empty when the pack verifies). Raises PackError when it is not a pack at all."""
    if not pack_dir.is_dir():
        raise PackError(f"{pack_dir}: no such pack folder")
    index = _load(pack_dir, "index.json")
    problems: list[str] = []
    listed = index.get("files", {})
    present = {p.relative_to(pack_dir).as_posix() for p in pack_dir.rglob("*")
               if p.is_file() and p.name != "index.json"}
    for rel in sorted(set(listed) - present):
        problems.append(f"missing file: {rel}")
    for rel in sorted(present - set(listed)):
        problems.append(f"file not in index.json: {rel}")
    for rel in sorted(set(listed) & present):
        if sha256_file(pack_dir / rel) != listed[rel]:
            problems.append(f"hash mismatch: {rel}")
    try:
        pj = _load(pack_dir, "pack.json")
    except PackError as exc:  # the hash check above already named it when it was altered
        return problems + [str(exc).split(": ", 1)[-1]]
    if not isinstance(pj, dict) or not isinstance(pj.get("stages"), dict) or not isinstance(pj.get("gates"), dict):
        return problems + ["pack.json is malformed: no stages/gates tables"]
    if pj.get("schema_version") != PACK_SCHEMA_VERSION:
        problems.append(f"pack.json schema_version {pj.get('schema_version')!r} != {PACK_SCHEMA_VERSION}")
        return problems
    if pj.get("complete") is not True:
        problems.append("pack.json is not marked complete")
    if pack_dir.name != pj.get("pack_id"):
        problems.append(f"folder name {pack_dir.name} != pack_id {pj.get('pack_id')}")
    try:
        derived = derive_all(pack_dir, stage_names_of(pj))
    except Exception as exc:
        return problems + [f"could not re-derive: {type(exc).__name__}: {exc}"]
    for name, out in derived.stages.items():
        rec = pj["stages"].get(name) if isinstance(pj["stages"].get(name), dict) else {}
        if (rec.get("status"), rec.get("reason")) != (out.status, out.reason):
            problems.append(f"stage {name}: pack.json says {rec.get('status')} ({rec.get('reason')}) but the "
                            f"files give {out.status} ({out.reason})")
        try:
            stored = read_json(pack_dir / name / "outcome.json")
            if stored != json.loads(json.dumps(out.to_json())):
                problems.append(f"stage {name}: outcome.json differs from what its raw files give")
        except (FileNotFoundError, json.JSONDecodeError) as exc:
            problems.append(f"stage {name}: outcome.json unreadable: {exc}")
    for g, out in derived.gates.items():
        rec = pj["gates"].get(g) if isinstance(pj["gates"].get(g), dict) else {}
        if (rec.get("status"), rec.get("reason")) != (out.status, out.reason):
            problems.append(f"gate {g}: pack.json says {rec.get('status')} but the files give {out.status}")
    if set(pj["gates"]) - set(derived.gates):
        problems.append(f"unknown gates in pack.json: {sorted(set(pj['gates']) - set(derived.gates))}")
    if pj.get("label") != derived.label or pj.get("labels") != derived.labels:
        problems.append(f"label: pack.json says {pj.get('label')} {pj.get('labels')} but the gates give "
                        f"{derived.label} {derived.labels}")
    if pj.get("content_digest") != derived.digest:
        problems.append("content_digest does not match the re-derived content")
    zd = pj.get("zero_delta")
    if zd and zd.get("same") != (zd.get("previous_digest") == derived.digest):
        problems.append("zero_delta.same contradicts the digests")
    return problems
