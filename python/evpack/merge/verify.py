"""`verify DIR` of a merged verdict (a folder with merged.json): every member re-verified, every digest
re-checked, the overall label re-derived.

What is checked:
- the verdict's own files (merged.json, report.md, comment.md) against its index.json; no symlink or
  special file anywhere; members/ holds exactly the members merged.json names;
- each member with the pack `verify` (consistency, provenance statement, and its signature against
  --allowed-signers when given), the SHA-256 of its index.json, pack.json and provenance files against
  merged.json, and its whole record (label, gates, GPU, headline numbers, source) re-read from its files;
- that the members still come from one commit, and the label, labels, GPU types and combined gates
  re-derived under the rule merged.json records.
Signatures: with --allowed-signers each member's signature state is re-derived and compared; without,
a member merged.json calls verified must still carry an intact signature (its signer is not checked
here, as `verify` of a pack says). Reports are views, covered by index.json and never compared as text.

Standard library only, like verify.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..dictwalk import MISSING, Rules, all_keys
from ..dictwalk import differences as walk
from ..pack import PACK_ID_RE, PackError
from ..provenance.signing import SigningError, read_allowed_signers, ssh_keygen
from ..records.merged import Member, MemberSignature, MergedHead, MergedRecord, StoredMember
from ..verify import compare_index, list_files, read_index, scan, verify_all
from .record import (
    INDEX_FILE,
    MEMBERS_DIR,
    SIGNATURE_STATES,
    UNSIGNED,
    VERDICT_FILES,
    VERIFIED,
    decide,
    load_record,
    member_record,
    source_problems,
    verdict_id,
)

COMPARED = ("label", "labels", "gpu_types", "gates")  # the decision, re-derived from the members


@dataclass(frozen=True)
class MergedCheck:
    problems: tuple[str, ...]
    members: tuple[tuple[str, str], ...]  # (pack id, provenance summary)
    label: str | None
    signers_checked: bool  # the signature states were re-derived against the allowed signers and compared
    rule_needs_signatures: bool = False  # merged.json's rule: complete needs every member's signature verified


def _member_mismatch(path: str, stored, derived) -> str:
    if stored is MISSING:
        return f"{path}: missing in merged.json"
    if derived is MISSING:
        return f"{path}: not derivable from the member's files"
    return f"{path}: merged.json says {stored!r} but the files give {derived!r}"


MEMBER_RULES = Rules(mismatch=_member_mismatch, keys=all_keys)  # keys on either side count; exact values


def differences(stored, derived, path: str) -> list[str]:
    """Where a stored record and the one re-derived from the files disagree (keys on either side count)."""
    return walk(stored, derived, MEMBER_RULES, path)


def check_own_files(folder: Path, names: set[str]) -> list[str]:
    """The verdict's files against index.json; members/ holds exactly the named members (folders)."""
    try:
        listed, problems = read_index(folder)
    except FileNotFoundError:
        return [f"no {INDEX_FILE}"]
    if listed is None:
        return problems
    files, problems = list_files(folder)
    own = {f for f in files if not f.startswith(f"{MEMBERS_DIR}/")} - {INDEX_FILE}
    problems += [f"missing file: {f}" for f in sorted(set(VERDICT_FILES) - own - set(listed))]
    problems += compare_index(folder, listed, own)
    present = {p.name for p in (folder / MEMBERS_DIR).iterdir()} if (folder / MEMBERS_DIR).is_dir() else set()
    problems += [f"{MEMBERS_DIR}/{n}: not a member named by merged.json" for n in sorted(present - names)]
    problems += [f"{MEMBERS_DIR}/{n}: missing (merged.json names it as a member)" for n in sorted(names - present)]
    problems += [f"{MEMBERS_DIR}/{n}: not a folder" for n in sorted(names & present)
                 if not (folder / MEMBERS_DIR / n).is_dir() or (folder / MEMBERS_DIR / n).is_symlink()]
    return problems


def _signature_problems(value: object, derived: MemberSignature, signers_checked: bool, where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}.signature: {type(value).__name__}, not an object"]
    stored = MemberSignature.from_json(value)
    if stored.state not in SIGNATURE_STATES:
        return [f"{where}.signature.state: unknown state {stored.state!r}"]
    if (stored.state == UNSIGNED) != (derived.state == UNSIGNED):
        return [f"{where}.signature: merged.json says {stored.state} but the member is {derived.state}"]
    out = []
    if signers_checked and stored.state != derived.state:
        out.append(f"{where}.signature: merged.json says {stored.state} but against these allowed signers "
                   f"it is {derived.state}")
    # A member merged.json calls verified names the key that signed it (merge wrote it so): without the
    # allowed signers here, that key is the one thing of the claim this check can hold to the member.
    named = stored.fingerprint or stored.state == VERIFIED
    if named and derived.fingerprint and stored.fingerprint != derived.fingerprint:
        out.append(f"{where}.signature: merged.json names key {stored.fingerprint} but the member is signed "
                   f"with {derived.fingerprint}")
    return out


def verify_merged(folder: Path, *, allowed_signers: Path | None = None, require_signature: bool = False,
                  stages: str | None = None) -> MergedCheck:
    """Mismatches of a merged verdict (none when it verifies); a damaged member or merged.json is a mismatch.
    SigningError (exit 2) only for bad signing options."""
    folder = Path(folder).resolve()
    if require_signature and allowed_signers is None:
        raise SigningError("--require-signature needs --allowed-signers FILE: a signature is trusted only "
                           "against known signers")
    if allowed_signers is not None:  # bad signing input is exit 2, before any member is read
        allowed_signers = read_allowed_signers(allowed_signers)
        ssh_keygen()
    unsafe = scan(folder).unsafe  # a symlink or special file anywhere: nothing of the verdict is opened
    if unsafe:
        return MergedCheck(unsafe, (), None, False)
    try:
        record = load_record(folder)
    except FileNotFoundError:
        return MergedCheck(("no merged.json",), (), None, False)
    except ValueError as exc:
        return MergedCheck((str(exc),), (), None, False)
    merged = MergedRecord.from_json(record)
    stored_members = [StoredMember.from_json(m) for m in MergedHead.from_json(record).members]
    ids = [str(m.pack_id) for m in stored_members]
    problems = check_own_files(folder, set(ids))
    if not ids:
        problems.append("merged.json names no member")
    if len(set(ids)) != len(ids):
        problems.append("merged.json names a member twice")
    rule_checked = merged.rule.signatures_checked
    if not isinstance(rule_checked, bool):
        problems.append("rule.signatures_checked: missing in merged.json")
    # States are compared exactly only when both the merge and this check had allowed signers.
    strict = allowed_signers is not None and rule_checked is True
    derived, summaries = [], []
    for i, (pack_id, stored) in enumerate(zip(ids, stored_members, strict=True)):
        where = f"members[{i}] ({pack_id})"
        member = folder / MEMBERS_DIR / pack_id
        if not PACK_ID_RE.match(pack_id):
            problems.append(f"{where}: not a pack id")
            continue
        if not member.is_dir() or member.is_symlink():
            continue  # named by check_own_files
        try:
            outcomes: dict = {}
            member_problems, prov = verify_all(member, allowed_signers=allowed_signers,
                                               require_signature=require_signature, stages=stages, derived_out=outcomes)
            rec = member_record(member, prov, stages=stages, outcomes=outcomes)
        except (PackError, OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"member {pack_id}: not a readable pack: {exc}")
            continue
        problems += [f"member {pack_id}: {p}" for p in member_problems]
        summaries.append((pack_id, prov.summary))
        problems += differences({k: v for k, v in stored.raw.items() if k != "signature"},
                                {k: v for k, v in rec.items() if k != "signature"}, where)
        problems += _signature_problems(stored.signature or {}, Member.from_json(rec).signature, strict, where)
        if not strict and isinstance(stored.signature, dict):
            rec = dict(rec, signature=stored.signature)  # the signer is not re-checked here: merged.json's word
        derived.append(rec)
    if len(derived) != len(stored_members):
        return MergedCheck(tuple(problems), tuple(summaries), merged.label, strict, rule_checked is True)
    problems += source_problems(derived)
    decision = dict(decide(derived, rule_checked is True), verdict_id=verdict_id(derived))
    for key in (*COMPARED, "verdict_id"):
        problems += differences(record[key], decision[key], key) if key in record else [
            f"{key}: missing in merged.json"]
    stored_commit = merged.source.commit
    commit = Member.from_json(derived[0]).source.commit if derived else None
    if stored_commit != commit:
        problems.append(f"source.commit: merged.json says {stored_commit} but the members come from {commit}")
    return MergedCheck(tuple(problems), tuple(summaries), decision["label"], strict, rule_checked is True)
