"""Collecting what the provenance statement records, writing provenance.json and signing it.

`collect_run_facts` runs when `evidence` starts (the tree that is built, the command, the GPUs,
the CI run); `write_provenance` runs after index.json is written, inside the `.incomplete-`
folder, and only ever adds provenance.json and provenance.json.sig: nothing already written
is changed or removed, whatever fails.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from ..binary import sha256_file
from ..jsonio import read_json
from ..packfs import write_bytes
from ..records.env import EnvJson
from ..records.pack import PackJson
from ..records.provenance import PackFacts
from .signing import SigningError, SigningKey, sign
from .statement import (
    BINARY_RECORDS,
    INDEX_SUBJECT,
    PREDICATE_TYPE,
    PROVENANCE_FILE,
    SIGNATURE_FILE,
    RunFacts,
    Subject,
    build_statement,
    ci_identity,
    expected_subjects,
    pack_facts,
    parse_gpu_query,
    tree_line,
)

TREE_ALGORITHM = "sha256 of `git ls-files -z | xargs -0 sha256sum` (tracked files as in the working tree)"


class SigningFailed(Exception):
    """Signing at the end of a run failed; the pack was kept, unsigned (exit 1, not a usage error)."""

    def __init__(self, message: str, pack: Path):
        super().__init__(message)
        self.pack = pack


def tree_digest(repo: Path) -> dict:
    """The content hash of the tracked files as they are in the working tree (edits included)."""
    out = {"algorithm": TREE_ALGORITHM, "sha256": None, "files": 0, "missing": [], "error": None}
    try:
        proc = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return dict(out, error=f"git ls-files failed: {exc}")
    if proc.returncode != 0:
        return dict(out, error=f"git ls-files failed: {proc.stderr.decode('utf-8', 'replace').strip()[:200]}")
    h = hashlib.sha256()
    files, missing = 0, []
    for raw in proc.stdout.split(b"\0"):
        if not raw:
            continue
        rel = raw.decode("utf-8", "surrogateescape")
        path = repo / rel
        if not path.is_file():  # deleted in the working tree, or a submodule
            missing.append(rel)
            continue
        h.update(tree_line(sha256_file(path), rel).encode("utf-8", "surrogateescape"))
        files += 1
    return dict(out, sha256=h.hexdigest(), files=files, missing=missing)


def gpu_devices() -> dict:
    """Name, UUID and driver of every GPU nvidia-smi lists, and which ones the run could see."""
    out = {"source": "nvidia-smi", "devices": [], "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
           "error": None}
    try:
        proc = subprocess.run(["nvidia-smi", "--query-gpu=index,name,uuid,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        return dict(out, error="nvidia-smi not found on PATH")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return dict(out, error=f"nvidia-smi failed: {exc}")
    if proc.returncode != 0:
        return dict(out, error=f"nvidia-smi exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:200]}")
    return dict(out, devices=parse_gpu_query(proc.stdout))


def collect_run_facts(repo: Path) -> RunFacts:
    return RunFacts(command=tuple(getattr(sys, "orig_argv", sys.argv)), tree=tree_digest(repo),
                    gpu_devices=gpu_devices(), ci=ci_identity(dict(os.environ)))


def _json_or_none(path: Path):
    try:
        return read_json(path)
    except (OSError, ValueError):
        return None


def read_facts(pack_dir: Path) -> PackFacts:
    """pack_facts() from the pack's files (pack.json, env.json, bench/clocks.json)."""
    pj = PackJson.from_json(_json_or_none(pack_dir / "pack.json"))
    env = EnvJson.from_json(_json_or_none(pack_dir / "env.json"))
    return pack_facts(pack_id=str(pj.pack_id), pack_json=pj, env_json=env,
                      clocks_json=_json_or_none(pack_dir / "bench" / "clocks.json"))


def read_pack_facts(pack_dir: Path) -> dict:
    """read_facts() as the predicate's JSON fields (what verify compares with the statement's)."""
    return read_facts(pack_dir).as_dict()


def pack_subjects(pack_dir: Path, predicate_type: str = PREDICATE_TYPE) -> list[Subject]:
    """The exact subjects of the pack under the statement type's rule: index.json, then the shared
    objects of the build records in BINARY_RECORDS that the pack holds. ValueError for a record that
    cannot be read or names another module."""
    records = []
    for module, name in BINARY_RECORDS:
        rec_file = pack_dir / "build" / name
        if not rec_file.exists():
            continue
        rec = _json_or_none(rec_file)
        if not isinstance(rec, dict):
            raise ValueError(f"build/{name} is not a readable JSON object")
        records.append((module, rec))
    return expected_subjects(predicate_type, sha256_file(pack_dir / INDEX_SUBJECT), records)


def write_provenance(pack_dir: Path, run: RunFacts, signer: SigningKey | None) -> str | None:
    """Write provenance.json (and its signature with a key). The error in one line, or None."""
    if (pack_dir / PROVENANCE_FILE).exists() or (pack_dir / SIGNATURE_FILE).exists():
        return f"{pack_dir} already holds {PROVENANCE_FILE}: not overwritten"
    try:
        statement = build_statement(subjects=pack_subjects(pack_dir), facts=read_facts(pack_dir), run=run)
        data = (json.dumps(statement, indent=2, ensure_ascii=True) + "\n").encode("ascii")
        write_bytes(pack_dir / PROVENANCE_FILE, data)
    except (OSError, ValueError) as exc:
        return f"provenance.json could not be written: {exc}"
    if signer is None:
        return None
    try:
        write_bytes(pack_dir / SIGNATURE_FILE, sign(signer.path, data))
    except (SigningError, OSError) as exc:
        return f"signing failed: {exc}"
    return None


def check_signable(pack_dir: Path) -> None:
    """SigningError (exit 2) unless the pack holds provenance.json and no signature yet."""
    if (pack_dir / SIGNATURE_FILE).exists():
        raise SigningError(f"{pack_dir.name} already holds {SIGNATURE_FILE}: a signature is never replaced")
    if not (pack_dir / PROVENANCE_FILE).is_file():
        raise SigningError(f"{pack_dir.name} has no {PROVENANCE_FILE} (made before provenance statements): "
                           "it cannot be signed")


def sign_finished(pack_dir: Path, signer: SigningKey) -> None:
    """Add provenance.json.sig to a finished pack that holds provenance.json and no signature (the
    caller has verified the pack). Only the signature file is added, atomically; nothing else is
    touched. SigningError (exit 2) when the pack cannot take one."""
    check_signable(pack_dir)
    prov, sig = pack_dir / PROVENANCE_FILE, pack_dir / SIGNATURE_FILE
    try:
        write_bytes(sig, sign(signer.path, prov.read_bytes()))
    except OSError as exc:
        raise SigningError(f"cannot write {sig}: {exc.strerror or exc}") from None
