"""What a forger without the signing key does to a pack, for the attack tests: re-index it, drop its signature
(the subjects of provenance.json made to match, as an unsigned pack's are) and re-write every stored claim as
the pack's own files now give it (what the forger's copy of evpack would write after editing raw records)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

UNINDEXED = ("provenance.json", "provenance.json.sig")


def rehash(pack: Path) -> None:
    """A forger's index.json: every regular file but the unindexed ones, hashed as it now is."""
    files = sorted(p.relative_to(pack).as_posix() for p in pack.rglob("*") if p.is_file() and not p.is_symlink())
    index = json.loads((pack / "index.json").read_text())
    index["files"] = {f: hashlib.sha256((pack / f).read_bytes()).hexdigest() for f in files
                      if f not in UNINDEXED and f != "index.json"}
    (pack / "index.json").write_text(json.dumps(index, indent=2) + "\n")


def unsign(pack: Path) -> None:
    """No signature; provenance.json's subjects and label as the edited pack gives them (no key needed)."""
    from evpack.provenance.attest import pack_subjects, read_pack_facts

    (pack / "provenance.json.sig").unlink(missing_ok=True)
    prov = pack / "provenance.json"
    if not prov.is_file():
        return
    statement = json.loads(prov.read_text())
    statement["subject"] = [s.to_json() for s in pack_subjects(pack, statement["predicateType"])]
    statement["predicate"]["label"] = read_pack_facts(pack)["label"]
    prov.write_text(json.dumps(statement, indent=2) + "\n")


def reconcile(pack: Path) -> None:
    """Every stored claim (each outcome.json, pack.json's statuses, label, summary and digest) re-written as
    derive_all gives it from the pack's files."""
    from evpack.derivation import derive_all
    from evpack.pack import stage_names_of
    from evpack.records.migrations import read_pack
    from evpack.records.schema import spec

    raw = json.loads((pack / "pack.json").read_text())
    derived = derive_all(pack, stage_names_of(read_pack(raw)), gate_names=spec(raw["schema_version"]).required_gates,
                         parallel=True)
    for name, out in derived.stages.items():
        (pack / name / "outcome.json").write_text(json.dumps(out.to_json(), indent=2) + "\n")
        raw["stages"][name].update(status=out.status, reason=out.reason)
    for gate, res in derived.gates.items():
        raw["gates"][gate] = {"status": res.status, "reason": res.reason}
    raw["label"], raw["labels"] = derived.label, derived.labels
    if "canonical_speedup" in (raw.get("summary") or {}):
        raw["summary"]["canonical_speedup"] = derived.facts.canonical_speedup
    raw["content_digest"] = derived.digest
    (pack / "pack.json").write_text(json.dumps(raw, indent=2) + "\n")


def forge(pack: Path, *, claims: bool = False) -> None:
    """After the edits: the claims re-derived (claims=True), the index re-written, the signature dropped."""
    if claims:
        reconcile(pack)
    rehash(pack)
    unsign(pack)
