"""The build stage keeps each Triton kernel's files (cubin, PTX, metadata, ptxas report) inside xz, the manifest
keeping the sha256 of the raw bytes: `check` inflates and re-hashes, reads older packs' plain files the same
way, and names a tampered, corrupt, truncated or doubly stored file in one clause. Files here are made up
bytes (no Triton needed); tests/test_triton.py runs the same checks on a real AOT build."""
from __future__ import annotations

import hashlib
import json
import lzma
from pathlib import Path

import pytest

from evpack.packfs import read_stored, write_stored
from evpack.stages import build_triton

KINDS = {"cubin": b"\x7fELF" + bytes(range(256)) * 40, "ptx": b".version 8.7\n.entry k(\n)\n" * 300,
         "json": b'{"shared": 1024}\n', "ptxas.log": b"# ptxas -v\nptxas info : Used 128 registers\n"}


def _build(tmp: Path) -> tuple[Path, Path, dict]:
    """A repo with one kept kernel and a shared object embedding its cubin; the pack's build folder after keep."""
    src = tmp / "repo" / "build" / "triton" / "_C"
    files = {}
    for kind, data in KINDS.items():
        rel = f"triton/m64_fp16_d64_sm_90a.{kind}"
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
        files[kind] = {"path": rel, "sha256": hashlib.sha256(data).hexdigest()}
    manifest = {"schema_version": 1, "triton_version": "3.7.1", "triton_required": "3.7.1",
                "kernels": [{"symbol": "k", "arch": "sm_90a", "files": files}]}
    (src / "manifest.json").write_text(json.dumps(manifest))
    so = tmp / "ext.so"
    so.write_bytes(b"head" + KINDS["cubin"] + b"tail")
    dest = tmp / "pack" / "build"
    (dest / "ptxas").mkdir(parents=True)
    build_triton.keep(tmp / "repo", dest, {"_C": so})
    return dest, so, manifest


def _so_sha(so: Path) -> dict:
    return {"_C": hashlib.sha256(so.read_bytes()).hexdigest()}


def test_kept_files_are_stored_in_xz_and_inflate_to_the_raw_bytes(tmp_path):
    dest, so, manifest = _build(tmp_path)
    base = dest / "triton" / "_C"
    for kind, f in manifest["kernels"][0]["files"].items():
        assert not (base / f["path"]).exists()
        assert read_stored(base / f"{f['path']}.xz") == KINDS[kind]
    assert json.loads((dest / "triton.json").read_text())["_C"]["cubins_embedded"] == 1
    problems, data = build_triton.check(dest, _so_sha(so))
    assert problems == []
    assert data["_C"]["cubins"] == {"k@sm_90a": manifest["kernels"][0]["files"]["cubin"]["sha256"]}


def test_older_packs_plain_files_keep_checking(tmp_path):
    dest, so, manifest = _build(tmp_path)
    base = dest / "triton" / "_C"
    for f in manifest["kernels"][0]["files"].values():  # the form packs made before hold
        (base / f["path"]).write_bytes(read_stored(base / f"{f['path']}.xz"))
        (base / f"{f['path']}.xz").unlink()
    assert build_triton.check(dest, _so_sha(so))[0] == []


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-9])


def _recompress_other(path: Path) -> None:  # a valid xz stream of other bytes: only the re-hash catches it
    path.write_bytes(lzma.compress(b"\x7fELF another kernel"))


def _pad(path: Path) -> None:
    path.write_bytes(path.read_bytes() + b"\0junk")


def _second_form(path: Path) -> None:  # the plain file beside the xz one: two readers could see two contents
    path.with_suffix("").write_bytes(b"\x7fELF another kernel")


def _remove(path: Path) -> None:
    path.unlink()


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("damage", [_corrupt, _truncate, _recompress_other, _pad, _second_form, _remove])
def test_a_damaged_kept_file_is_one_problem_naming_it(tmp_path, kind, damage):
    dest, so, manifest = _build(tmp_path)
    rel = manifest["kernels"][0]["files"][kind]["path"]
    damage(dest / "triton" / "_C" / f"{rel}.xz")
    problems = build_triton.check(dest, _so_sha(so))[0]
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"triton _C: {rel}") and "\n" not in problems[0]


@pytest.mark.parametrize("rel", ["../x.cubin", "triton/..", "triton/.", "a/b/c.cubin", 7, None])
def test_a_manifest_path_outside_the_folder_is_refused(tmp_path, rel):
    dest, so, manifest = _build(tmp_path)
    manifest["kernels"][0]["files"]["ptx"]["path"] = rel
    m = dest / "triton" / "_C" / "manifest.json"
    m.write_text(json.dumps(manifest))
    rec = json.loads((dest / "triton.json").read_text())
    rec["_C"]["manifest_sha256"] = hashlib.sha256(m.read_bytes()).hexdigest()
    (dest / "triton.json").write_text(json.dumps(rec))
    problems = build_triton.check(dest, _so_sha(so))[0]
    assert problems == [f"triton _C: {rel} is missing"]


def test_write_stored_of_a_kept_file_is_deterministic(tmp_path):
    write_stored(tmp_path / "a.cubin.xz", KINDS["cubin"])
    dest, _, manifest = _build(tmp_path)
    rel = manifest["kernels"][0]["files"]["cubin"]["path"]
    assert (dest / "triton" / "_C" / f"{rel}.xz").read_bytes() == (tmp_path / "a.cubin.xz").read_bytes()
