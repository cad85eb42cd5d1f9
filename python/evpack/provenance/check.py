"""`verify`'s provenance check: the statement's subjects and facts against the pack, and its signature.

Messages start with what failed: `provenance digest:` (a subject's SHA-256 differs from the
pack's file: the pack changed after the statement was made), `provenance facts:` (the statement
says something else than the pack's files), `signature:` (missing, not valid, not in the one
canonical form ssh-keygen writes, or not by an allowed signer), `provenance:` (the statement is
missing or malformed).

A signature is either made by the run itself (pack.json's `signing` records the key) or added
later by `python -m evpack sign` to a finished, verified pack whose run held no key (pack.json
records `signing: null`): the CI signs in a job of its own that runs no code of the PR.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..jsonio import parse_json, read_json
from ..records.pack import PackJson, SigningEntry
from ..records.provenance import Statement
from .attest import pack_subjects, read_pack_facts
from .sigform import signature_form_problem
from .signing import SigningError, check_signature, read_allowed_signers, ssh_keygen
from .statement import (
    PROVENANCE_FILE,
    SIGNATURE_FILE,
    diff_facts,
    facts_of,
    run_fact_problems,
    subject_problems,
    subjects_of,
)

UNSIGNED, SIGNED, UNCHECKED = "unsigned", "signed", "unchecked"


@dataclass(frozen=True)
class ProvenanceCheck:
    state: str  # unsigned | signed | unchecked (a signature is there but ssh-keygen is not)
    problems: tuple[str, ...]
    principal: str | None  # the allowed signer, when --allowed-signers was given and the signature is good
    fingerprint: str | None
    summary: str  # one line for the CLI
    signed_later: bool = False  # added by `evpack sign` after the run (pack.json records no key)


def _signing_record(pack_dir: Path) -> tuple[bool, object]:
    """(pack.json has a `signing` entry at all, the entry as written). Old packs have none."""
    try:
        pj = read_json(pack_dir / "pack.json")
    except (OSError, ValueError):
        return False, None
    if not isinstance(pj, dict) or "signing" not in pj:
        return False, None
    return True, PackJson.from_json(pj).signing


def _subject_problems(pack_dir: Path, statement: dict) -> list[str]:
    """The statement's subjects against the exact list its type's rule gives for this pack."""
    stated = subjects_of(statement)
    if not (pack_dir / "index.json").is_file():
        return ["provenance digest: index.json is missing"]
    return subject_problems(stated, pack_subjects(pack_dir, Statement.from_json(statement).predicateType))


def _unsigned(problems: list[str], require: bool, summary: str) -> ProvenanceCheck:
    if require:
        problems.append(f"signature: unsigned pack (no {SIGNATURE_FILE}) and --require-signature was given")
    return ProvenanceCheck(UNSIGNED, tuple(problems), None, None, summary)


def signer_options(allowed_signers: Path | None, require_signature: bool) -> Path | None:
    """The allowed-signers file, checked; SigningError (exit 2) for bad options, before any pack is read."""
    if require_signature and allowed_signers is None:
        raise SigningError("--require-signature needs --allowed-signers FILE: a signature is trusted only "
                           "against known signers")
    allowed = read_allowed_signers(allowed_signers) if allowed_signers is not None else None
    if allowed is not None:
        ssh_keygen()
    return allowed


def check_provenance(pack_dir: Path, *, allowed_signers: Path | None = None,
                     require_signature: bool = False) -> ProvenanceCheck:
    """Check provenance.json and its signature. SigningError (exit 2) for bad input only."""
    allowed = signer_options(allowed_signers, require_signature)
    has_record, entry = _signing_record(pack_dir)
    record = entry if isinstance(entry, dict) else None
    recorded_key = SigningEntry.from_json(record).key_fingerprint
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
        problems += run_fact_problems(statement)
        changed = diff_facts(facts_of(statement), read_pack_facts(pack_dir))
        if changed:
            problems.append(f"provenance facts: the statement and the pack's files differ in {', '.join(changed)}")
    except (ValueError, TypeError, AttributeError, KeyError) as exc:  # not JSON, or a field of another type
        problems.append(f"provenance: {PROVENANCE_FILE} is malformed: {exc}")
    if not sig.is_file():
        if record:
            problems.append(f"signature: pack.json records signing with key {recorded_key} but "
                            f"there is no {SIGNATURE_FILE} (signing failed, or the signature was removed)")
        return _unsigned(problems, require_signature, "unsigned")
    signed_later = has_record and entry is None  # `signing: null`: signed after the run by `evpack sign`
    if not record and not signed_later:
        problems.append(f"signature: {SIGNATURE_FILE} is there but pack.json records no signing")
    sig_bytes = sig.read_bytes()
    form = signature_form_problem(sig_bytes)
    if form is not None:
        problems.append(f"signature: {SIGNATURE_FILE} is not accepted: {form}")
        return ProvenanceCheck(SIGNED, tuple(problems), None, None, "signature NOT valid")
    try:
        ssh_keygen()
    except SigningError:
        return ProvenanceCheck(UNCHECKED, tuple(problems), None, None,
                               "signature present but not checked: ssh-keygen not found on PATH")
    check = check_signature(data, sig_bytes, allowed)
    if not check.ok:
        problems.append(f"signature: not valid for {PROVENANCE_FILE}: {check.detail}")
        return ProvenanceCheck(SIGNED, tuple(problems), None, check.fingerprint, "signature NOT valid")
    if record and check.fingerprint != recorded_key:
        problems.append(f"signature: made with key {check.fingerprint} but pack.json records key "
                        f"{recorded_key}")
    when = " after the run" if signed_later else ""
    if check.principal:
        summary = f"signed{when} by {check.principal} ({check.key_type} key {check.fingerprint})"
    else:
        summary = (f"signature good{when}, {check.key_type} key {check.fingerprint}; signer not checked "
                   "(give --allowed-signers FILE)")
    if problems:
        summary += "; but the pack does not match what was signed"
    return ProvenanceCheck(SIGNED, tuple(problems), check.principal, check.fingerprint, summary, signed_later)
