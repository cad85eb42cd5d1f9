"""verify compares decisions and data, never prose; and it closes the gaps a forger would use."""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest
import reference
from conftest import copy_pack, fake_pack, verify_fake

from evpack import model
from evpack.jsonio import read_json
from evpack.pack import PackError, write_index
from evpack.stages.order import stage_module
from evpack.verify import verify_pack

REFERENCE = list(reference.PACKS)
FULL = reference.FULL  # the newest signed full-suite pack: every stage ran


@pytest.fixture(scope="module")
def ref_copy(tmp_path_factory) -> Path:
    reference.skip_unless(FULL, "FULL")
    return copy_pack(FULL, tmp_path_factory.mktemp("ref"))


def _rehash(pack: Path) -> None:
    """What a forger does after editing a pack: re-hash every file into index.json."""
    write_index(pack)


def test_reworded_reasons_still_verify_every_reference_pack(monkeypatch):
    """A newcomer improves every stage's message: the packs made by older code still verify."""
    from evpack import derivation

    real = derivation._final_outcome

    def reworded(name, pack_dir, mod):
        out = real(name, pack_dir, mod)
        return model.StageOutcome(out.status, "reworded: " + out.reason[::-1], out.data)

    monkeypatch.setattr(derivation, "_final_outcome", reworded)
    for pack in REFERENCE:
        assert verify_pack(pack) == [], pack.name


def test_a_changed_number_in_outcome_json_is_a_mismatch(ref_copy, tmp_path):
    pack = copy_pack(ref_copy, tmp_path)
    path = pack / "correctness" / "outcome.json"
    out = read_json(path)
    out["data"]["variants"]["mma"]["cases"] += 1
    path.write_text(json.dumps(out))
    _rehash(pack)
    problems = verify_pack(pack)
    assert any("stage correctness: outcome.json data differs" in p and "variants.mma.cases" in p for p in problems)


def test_a_dropped_gate_is_a_mismatch(tmp_path, fake_env):
    fake_env({"sanitize": "fail"})
    pack = fake_pack(tmp_path / "p")
    pj = read_json(pack / "pack.json")
    del pj["gates"]["sanitizer_clean"]
    pj["label"], pj["labels"] = "evidence:complete", ["evidence:complete"]
    (pack / "pack.json").write_text(json.dumps(pj))
    _rehash(pack)
    problems = verify_fake(pack)
    assert any("lacks gates" in p and "sanitizer_clean" in p for p in problems)
    assert any(p.startswith("label:") for p in problems)


def test_dropping_a_canary_from_expected_json_leaves_its_gate_unproven(ref_copy, tmp_path):
    pack = copy_pack(ref_copy, tmp_path)
    path = pack / "canaries" / "expected.json"
    path.write_text(json.dumps([c for c in read_json(path) if c["caught_by"] != "memcheck"]))
    _rehash(pack)
    problems = verify_pack(pack)
    assert any("stage canaries" in p and "error" in p for p in problems), problems
    from evpack.derivation import final_outcome

    out = final_outcome("canaries", pack)
    assert out.status == "error" and "canary_oob_write" in out.reason
    assert any(p.startswith("label:") for p in problems)


@pytest.mark.parametrize("rel", ["bench/bench.log", "sanitize/memcheck.mma.m64n64w4s2.log", "report.md",
                                 "correctness/stage.log", "build/build.log"])
def test_raw_files_and_reports_cannot_be_deleted(ref_copy, tmp_path, rel):
    pack = copy_pack(ref_copy, tmp_path)
    (pack / rel).unlink()
    _rehash(pack)
    problems = verify_pack(pack)
    stage = rel.split("/")[0]
    # named as a missing file, or (for a file the derivation reads) as the stage it breaks
    assert any(rel in p for p in problems) or any(p.startswith(f"stage {stage}:") for p in problems), problems


def test_symlinks_are_refused_by_the_writer_and_by_verify(tmp_path, fake_env):
    fake_env({})
    pack = fake_pack(tmp_path / "p")
    outside = tmp_path / "outside.log"
    outside.write_text("raw output that can change later\n")
    (pack / "bench" / "tool.log").unlink()
    os.symlink(outside, pack / "bench" / "tool.log")
    with pytest.raises(PackError, match="regular files only"):
        write_index(pack)
    problems = verify_fake(pack)
    assert any("symlink in pack: bench/tool.log" in p for p in problems)


def test_unknown_schema_is_named(tmp_path, fake_env):
    fake_env({})
    pack = fake_pack(tmp_path / "p")
    pj = read_json(pack / "pack.json")
    pj["schema_version"] = 99
    (pack / "pack.json").write_text(json.dumps(pj))
    _rehash(pack)
    assert any("schema_version 99 is unknown" in p for p in verify_fake(pack))


def test_an_incomplete_folder_is_not_a_pack(tmp_path, fake_env):
    fake_env({})
    pack = fake_pack(tmp_path / "p")
    inc = pack.with_name(".incomplete-" + pack.name)
    shutil.copytree(pack, inc)
    with pytest.raises(PackError, match="interrupted"):
        verify_fake(inc)


@reference.needs("FULL")
def test_every_stage_declares_files_that_the_reference_pack_holds():
    for name in ("build", "sass", "tensor_proof", "sanitize", "correctness", "stability", "canaries", "bench"):
        patterns = stage_module(name).REQUIRED_FILES
        assert patterns, name
        for pattern in patterns:
            assert list((FULL / name).glob(pattern)), (name, pattern)


def _corrupt(path: Path, rng: random.Random) -> str:
    data = bytearray(path.read_bytes())
    how = rng.choice(["flip", "truncate", "junk", "empty", "non-utf8"])
    if how == "flip" and data:
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif how == "truncate" and data:
        data = data[: rng.randrange(len(data))]
    elif how == "junk":
        data[rng.randrange(len(data) + 1):] = bytes(rng.randrange(256) for _ in range(16))
    elif how == "empty":
        data = bytearray()
    else:
        data[rng.randrange(len(data) + 1):] = b"\xff\xfe\x80"
    path.write_bytes(bytes(data))
    return how


def _fuzz_once(pack: Path, rng: random.Random, files: list[str], verify) -> None:
    """Corrupt one file. Left as is, verify must name a mismatch (or refuse the folder cleanly). After a
    forger's re-hash, a raw file no derivation reads can pass (only a signature protects it), so there
    verify must merely never crash: any exception but a clean PackError fails the test."""
    rel = rng.choice(files)
    how = _corrupt(pack / rel, rng)
    rehash = rng.random() < 0.5
    if rehash:
        _rehash(pack)
    try:
        problems = verify(pack)
    except PackError:
        return  # a clean, named refusal
    if not rehash:
        assert problems, f"corrupting {rel} ({how}) still verified"


def test_fuzz_verify_never_crashes_and_never_says_verified_on_a_fake_pack(tmp_path, fake_env):
    fake_env({})
    good = fake_pack(tmp_path / "p")
    rng = random.Random(20261122)
    files = sorted(p.relative_to(good).as_posix() for p in good.rglob("*") if p.is_file()
                   and p.name != "index.json")
    for i in range(25):
        pack = copy_pack(good, tmp_path / f"f{i}")
        _fuzz_once(pack, rng, files, verify_fake)


def test_fuzz_verify_on_copies_of_the_reference_pack(ref_copy, tmp_path):
    rng = random.Random(7)
    files = sorted(p.relative_to(ref_copy).as_posix() for p in ref_copy.rglob("*.json")
                   if p.name != "index.json" and p.stat().st_size < 200_000)
    for i in range(6):
        pack = copy_pack(ref_copy, tmp_path / f"r{i}")
        _fuzz_once(pack, rng, files, verify_pack)
