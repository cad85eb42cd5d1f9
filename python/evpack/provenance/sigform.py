"""The canonical form of an OpenSSH signature file (pure: bytes in, a problem or None out).

`ssh-keygen -Y verify` accepts more than one byte string for the same signature: a trailing
newline, the armor on one line instead of 70-column lines, and, for Ed25519, the scalar S
replaced by S + L (the reference implementation checks only S's top three bits). Each of those
is a byte of a signed pack changed after signing that still verifies. `verify` therefore accepts
a signature file only in the one form ssh-keygen writes, and only for key types whose signature
is unique for a key and a message:

- Ed25519 (`ssh-ed25519`, `sk-ssh-ed25519@openssh.com`): S < L (RFC 8032, section 5.1.7);
- RSA (`rsa-sha2-256`, `rsa-sha2-512`; PKCS #1 v1.5 is deterministic): the signature is exactly
  as long as the modulus (OpenSSH pads a shorter one with zeros, which would be a second form).

ECDSA signatures are malleable (s and n - s both verify) and are refused: sign packs with an
Ed25519 key (`ssh-keygen -t ed25519`). Format: PROTOCOL.sshsig in the OpenSSH sources.
"""
from __future__ import annotations

import base64
import binascii
import struct

BEGIN = b"-----BEGIN SSH SIGNATURE-----"
END = b"-----END SSH SIGNATURE-----"
WIDTH = 70  # base64 columns per line, as ssh-keygen writes them
MAGIC = b"SSHSIG"
VERSION = 1
ED25519_L = 2**252 + 27742317777372353535851937790883648493  # the group order
ED25519_TYPES = ("ssh-ed25519", "sk-ssh-ed25519@openssh.com")
RSA_SIG_TYPES = ("rsa-sha2-256", "rsa-sha2-512")


class _Malformed(Exception):
    pass


def armor(blob: bytes) -> bytes:
    """The signature file ssh-keygen writes for a signature blob."""
    text = base64.b64encode(blob)
    lines = [text[i:i + WIDTH] for i in range(0, len(text), WIDTH)]
    return b"\n".join([BEGIN, *lines, END]) + b"\n"


def _string(buf: bytes, at: int) -> tuple[bytes, int]:
    if at + 4 > len(buf):
        raise _Malformed("truncated")
    (n,) = struct.unpack(">I", buf[at:at + 4])
    if at + 4 + n > len(buf):
        raise _Malformed("truncated")
    return buf[at + 4:at + 4 + n], at + 4 + n


def _strings(buf: bytes, count: int) -> tuple[list[bytes], int]:
    out, at = [], 0
    for _ in range(count):
        s, at = _string(buf, at)
        out.append(s)
    return out, at


def _rsa_modulus_bytes(public_key: bytes) -> int:
    (key_type, _e, n), _ = _strings(public_key, 3)
    if key_type != b"ssh-rsa":
        raise _Malformed(f"an RSA signature by a {key_type.decode('ascii', 'replace')} key")
    return len(n.lstrip(b"\x00"))


def _signature_problem(public_key: bytes, signature: bytes) -> str | None:
    sig_type_raw, at = _string(signature, 0)
    sig_type = sig_type_raw.decode("ascii", "replace")
    raw, at = _string(signature, at)
    if sig_type in ED25519_TYPES:
        extra = 5 if sig_type.startswith("sk-") else 0  # flags byte + counter of a security key
        if len(raw) != 64 or len(signature) != at + extra:
            return f"{sig_type} signature of the wrong length"
        if int.from_bytes(raw[32:], "little") >= ED25519_L:
            return "Ed25519 scalar S is not reduced (S >= L): a second form of a signature"
        return None
    if sig_type in RSA_SIG_TYPES:
        if len(signature) != at:
            return "trailing bytes after the RSA signature"
        if len(raw) != _rsa_modulus_bytes(public_key):
            return "RSA signature not exactly as long as the key's modulus"
        return None
    return (f"signature type {sig_type} is not accepted (ECDSA and other malleable types are refused; "
            "sign with an Ed25519 key)")


def signature_form_problem(data: bytes) -> str | None:
    """None when data is a signature file in the one canonical form; else what is wrong, in one line."""
    lines = data.split(b"\n")
    if len(lines) < 4 or lines[0] != BEGIN or lines[-2] != END or lines[-1] != b"":
        return "not an armored SSH signature as ssh-keygen writes it (header, footer, final newline)"
    try:
        blob = base64.b64decode(b"".join(lines[1:-2]), validate=True)
    except (binascii.Error, ValueError):
        return "the armored signature is not valid base64"
    if armor(blob) != data:
        return "the signature file is not laid out as ssh-keygen writes it (line width, padding, spacing)"
    if not blob.startswith(MAGIC) or len(blob) < len(MAGIC) + 4:
        return "not an SSHSIG blob"
    (version,) = struct.unpack(">I", blob[len(MAGIC):len(MAGIC) + 4])
    if version != VERSION:
        return f"SSHSIG version {version} is not {VERSION}"
    try:
        (public_key, _namespace, _reserved, _hash, signature), end = _strings(blob[len(MAGIC) + 4:], 5)
        if len(MAGIC) + 4 + end != len(blob):
            return "trailing bytes after the SSHSIG blob"
        return _signature_problem(public_key, signature)
    except _Malformed as exc:
        return f"malformed SSHSIG blob: {exc}"
