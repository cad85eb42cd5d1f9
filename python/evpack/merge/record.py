"""The record of a merged verdict (merged.json): what it says about each member pack, and its decision.

A merged verdict covers several packs of one commit, each made on its own GPU. Everything in a member's
record is read from that pack's files (pack.json, env.json, provenance.json, the stages' outcome.json)
after `verify` has checked them, so `merge` (which writes the record) and `verify` (which re-reads it
from the copied members and compares) share this one module. Standard library only.

Layout of a merged verdict folder:
  merged.json   this record (kind, schema, rule, label, labels, members, ...)
  report.md     one column per member GPU: label, signature, gates, headline numbers
  comment.md    the short PR comment
  index.json    SHA-256 of merged.json, report.md and comment.md
  members/<pack-id>/   a byte-for-byte copy of each member pack (each verifies on its own)
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..binary import sha256_file
from ..jsonio import read_json
from ..labels import merged_label, merged_labels
from ..model import GATE_ORDER, StageOutcome, worst
from ..provenance.check import SIGNED, UNCHECKED, ProvenanceCheck
from ..provenance.statement import PROVENANCE_FILE, SIGNATURE_FILE
from ..records.env import EnvJson
from ..records.merged import Member, MergedHead, MergedRecord
from ..records.pack import PackJson
from ..records.provenance import GpuDevice, Predicate, Statement
from ..stages.order import STAGE_ORDER, stage_module

KIND = "evpack-merged-verdict"
SCHEMA = 1
KNOWN_SCHEMAS = (1,)
MERGED_FILE = "merged.json"
INDEX_FILE = "index.json"
MEMBERS_DIR = "members"
VERDICT_FILES = (MERGED_FILE, "report.md", "comment.md")  # the files index.json lists
DIGESTED = ("index.json", "pack.json", PROVENANCE_FILE, SIGNATURE_FILE)  # a member's digests (those present)

# A member's signature, as the merge saw it.
VERIFIED = "verified"  # signed, and the signature verifies against the allowed signers
UNCHECKED_SIG = "unchecked"  # signed and intact, but its signer was not checked (no --allowed-signers, or no ssh-keygen)
UNSIGNED = "unsigned"
SIGNATURE_STATES = (VERIFIED, UNCHECKED_SIG, UNSIGNED)

RULE = ("evidence:complete only when every member is evidence:complete and, when signatures are checked "
        "(--allowed-signers), every member is signed and its signature verifies against the allowed signers; "
        "otherwise evidence:failed when any member is evidence:failed, else evidence:partial")


def is_merged_verdict(path: Path) -> bool:
    return (Path(path) / MERGED_FILE).is_file()


def signature_state(prov: ProvenanceCheck) -> str:
    """verified / unchecked / unsigned from a member's provenance check (run with or without allowed signers)."""
    if prov.state == SIGNED and prov.principal:
        return VERIFIED
    if prov.state in (SIGNED, UNCHECKED):
        return UNCHECKED_SIG
    return UNSIGNED


def device_used(devices: list[dict], visible: str | None) -> dict | None:
    """The GPU the stages ran on, from nvidia-smi's listing: the first entry of CUDA_VISIBLE_DEVICES (an
    index, a UUID or a UUID prefix), or index 0 when it is unset. None when it names no listed device."""
    used = _device_used(tuple(GpuDevice.from_json(d) for d in devices), visible)
    return dict(used.raw) if used is not None else None


def _device_used(devices: tuple[GpuDevice, ...], visible: str | None) -> GpuDevice | None:
    token = (visible or "0").split(",")[0].strip()
    for d in devices:
        if token.isdigit() and d.index == int(token):
            return d
        uuid = str(d.uuid or "")
        if not token.isdigit() and token and (uuid == token or uuid.startswith(token) or uuid == f"GPU-{token}"):
            return d
    return None


def _json(path: Path):
    try:
        return read_json(path)
    except (OSError, ValueError):
        return None


def _gpu(env: EnvJson, predicate: Predicate) -> dict:
    smi = predicate.gpu.listing
    devices = smi.entries if smi is not None else ()
    visible = smi.visible if smi is not None else None
    used = _device_used(devices, visible)
    return {"name": env.gpu_name, "compute_capability": env.compute_capability,
            "driver": env.driver_version, "uuid": used.uuid if used else None,
            "devices": [d.to_json() for d in devices],
            "visible": visible, "devices_from": PROVENANCE_FILE if smi is not None else None}


def headline(pack_dir: Path, pj: PackJson, stages: str | None = None,
             outcomes: dict[str, StageOutcome] | None = None) -> dict:
    """Headline numbers from the stages that offer them (stage hook `headline(outcome)`): of the outcomes verify
    derived from the member's raw files when given, else of its checked outcome.json."""
    out: dict = {}
    for name in STAGE_ORDER:
        if name not in pj.stage_table:
            continue
        hook = getattr(stage_module(name, stages), "headline", None)
        if hook is None:
            continue
        if outcomes is not None:
            if name in outcomes:
                out.update(hook(outcomes[name]))
            continue
        outcome = _json(pack_dir / name / "outcome.json")
        if isinstance(outcome, dict):
            out.update(hook(StageOutcome.from_json(outcome)))
    return out


def digests(pack_dir: Path) -> dict[str, str]:
    return {name: sha256_file(pack_dir / name) for name in DIGESTED if (pack_dir / name).is_file()}


def member_record(pack_dir: Path, prov: ProvenanceCheck, *, stages: str | None = None,
                  outcomes: dict[str, StageOutcome] | None = None) -> dict:
    """What merged.json says about one member, read from its files (which `verify` has checked); `outcomes`:
    the stage outcomes verify derived (the headline numbers come from them)."""
    pj = PackJson.from_json(read_json(pack_dir / "pack.json"))
    missing = next((k for k in ("pack_id", "label", "labels", "gates") if k not in pj.raw), None)
    if missing is not None:
        raise KeyError(missing)
    env = EnvJson.from_json(_json(pack_dir / "env.json"))
    predicate = Statement.from_json(_json(pack_dir / PROVENANCE_FILE)).pred
    return {
        "pack_id": pj.pack_id,
        "path": f"{MEMBERS_DIR}/{pj.pack_id}",
        "schema_version": pj.schema_version,
        "created_utc": pj.created_utc,
        "source": {"commit": pj.git.commit, "dirty": pj.git.dirty, "tree_sha256": predicate.source.tree.sha256},
        "label": pj.label,
        "labels": list(pj.labels),
        "gates": pj.gate_statuses,
        "gpu": _gpu(env, predicate),
        "headline": headline(pack_dir, pj, stages, outcomes),
        "signature": {"state": signature_state(prov), "principal": prov.principal, "fingerprint": prov.fingerprint},
        "digests": digests(pack_dir),
    }


def _views(members: list[dict]) -> list[Member]:
    return [Member.from_json(m) for m in members]


def source_problems(members: list[dict]) -> list[str]:
    """Why these members cannot be one verdict: no commit, different commits, different uncommitted changes."""
    ms = _views(members)
    out = [f"member {m.pack_id}: pack.json records no git commit, so it cannot be matched with the others"
           for m in ms if not m.source.commit]
    commits: dict[str, list[str]] = {}
    for m in ms:
        if m.source.commit:
            commits.setdefault(m.source.commit, []).append(m.pack_id)
    if len(commits) > 1:
        out.append("members come from different commits (a merged verdict covers one commit): " + "; ".join(
            f"{c[:12]}: {', '.join(ids)}" for c, ids in commits.items()))
    trees = [m.source.tree_sha256 for m in ms]
    dirty = [m.pack_id for m in ms if m.source.dirty]
    if None not in trees and len(set(trees)) > 1:
        out.append("members come from different source trees (their tracked files differ, e.g. other uncommitted "
                   "changes): " + "; ".join(f"{m.pack_id}: {t[:12]}" for m, t in zip(ms, trees, strict=True)))
    elif None in trees and dirty:
        out.append(f"{', '.join(dirty)}: built from a dirty tree, and not every member records its source tree "
                   "digest (provenance.json), so the uncommitted changes cannot be matched")
    return out


def gpu_types(members: list[dict]) -> list[dict]:
    """The GPU types (by name) in order of first appearance, each with its members."""
    types: dict[str | None, list[str]] = {}
    for m in _views(members):
        types.setdefault(m.gpu.name, []).append(m.pack_id)
    return [{"name": name, "members": ids} for name, ids in types.items()]


def combined_gates(members: list[dict]) -> dict[str, str]:
    """Each gate's worst status over the members that hold it (error > fail > skipped > pass)."""
    gates = [m.gates for m in _views(members)]
    names = [g for g in GATE_ORDER if any(g in m for m in gates)]
    names += sorted({g for m in gates for g in m} - set(names))
    return {g: worst(m[g] for m in gates if g in m) for g in names}


def decide(members: list[dict], signatures_checked: bool) -> dict:
    """The verdict's label and labels under RULE, its GPU types and combined gates."""
    ms = _views(members)
    ok = [m.signature.state == VERIFIED for m in ms] if signatures_checked else None
    label = merged_label([m.label for m in ms], ok)
    return {"label": label, "labels": merged_labels([m.labels for m in ms], label),
            "gpu_types": gpu_types(members), "gates": combined_gates(members)}


def label_view(record: dict) -> dict:
    """The merged verdict in the shape `labels.format_labels` prints (gate reasons: each member's status)."""
    rec = MergedRecord.from_json(record)
    gates = {}
    for g, status in rec.gates.items():
        per = [f"{m.gpu.name or 'no GPU'} {m.gates.get(g, '-')}" for m in rec.members]
        gates[g] = {"status": status, "reason": "; ".join(per)}
    return {"pack_id": rec.verdict_id, "label": rec.label, "labels": rec.labels, "gates": gates}


def verdict_id(members: list[dict]) -> str:
    """<commit sha12>-<sha12 of the members' index.json digests, sorted>: the same members, the same id."""
    # a member whose index.json is not a file has no digest of it (verify names that member's problem)
    ms = _views(members)
    joined = "\n".join(sorted(m.digests.get("index.json") or "none" for m in ms))
    commit = (ms[0].source.commit or "nogit")[:12] if ms else "none"
    return f"{commit}-{hashlib.sha256(joined.encode('ascii')).hexdigest()[:12]}"


def load_record(folder: Path) -> dict:
    """merged.json as a dict; ValueError naming what is wrong (corrupt, another kind, an unknown schema)."""
    try:
        record = read_json(Path(folder) / MERGED_FILE)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{MERGED_FILE} is corrupt: {exc}") from None
    head = MergedHead.from_json(record)
    if not isinstance(record, dict) or head.kind != KIND:
        raise ValueError(f"{MERGED_FILE} is not a merged verdict (kind must be {KIND!r})")
    if head.schema not in KNOWN_SCHEMAS:
        raise ValueError(f"{MERGED_FILE} schema {head.schema!r} is unknown to this code (it knows "
                         f"{', '.join(map(str, KNOWN_SCHEMAS))}): use a newer evpack")
    if not head.member_objects:
        raise ValueError(f"{MERGED_FILE} is malformed: no members list")
    return record

