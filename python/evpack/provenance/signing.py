"""OpenSSH signatures over a pack's provenance statement: the only module that runs `ssh-keygen -Y`.

Signing uses the namespace `evpack` (`ssh-keygen -Y sign -n evpack`), so a signature made for
anything else (git commits, files) never verifies as a pack signature, and an allowed-signers
line can restrict a key to packs with `namespaces="evpack"`. ssh-keygen runs without a terminal
and without the agent: the key file given is the key that signs, and a passphrase prompt fails
instead of waiting.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import PackError

NAMESPACE = "evpack"
TIMEOUT_S = 60
# "Good "evpack" signature for alice with ED25519 key SHA256:..." (verify) or "... signature with ..." (check-novalidate)
_GOOD_RE = re.compile(r'^Good "(?P<ns>[^"]+)" signature (?:for (?P<principal>.+) )?with (?P<type>\S+) key '
                      r"(?P<fp>SHA256:\S+)", re.M)


class SigningError(PackError):
    """Bad signing input (key file, allowed-signers file, ssh-keygen absent): one line, exit 2."""


@dataclass(frozen=True)
class SigningKey:
    path: Path
    public_key: str  # "ssh-ed25519 AAAA... comment", as `ssh-keygen -y` prints it
    fingerprint: str  # "SHA256:..."
    key_type: str  # "ED25519", "RSA", ...

    @property
    def comment(self) -> str:
        parts = self.public_key.split(None, 2)
        return parts[2] if len(parts) == 3 else ""

    def record(self) -> dict:
        """What pack.json says about the signing key (the report shows it)."""
        return {"method": f"ssh-keygen -Y sign -n {NAMESPACE}", "key_type": self.key_type,
                "key_fingerprint": self.fingerprint, "key_comment": self.comment}


@dataclass(frozen=True)
class SignatureCheck:
    ok: bool
    fingerprint: str | None  # of the key that made the signature (when ssh-keygen could read it)
    key_type: str | None
    principal: str | None  # from the allowed-signers file; None when no file was given
    detail: str  # ssh-keygen's own words when not ok


def ssh_keygen() -> str:
    found = shutil.which("ssh-keygen")
    if not found:
        raise SigningError("ssh-keygen not found on PATH: install OpenSSH (package openssh-client) "
                           "to sign packs or check their signatures")
    return found


def _run(args: list[str], data: bytes | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    try:
        return subprocess.run([ssh_keygen(), *args], input=data if data is not None else b"",
                              capture_output=True, timeout=TIMEOUT_S, env=env, start_new_session=True)
    except subprocess.TimeoutExpired:
        raise SigningError(f"ssh-keygen {' '.join(args[:2])} did not finish in {TIMEOUT_S} s") from None


def _words(proc: subprocess.CompletedProcess, limit: int = 300) -> str:
    text = (proc.stderr or b"").decode("utf-8", "replace") + (proc.stdout or b"").decode("utf-8", "replace")
    lines = [ln.strip().removeprefix("Enter passphrase:").strip() for ln in text.splitlines()
             if ln.strip() and not ln.startswith("@") and "Signing data on standard input" not in ln]
    return "; ".join(x for x in lines if x)[:limit] or f"exit status {proc.returncode}"


def _readable_file(path: Path, what: str) -> bytes:
    if not path.exists():
        raise SigningError(f"{what} {path}: no such file")
    if not path.is_file():
        raise SigningError(f"{what} {path}: not a regular file")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise SigningError(f"{what} {path}: cannot be read: {exc.strerror}") from None


def load_signing_key(path: Path) -> SigningKey:
    """Check a private key can sign unattended (a probe signature), and describe it. SigningError if not."""
    path = Path(path).expanduser()
    text = _readable_file(path, "signing key").decode("utf-8", "replace")
    if "PRIVATE KEY-----" not in text:
        hint = " (a public key)" if text.lstrip().startswith(("ssh-", "ecdsa-", "sk-")) else ""
        raise SigningError(f"signing key {path} has no private part{hint}: give the private key file")
    pub = _run(["-y", "-f", str(path)])
    if pub.returncode != 0:
        words = _words(pub, limit=10_000)
        if "bad permissions" in words or "are too open" in words:
            raise SigningError(f"signing key {path}: permissions too open, ssh-keygen ignores it (chmod 600 {path})")
        if "passphrase" in words:
            raise SigningError(f"signing key {path} is passphrase-protected: signing runs without a prompt, "
                               "give a key without a passphrase")
        raise SigningError(f"signing key {path} cannot be loaded: {words[:300]}")
    probe = b"evpack signing probe\n"
    sig = sign(path, probe)
    check = check_signature(probe, sig, None)
    if not check.ok or not check.fingerprint:
        raise SigningError(f"signing key {path}: the probe signature does not check: {check.detail}")
    return SigningKey(path=path, public_key=pub.stdout.decode("ascii", "replace").strip(),
                      fingerprint=check.fingerprint, key_type=check.key_type or "")


def sign(key_path: Path, data: bytes) -> bytes:
    """The armored SSH signature of data (`ssh-keygen -Y sign -n evpack`, data on stdin)."""
    proc = _run(["-Y", "sign", "-n", NAMESPACE, "-f", str(key_path)], data)
    if proc.returncode != 0 or b"BEGIN SSH SIGNATURE" not in proc.stdout:
        raise SigningError(f"ssh-keygen -Y sign with {key_path} failed: {_words(proc)}")
    return proc.stdout


def read_allowed_signers(path: Path) -> Path:
    """The allowed-signers file, checked to be readable and to hold at least one key line."""
    path = Path(path).expanduser()
    text = _readable_file(path, "allowed-signers file").decode("utf-8", "replace")
    if not any(ln.strip() and not ln.lstrip().startswith("#") for ln in text.splitlines()):
        raise SigningError(f"allowed-signers file {path} holds no signer line "
                           f'(format: principal namespaces="{NAMESPACE}" ssh-ed25519 AAAA...)')
    return path


def _good(proc: subprocess.CompletedProcess) -> re.Match | None:
    text = (proc.stderr or b"").decode("utf-8", "replace") + (proc.stdout or b"").decode("utf-8", "replace")
    m = _GOOD_RE.search(text)
    return m if proc.returncode == 0 and m and m.group("ns") == NAMESPACE else None


def check_signature(data: bytes, signature: bytes, allowed_signers: Path | None) -> SignatureCheck:
    """Is `signature` a good evpack signature over `data`, and (with a file) by an allowed signer?

    Without allowed_signers only the signature itself is checked (`-Y check-novalidate`): it
    proves the data is unchanged since the key signed it, not whose key it is.
    """
    with tempfile.TemporaryDirectory(prefix="evpack-sig-") as tmp:
        sig_file = Path(tmp) / "provenance.json.sig"
        sig_file.write_bytes(signature)
        bare = _run(["-Y", "check-novalidate", "-n", NAMESPACE, "-s", str(sig_file)], data)
        m = _good(bare)
        if m is None:
            return SignatureCheck(False, None, None, None, _words(bare))
        fp, ktype = m.group("fp"), m.group("type")
        if allowed_signers is None:
            return SignatureCheck(True, fp, ktype, None, "")
        found = _run(["-Y", "find-principals", "-s", str(sig_file), "-f", str(allowed_signers)])
        principals = [p for p in found.stdout.decode("utf-8", "replace").splitlines() if p.strip()]
        if found.returncode != 0 or not principals:
            return SignatureCheck(False, fp, ktype, None,
                                  f"the signing key {fp} is not in the allowed signers {allowed_signers} "
                                  f"for namespace {NAMESPACE} ({_words(found)})")
        detail = ""
        for principal in principals:
            proc = _run(["-Y", "verify", "-f", str(allowed_signers), "-I", principal, "-n", NAMESPACE,
                         "-s", str(sig_file)], data)
            good = _good(proc)
            if good is not None:
                return SignatureCheck(True, good.group("fp"), good.group("type"), principal, "")
            detail = _words(proc)
        return SignatureCheck(False, fp, ktype, None, f"ssh-keygen -Y verify refused it: {detail}")


def allowed_signers_line(principal: str, public_key: str) -> str:
    """One allowed-signers line that trusts public_key for evpack signatures by principal."""
    if not principal or any(c.isspace() for c in principal):
        raise SigningError(f"principal {principal!r} must be one word (e.g. an e-mail address)")
    return f'{principal} namespaces="{NAMESPACE}" {public_key.strip()}\n'
