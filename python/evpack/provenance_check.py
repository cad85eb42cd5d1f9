"""`verify`'s provenance check: the statement's subjects and facts against the pack, and its signature.

Messages start with what failed: `provenance digest:` (a subject's SHA-256 differs from the
pack's file: the pack changed after the statement was made), `provenance facts:` (the statement
says something else than the pack's files), `signature:` (missing, not valid, or not by an
allowed signer), `provenance:` (the statement is missing or malformed).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .attest import pack_subjects, read_pack_facts
from .jsonio import parse_json, read_json
from .provenance import PROVENANCE_FILE, SIGNATURE_FILE, diff_facts, facts_of, subjects_of
from .signing import SigningError, check_signature, read_allowed_signers, ssh_keygen

UNSIGNED, SIGNED, UNCHECKED = "unsigned", "signed", "unchecked"


@dataclass(frozen=True)
class ProvenanceCheck:
    state: str  # unsigned | signed | unchecked (a signature is there but ssh-keygen is not)
    problems: tuple[str, ...]
    principal: str | None  # the allowed signer, when --allowed-signers was given and the signature is good
    fingerprint: str | None
    summary: str  # one line for the CLI


def _signing_record(pack_dir: Path) -> tuple[bool, dict | None]:
    """(pack.json has a `signing` entry at all, the entry). Old packs have none."""
    try:
        pj = read_json(pack_dir / "pack.json")
    except (OSError, ValueError):
        return False, None
    if not isinstance(pj, dict) or "signing" not in pj:
        return False, None
    return True, pj["signing"] if isinstance(pj["signing"], dict) else None


def _subject_problems(pack_dir: Path, statement: dict) -> list[str]:
    stated = {s.name: s.sha256 for s in subjects_of(statement)}
    if not (pack_dir / "index.json").is_file():
        return ["provenance digest: index.json is missing"]
    actual = {s.name: s.sha256 for s in pack_subjects(pack_dir)}
    out = []
    for name in sorted(set(stated) | set(actual)):
        if name not in stated:
            out.append(f"provenance digest: {name} (sha256 {actual[name][:12]}) is not a subject of the statement")
        elif name not in actual:
            out.append(f"provenance digest: subject {name} is not in the pack (no such file or build record)")
        elif stated[name] != actual[name]:
            out.append(f"provenance digest: {name} has sha256 {actual[name][:12]} but the statement says "
                       f"{stated[name][:12]}: the pack changed after the statement was made")
    return out


def _unsigned(problems: list[str], require: bool, summary: str) -> ProvenanceCheck:
    if require:
        problems.append(f"signature: unsigned pack (no {SIGNATURE_FILE}) and --require-signature was given")
    return ProvenanceCheck(UNSIGNED, tuple(problems), None, None, summary)


def check_provenance(pack_dir: Path, *, allowed_signers: Path | None = None,
                     require_signature: bool = False) -> ProvenanceCheck:
    """Check provenance.json and its signature. SigningError (exit 2) for bad input only."""
    if require_signature and allowed_signers is None:
        raise SigningError("--require-signature needs --allowed-signers FILE: a signature is trusted only "
                           "against known signers")
    allowed = read_allowed_signers(allowed_signers) if allowed_signers is not None else None
    if allowed is not None:
        ssh_keygen()
    has_record, record = _signing_record(pack_dir)
    prov, sig = pack_dir / PROVENANCE_FILE, pack_dir / SIGNATURE_FILE
    problems: list[str] = []
    if not prov.is_file():
        if sig.exists():
            problems.append(f"provenance: {SIGNATURE_FILE} is there but {PROVENANCE_FILE} is missing")
        if has_record:
            problems.append(f"provenance: {PROVENANCE_FILE} is missing (pack.json comes from a version that "
                            "writes one)")
        return _unsigned(problems, require_signature,
                         "unsigned (no provenance statement)" if not has_record else "unsigned")
    data = prov.read_bytes()
    try:
        statement = parse_json(data.decode("utf-8"), prov)
        problems += _subject_problems(pack_dir, statement)
        changed = diff_facts(facts_of(statement), read_pack_facts(pack_dir))
        if changed:
            problems.append(f"provenance facts: the statement and the pack's files differ in {', '.join(changed)}")
    except (ValueError, TypeError, AttributeError, KeyError) as exc:  # not JSON, or a field of another type
        problems.append(f"provenance: {PROVENANCE_FILE} is malformed: {exc}")
    if not sig.is_file():
        if record:
            problems.append(f"signature: pack.json records signing with key {record.get('key_fingerprint')} but "
                            f"there is no {SIGNATURE_FILE} (signing failed, or the signature was removed)")
        return _unsigned(problems, require_signature, "unsigned")
    if not record:
        problems.append(f"signature: {SIGNATURE_FILE} is there but pack.json records an unsigned run")
    try:
        ssh_keygen()
    except SigningError:
        return ProvenanceCheck(UNCHECKED, tuple(problems), None, None,
                               "signature present but not checked: ssh-keygen not found on PATH")
    check = check_signature(data, sig.read_bytes(), allowed)
    if not check.ok:
        problems.append(f"signature: not valid for {PROVENANCE_FILE}: {check.detail}")
        return ProvenanceCheck(SIGNED, tuple(problems), None, check.fingerprint, "signature NOT valid")
    if record and check.fingerprint != record.get("key_fingerprint"):
        problems.append(f"signature: made with key {check.fingerprint} but pack.json records key "
                        f"{record.get('key_fingerprint')}")
    if check.principal:
        summary = f"signed by {check.principal} ({check.key_type} key {check.fingerprint})"
    else:
        summary = (f"signature good, {check.key_type} key {check.fingerprint}; signer not checked "
                   "(give --allowed-signers FILE)")
    return ProvenanceCheck(SIGNED, tuple(problems), check.principal, check.fingerprint, summary)
