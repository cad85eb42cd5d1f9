"""A signed pack changed after signing never verifies: attacks on a copy of the committed H200 pack.

The attacker holds only a copy of a signed reference pack (and, where said, a key of their own
that is not an allowed signer). The property test applies random edits, additions, deletions,
renames and duplications, each with and without re-writing index.json as a forger would, and
checks that `verify --require-signature` finds a problem. The named attacks run the real CLI.
"""
from __future__ import annotations

import base64
import hashlib
import json
import struct
import subprocess
from pathlib import Path

import pytest
import reference
from conftest import copy_pack, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evpack.errors import PackError
from evpack.provenance.check import check_provenance
from evpack.provenance.sigform import ED25519_L, armor, signature_form_problem
from evpack.verify import check_index, verify_all

SIGNED = reference.SIGNED
ALLOWED = reference.SIGNERS
UNINDEXED = ("provenance.json", "provenance.json.sig")


pytestmark = [pytest.mark.usefixtures("needs_ssh_keygen"), reference.needs("SIGNED", "SIGNERS")]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """One copy of the signed pack that verifies (checked once); every attack works on a copy of it."""
    pack = copy_pack(SIGNED, tmp_path_factory.mktemp("pristine"))
    assert _problems(pack) == []
    return pack


def _problems(pack: Path) -> list[str]:
    """What verify --require-signature reports before any derivation: the index and the signed statement.
    verify_all returns these problems verbatim (test_full_verify_reports_the_same_problem)."""
    try:  # a pack without index.json is refused outright (the CLI's one line, exit 1): that is a problem too
        index = check_index(pack)
    except PackError as exc:
        index = [str(exc)]
    return index + list(check_provenance(pack, allowed_signers=ALLOWED, require_signature=True).problems)


def _rehash(pack: Path) -> None:
    """A forger's index.json: every file but the unindexed ones, hashed as it now is."""
    files = sorted(p.relative_to(pack).as_posix() for p in pack.rglob("*") if p.is_file())
    try:  # an earlier edit may have corrupted or removed index.json: the forger then writes a whole new one
        index = json.loads((pack / "index.json").read_text())
    except (OSError, ValueError):
        index = {}
    index = index if isinstance(index, dict) else {}
    index["files"] = {f: hashlib.sha256((pack / f).read_bytes()).hexdigest() for f in files
                      if f not in UNINDEXED and f != "index.json"}
    (pack / "index.json").write_text(json.dumps(index, indent=2) + "\n")


def _files(pack: Path) -> list[str]:
    return sorted(p.relative_to(pack).as_posix() for p in pack.rglob("*") if p.is_file())


def test_the_reported_forgery_is_refused(pristine, tmp_path):
    """The attack as reported: a log line appended, a build record whose basename is index.json carrying the
    signed index digest, index.json re-written. It verified as signed before the subject set was made exact."""
    pack = copy_pack(pristine, tmp_path)
    st_ = json.loads((pack / "provenance.json").read_text())
    signed_index = next(s for s in st_["subject"] if s["name"] == "index.json")["digest"]["sha256"]
    with open(pack / "build" / "build.log", "a") as f:
        f.write("forged\n")
    (pack / "build" / "binary_zz.json").write_text(json.dumps(
        {"module": "evpack._zz", "path": "/x/index.json", "sha256": signed_index}))
    _rehash(pack)
    for cmd in (["verify"], ["label"]):
        proc = run_cli(*cmd, str(pack), "--allowed-signers", str(ALLOWED), "--require-signature", timeout=300)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "provenance digest: index.json has sha256" in proc.stdout + proc.stderr
    out = tmp_path / "merged"
    proc = run_cli("merge", str(pack), "--out", str(out), "--allowed-signers", str(ALLOWED), timeout=300)
    assert proc.returncode != 0 and not (out / "merged.json").exists(), proc.stdout + proc.stderr
    proc = run_cli("dispatch-table", str(pack), "--out", str(tmp_path / "table.json"), timeout=300)
    assert proc.returncode != 0 and not (tmp_path / "table.json").exists()


def test_a_duplicated_subject_never_hides_another(pristine):
    """Compared as lists: the statement naming index.json twice (once right, once wrong) is a mismatch."""
    from evpack.provenance.statement import Subject, subject_problems

    right = Subject("index.json", "aa" * 32)
    obj = Subject("python/evpack/_C.so", "bb" * 32)
    assert subject_problems([right, obj], [right, obj]) == []
    dup = subject_problems([right, Subject("index.json", "cc" * 32), obj], [right, obj])
    assert any("more than once" in p for p in dup) and any("statement says cccccccccccc" in p for p in dup)
    assert any("is not a subject" in p for p in subject_problems([right], [right, obj]))
    assert any("is not in the pack" in p for p in subject_problems([right, obj, Subject("x", "dd" * 32)],
                                                                   [right, obj]))


def test_build_records_cannot_add_subjects(pristine, tmp_path):
    """Only the fixed build records are subjects: a record added under build/ is an unlisted file (or, with
    a re-hashed index, a changed index digest), never a subject that overrides one."""
    from evpack.provenance.attest import pack_subjects

    names = [s.name for s in pack_subjects(pristine, "urn:evpack:provenance:v1")]
    assert names == ["index.json", "_C.cpython-312-x86_64-linux-gnu.so", "_canaries.cpython-312-x86_64-linux-gnu.so"]
    pack = copy_pack(pristine, tmp_path)
    (pack / "build" / "binary_more.json").write_text(json.dumps({"module": "evpack._C", "path": "/y/index.json",
                                                                 "sha256": "ee" * 32}))
    assert [s.name for s in pack_subjects(pack, "urn:evpack:provenance:v1")] == names


# --- the signature file: one canonical form -------------------------------------------------------------

def _sig_blob(sig: bytes) -> bytes:
    return base64.b64decode(b"".join(sig.split(b"\n")[1:-2]))


def _malleate(blob: bytes) -> bytes:
    """The same Ed25519 signature with S replaced by S + L (accepted by ssh-keygen -Y verify)."""
    sig_len_at = len(blob) - 4 - 83  # the last string of the blob: the 83-byte ssh-ed25519 signature
    (n,) = struct.unpack(">I", blob[sig_len_at:sig_len_at + 4])
    assert n == 83
    raw = blob[-64:]
    s = int.from_bytes(raw[32:], "little") + ED25519_L
    assert s < 2**256
    return blob[:-32] + s.to_bytes(32, "little")


@pytest.mark.parametrize("variant", ["trailing_newline", "one_line", "crlf", "malleated_s"])
def test_other_forms_of_the_same_signature_are_refused(pristine, tmp_path, variant):
    pack = copy_pack(pristine, tmp_path)
    sig = (pack / "provenance.json.sig").read_bytes()
    blob = _sig_blob(sig)
    body = base64.b64encode(blob)
    new = {"trailing_newline": sig + b"\n",
           "one_line": b"-----BEGIN SSH SIGNATURE-----\n" + body + b"\n-----END SSH SIGNATURE-----\n",
           "crlf": sig.replace(b"\n", b"\r\n"),
           "malleated_s": armor(_malleate(blob)) if variant == "malleated_s" else b""}[variant]
    assert new != sig
    (pack / "provenance.json.sig").write_bytes(new)
    problems = _problems(pack)
    assert any(p.startswith("signature:") for p in problems), problems
    assert signature_form_problem(new) is not None
    assert signature_form_problem(sig) is None


def test_ssh_keygen_accepts_the_malleated_signature_so_the_form_check_matters(pristine, tmp_path):
    """Shows the check is live: OpenSSH's verify accepts S + L, evpack's verify does not."""
    sig = (pristine / "provenance.json.sig").read_bytes()
    bad = armor(_malleate(_sig_blob(sig)))
    f = tmp_path / "s.sig"
    f.write_bytes(bad)
    data = (pristine / "provenance.json").read_bytes()
    r = subprocess.run(["ssh-keygen", "-Y", "check-novalidate", "-n", "evpack", "-s", str(f)], input=data,
                       capture_output=True)
    assert r.returncode == 0, r.stderr
    assert "not reduced" in signature_form_problem(bad)


def test_ecdsa_signatures_are_refused(tmp_path):
    key = tmp_path / "ecdsa"
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", str(key)], check=True, capture_output=True)
    r = subprocess.run(["ssh-keygen", "-Y", "sign", "-n", "evpack", "-f", str(key)], input=b"x\n",
                       capture_output=True, check=True)
    assert "ECDSA" in signature_form_problem(r.stdout)


# --- the property: no change after signing verifies ----------------------------------------------------

EDIT = st.fixed_dictionaries({
    "kind": st.sampled_from(["flip", "insert", "truncate", "append", "add", "delete", "rename", "duplicate_key"]),
    "pick": st.integers(min_value=0, max_value=10**6),
    "offset": st.integers(min_value=0, max_value=10**9),
    "byte": st.integers(min_value=1, max_value=255),
    "data": st.binary(min_size=1, max_size=16),
    "name": st.from_regex(r"[a-z_]{1,10}(\.json|\.log|\.png|\.md)?", fullmatch=True),
    "rehash": st.booleans(),
})


def _apply(pack: Path, edit: dict) -> None:
    files = _files(pack)
    rel = files[edit["pick"] % len(files)]
    path = pack / rel
    data = path.read_bytes()
    kind = edit["kind"]
    if kind == "flip" and data:
        at = edit["offset"] % len(data)
        path.write_bytes(data[:at] + bytes([data[at] ^ edit["byte"]]) + data[at + 1:])
    elif kind == "insert":
        at = edit["offset"] % (len(data) + 1)
        path.write_bytes(data[:at] + edit["data"] + data[at:])
    elif kind == "truncate" and data:
        path.write_bytes(data[:edit["offset"] % len(data)])
    elif kind in ("append", "flip", "truncate"):
        path.write_bytes(data + edit["data"])
    elif kind == "add":
        folder = path.parent
        new = folder / edit["name"]
        while new.exists():
            new = new.with_name("x" + new.name)
        new.write_bytes(edit["data"])
    elif kind == "delete":
        path.unlink()
    elif kind == "rename":
        new = path.with_name(edit["name"])
        while new.exists():
            new = new.with_name("x" + new.name)
        path.rename(new)
    elif kind == "duplicate_key":  # a JSON file whose first key is written twice (the last one wins in Python)
        if path.suffix == ".json" and data.lstrip().startswith(b"{") and b":" in data:
            text = data.decode("utf-8", "replace")
            first = text.index("{") + 1
            path.write_text(text[:first] + '"__dup": 1, "__dup": 2,' + text[first:])
        else:
            path.write_bytes(data + edit["data"])
    if edit["rehash"]:
        _rehash(pack)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(EDIT, min_size=1, max_size=3))
def test_no_change_after_signing_verifies(pristine, tmp_path_factory, edits):
    pack = copy_pack(pristine, tmp_path_factory.mktemp("attack"))
    before = {f: (pack / f).read_bytes() for f in _files(pack)}
    for edit in edits:
        _apply(pack, edit)
    after = {f: (pack / f).read_bytes() for f in _files(pack)}
    if after == before:  # the edits cancelled out (a rename back, say): nothing to detect
        return
    assert _problems(pack), f"a changed pack verifies as signed: {edits}"


def test_full_verify_reports_the_same_problem(pristine, tmp_path):
    """The property test reads the index and provenance checks alone (fast); verify_all adds them verbatim."""
    pack = copy_pack(pristine, tmp_path)
    (pack / "bench" / "extra.png").write_bytes(b"\x89PNG")
    _rehash(pack)
    fast = _problems(pack)
    full, _ = verify_all(pack, allowed_signers=ALLOWED, require_signature=True)
    assert fast and set(fast) <= set(full)
