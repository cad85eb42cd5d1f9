"""Attacks on the signature, on `sign` and on merged verdicts, by someone who holds keys of their own but not
the key in artifacts/reference/allowed_signers.

The signed reference pack is attacked with the attacker's Ed25519, RSA and ECDSA keys, with signatures for
other namespaces and with a signature moved from the other signed pack; `sign` is pointed at links out of
the pack; a merged verdict is re-written to claim a signer it cannot show. Packs other than the reference
come from the real pipeline on the stand-in stages (tests/fakestages), keys from ssh-keygen.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import reference
from conftest import copy_pack, run_cli, verify_fake
from test_attacks_pack_fs import bounded_cli
from test_merge import env, member  # noqa: F401  (fixtures)
from test_signing import allowed, keygen, keys, make_pack  # noqa: F401  (keys: a fixture)

from evpack.binary import sha256_file
from evpack.jsonio import read_json, write_json
from evpack.provenance.check import check_provenance
from evpack.provenance.signing import load_signing_key, sign
from evpack.verify import check_index

SIGNED = reference.SIGNED
OTHER_SIGNED = reference.OTHER_SIGNED
ALLOWED = reference.SIGNERS
# A stand-in pack that verifies: every stage that passes records the binary it loaded (verify requires it).
VERIFIES = {"binary": {s: "ab" * 32 for s in ("build", "sass", "tensor_proof", "sanitize", "correctness",
                                              "stability", "bench")}}


pytestmark = [pytest.mark.usefixtures("needs_ssh_keygen"), reference.needs("SIGNED", "SIGNERS")]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return copy_pack(SIGNED, tmp_path_factory.mktemp("pristine"))


def _own_key(folder: Path, kind: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    key = folder / kind
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", f"mallory-{kind}", "-f", str(key)],
                   check=True, capture_output=True, stdin=subprocess.DEVNULL)
    return key


def _sign_ns(key: Path, data: bytes, namespace: str) -> bytes:
    return subprocess.run(["ssh-keygen", "-Y", "sign", "-n", namespace, "-f", str(key)], input=data,
                          capture_output=True, check=True).stdout


def _prov_problems(pack: Path, allowed_signers: Path | None = ALLOWED, require: bool = True) -> list[str]:
    return list(check_provenance(pack, allowed_signers=allowed_signers, require_signature=require).problems)


def _rehash_pack(pack: Path) -> None:
    index = read_json(pack / "index.json")
    index["files"] = {f: sha256_file(pack / f) for f in index["files"]}
    (pack / "index.json").write_text(json.dumps(index, indent=2) + "\n")


# --- the signed reference pack ------------------------------------------------------------------------

def test_a_consistent_forgery_signed_with_an_own_key_is_refused(pristine, tmp_path):
    """Everything a forger without the key can do: edit a file, re-hash index.json, record their own key in
    pack.json, re-write the statement's subject and sign it. The pack is consistent and its signature is
    intact; only the allowed-signers file tells, and label --require-signature refuses it."""
    pack = copy_pack(pristine, tmp_path)
    key = _own_key(tmp_path / "keys", "ed25519")
    (pack / "report.md").write_text((pack / "report.md").read_text() + "\nReviewed and approved.\n")
    pj = read_json(pack / "pack.json")
    pj["signing"] = load_signing_key(key).record()
    write_json(pack / "pack.json", pj)
    _rehash_pack(pack)
    st = json.loads((pack / "provenance.json").read_text())
    st["subject"][0]["digest"]["sha256"] = sha256_file(pack / "index.json")
    data = (json.dumps(st, indent=2) + "\n").encode()
    (pack / "provenance.json").write_bytes(data)
    (pack / "provenance.json.sig").write_bytes(sign(key, data))
    assert check_index(pack) == []
    assert _prov_problems(pack, None, require=False) == []  # intact, by a key nobody vouched for
    problems = _prov_problems(pack)
    assert any(p.startswith("signature: not valid for provenance.json: the signing key") and
               "is not in the allowed signers" in p for p in problems), problems
    proc = run_cli("label", str(pack), "--allowed-signers", str(ALLOWED), "--require-signature", timeout=300)
    assert proc.returncode == 1 and not proc.stdout.strip(), proc.stdout + proc.stderr
    assert "is not in the allowed signers" in proc.stderr


@pytest.mark.parametrize("kind, namespace, listed, needle", [
    ("ed25519", "git", True, "signature: not valid for provenance.json"),
    ("ed25519", "file", True, "signature: not valid for provenance.json"),
    ("rsa", "evpack", False, "is not in the allowed signers"),
    ("ecdsa", "evpack", True, "signature type ecdsa-sha2-nistp256 is not accepted"),
])
def test_own_keys_of_other_types_and_namespaces_are_refused(pristine, tmp_path, kind, namespace, listed, needle):
    """The untouched signed statement, re-signed by the attacker's key. `listed`: even a verifier whose
    allowed-signers file trusts that key (without a namespaces= restriction) refuses a signature made for
    another namespace, and an ECDSA signature (malleable) in any case."""
    pack = copy_pack(pristine, tmp_path)
    key = _own_key(tmp_path / "keys", kind)
    signers = ALLOWED
    if listed:
        signers = tmp_path / "allowed_signers"
        pub = subprocess.run(["ssh-keygen", "-y", "-f", str(key)], capture_output=True, text=True, check=True).stdout
        signers.write_text(ALLOWED.read_text() + f"mallory {pub.strip()}\n")
    (pack / "provenance.json.sig").write_bytes(_sign_ns(key, (pack / "provenance.json").read_bytes(), namespace))
    problems = _prov_problems(pack, signers)
    assert any(needle in p for p in problems), problems


@reference.needs("OTHER_SIGNED")
def test_a_signature_moved_from_the_other_signed_pack_is_refused(pristine, tmp_path):
    """Both packs are signed by an allowed key: a statement and signature of one never vouch for the other."""
    pack = copy_pack(pristine, tmp_path / "both")
    for name in ("provenance.json", "provenance.json.sig"):
        shutil.copyfile(OTHER_SIGNED / name, pack / name)
    problems = _prov_problems(pack)
    assert any(p.startswith("provenance digest: index.json has sha256") for p in problems), problems
    assert any(p.startswith("provenance facts:") and "pack_id" in p for p in problems), problems
    pack = copy_pack(pristine, tmp_path / "sig")
    shutil.copyfile(OTHER_SIGNED / "provenance.json.sig", pack / "provenance.json.sig")
    assert any(p.startswith("signature: not valid for provenance.json") for p in _prov_problems(pack))


# --- `sign` -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("link", [".provenance.json.sig.tmp", "provenance.json.sig"])
def test_sign_never_writes_through_a_link_out_of_the_pack(tmp_path, fake_env, keys, link):  # noqa: F811
    """A pack that would verify but for a link where `sign` writes (its temporary file, or a dangling link
    named as the signature): refused before any write, the file outside untouched or never created."""
    pack = make_pack(tmp_path, fake_env, None, VERIFIES)
    assert verify_fake(pack) == []
    outside = tmp_path / "outside" / "victim"
    outside.parent.mkdir()
    if link.startswith("."):
        outside.write_text("precious\n")
    (pack / link).symlink_to(outside)
    proc = bounded_cli("sign", str(pack), "--key", str(keys["alice"]), env=fake_env({}))
    assert proc.returncode == 1 and f"symlink in pack: {link}" in proc.stderr, proc.stdout + proc.stderr
    if link.startswith("."):
        assert outside.read_text() == "precious\n"
    else:
        assert not outside.exists()
    assert (pack / link).is_symlink() and not (pack / "provenance.json.sig").is_file()


def test_sign_refuses_a_pack_holding_a_pipe_without_blocking(tmp_path, fake_env, keys):  # noqa: F811
    pack = make_pack(tmp_path, fake_env, None, VERIFIES)
    (pack / "env.json").unlink()
    os.mkfifo(pack / "env.json")
    proc = bounded_cli("sign", str(pack), "--key", str(keys["alice"]), env=fake_env({}))
    assert proc.returncode == 1 and "special file in pack: env.json" in proc.stderr, proc.stdout + proc.stderr
    assert not (pack / "provenance.json.sig").exists()


# --- merged verdicts ----------------------------------------------------------------------------------

def _rewrite_verdict_index(folder: Path) -> None:
    idx = read_json(folder / "index.json")
    idx["files"] = {f: sha256_file(folder / f) for f in idx["files"]}
    write_json(folder / "index.json", idx)


def test_a_verdict_cannot_claim_a_verified_signer_without_naming_the_key(member, env, tmp_path):  # noqa: F811
    """Before: merged.json re-written to say a member (signed by the attacker's own key) was 'verified' by
    alice, with no fingerprint, verified and labelled evidence:complete without --allowed-signers: the
    fingerprint was compared only when merged.json gave one. A 'verified' member must name its key."""
    k = tmp_path / "keys"
    alice, mallory = keygen(k, "alice", "alice@example.org"), keygen(k, "mallory", "mallory@example.org")
    only_alice = allowed(k, [("alice@example.org", alice)])
    pack = member("alpha", VERIFIES, sign_key=mallory)
    out = tmp_path / "verdict"
    assert run_cli("merge", str(pack), "--out", str(out), env=env).returncode == 0
    rec = read_json(out / "merged.json")
    assert rec["members"][0]["signature"]["state"] == "unchecked" and rec["label"] == "evidence:complete"
    rec["rule"]["signatures_checked"] = True
    rec["members"][0]["signature"] = {"state": "verified", "principal": "alice@example.org", "fingerprint": None}
    write_json(out / "merged.json", rec)
    _rewrite_verdict_index(out)
    proc = run_cli("verify", str(out), env=env)
    assert proc.returncode == 1, proc.stdout
    assert "merged.json names key None but the member is signed with SHA256:" in proc.stdout
    proc = run_cli("label", str(out), "--allowed-signers", str(only_alice), "--require-signature", env=env)
    assert proc.returncode == 1 and not proc.stdout.strip() and "is not in the allowed signers" in proc.stderr


def test_member_names_and_links_in_a_verdict_never_lead_out_of_it(member, env, tmp_path):  # noqa: F811
    pack = member("alpha", VERIFIES)
    out = tmp_path / "verdict"
    assert run_cli("merge", str(pack), "--out", str(out), env=env).returncode == 0
    outside = tmp_path / "outside" / pack.name
    shutil.copytree(pack, outside)
    (outside / "pack.json").unlink()
    os.mkfifo(outside / "pack.json")  # a reader that opens it blocks
    rec = read_json(out / "merged.json")
    rec["members"][0]["pack_id"] = f"../../outside/{pack.name}"
    write_json(out / "merged.json", rec)
    _rewrite_verdict_index(out)
    proc = bounded_cli("verify", str(out), env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"MISMATCH members[0] (../../outside/{pack.name}): not a pack id" in proc.stdout
    link = tmp_path / "linked"
    shutil.copytree(out, link, symlinks=True)
    target = link / "members" / pack.name / "env.json"
    target.unlink()
    target.symlink_to(outside / "pack.json")
    proc = bounded_cli("verify", str(link), env=env)
    assert proc.returncode == 1 and [ln for ln in proc.stdout.splitlines() if ln.startswith("MISMATCH")] == [
        f"MISMATCH symlink in pack: members/{pack.name}/env.json (a pack holds regular files only)"], proc.stdout
