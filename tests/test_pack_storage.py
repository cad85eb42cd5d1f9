"""Storage forms of pack files (packfs): plain, inside gzip (older packs) and inside xz (packs within the 8 MB
limit). Each form round-trips; a corrupted, truncated, padded, greedy or bomb-sized stream is one clear error;
a pack rewritten into the xz forms verifies, and a corrupted compressed member of it fails verify with a
line naming the stage."""
from __future__ import annotations

import gzip
import json
import lzma

import pytest
import reference
from conftest import copy_pack
from pack_storage_helpers import restore, total_bytes

from evpack import packfs
from evpack.jsonio import JsonFileError, json_text, read_member_json, write_member_json
from evpack.packfs import CompressedFileError, member, read_member, read_stored, read_xz, write_stored
from evpack.timing import summary as sm
from evpack.verify import verify_pack

# a pack made before the current storage forms (its samples .csv.gz, its SASS dumps .gz; the compatibility pack):
# rewritten by the tests; and a pack in today's forms with a same-run A/B (ab.json.xz, ab_samples.csv.xz): corrupted
OLDER_FORMS = reference.COMPAT
CURRENT_FORMS = reference.FULL
RATIO_BELOW = 0.6  # the rewritten compatibility pack 20261121T142707Z is 0.50 of its bytes (measured)
DATA = b"".join(f"/*{i:04x}*/ HMMA.16816.F32 R{i % 200}, R4, R8, R{i % 17} ;\n".encode() for i in range(20000))


@pytest.mark.parametrize("suffix", ["", ".xz", ".gz"])
def test_each_storage_form_round_trips(tmp_path, suffix):
    path = tmp_path / f"dump.sass{suffix}"
    write_stored(path, DATA)
    assert read_stored(path) == DATA
    assert member(tmp_path, "dump.sass") == path and read_member(tmp_path, "dump.sass") == DATA
    if suffix:
        assert path.stat().st_size < len(DATA) // 5  # stored compressed, not merely renamed
        write_stored(tmp_path / f"again{suffix}", DATA)
        assert (tmp_path / f"again{suffix}").read_bytes() == path.read_bytes()  # same bytes, same file


def test_xz_reads_what_the_xz_tool_and_lzma_module_write(tmp_path):
    """Any single-stream xz file is read, not only our writer's (preset 9, another check type)."""
    f = tmp_path / "x.xz"
    f.write_bytes(lzma.compress(DATA, format=lzma.FORMAT_XZ, check=lzma.CHECK_SHA256, preset=9))
    assert read_stored(f) == DATA


def test_json_member_round_trips_and_large_json_is_unindented(tmp_path):
    small = {"a": [1, 2], "b": "x"}
    assert json_text(small) == json.dumps(small, indent=2) + "\n"  # people's files keep their indentation
    big = {"rows": [{"key": f"k{i}", "value": i / 7} for i in range(4000)]}
    assert "\n " not in json_text(big) and json.loads(json_text(big)) == big
    write_member_json(tmp_path / "summary.json.xz", big)
    assert read_member_json(tmp_path, "summary.json") == big == sm.read_summary(tmp_path)


def test_a_member_stored_twice_is_refused(tmp_path):
    """summary.json beside summary.json.xz: verify and a report could read different bytes."""
    write_stored(tmp_path / "summary.json", b"{}")
    write_stored(tmp_path / "summary.json.xz", b'{"rows": []}')
    with pytest.raises(ValueError, match="stored twice"):
        member(tmp_path, "summary.json")
    with pytest.raises(JsonFileError, match="stored twice"):
        read_member_json(tmp_path, "summary.json")


def _one_line(exc: BaseException) -> str:
    msg = str(exc)
    assert msg and "\n" not in msg
    return msg


@pytest.mark.parametrize("damage", ["flip", "truncate", "trailing", "second_stream", "not_xz", "empty"])
def test_a_broken_xz_stream_is_one_clear_error(tmp_path, damage):
    good = lzma.compress(DATA, format=lzma.FORMAT_XZ, preset=6)
    bad = {"flip": good[:200] + bytes([good[200] ^ 0x40]) + good[201:], "truncate": good[:-40],
           "trailing": good + b"junk", "second_stream": good + lzma.compress(b"more", format=lzma.FORMAT_XZ),
           "not_xz": gzip.compress(DATA), "empty": b""}[damage]
    f = tmp_path / "evpack._C.sass.xz"
    f.write_bytes(bad)
    with pytest.raises(CompressedFileError) as exc:
        read_stored(f)
    assert "evpack._C.sass.xz" in _one_line(exc.value)


def test_xz_bombs_are_capped_like_gzip(tmp_path):
    """1 GiB of zeros in ~150 KB: refused at the limit, never inflated (nothing past limit + 1 bytes held)."""
    f = tmp_path / "bomb.xz"
    comp = lzma.LZMACompressor(format=lzma.FORMAT_XZ, preset=1)
    block = b"\0" * (1 << 20)
    f.write_bytes(b"".join(comp.compress(block) for _ in range(1024)) + comp.flush())
    assert f.stat().st_size < 1 << 20
    with pytest.raises(ValueError, match="decompression bomb"):
        read_xz(f, limit=8 << 20)
    with pytest.raises(CompressedFileError, match="decompression bomb"):
        read_stored(f, limit=8 << 20)
    assert len(read_xz(f, limit=1 << 30)) == 1 << 30  # the same stream under a limit it fits


def test_xz_decoder_memory_is_capped(tmp_path, monkeypatch):
    """A header naming a dictionary larger than XZ_MEMLIMIT is refused before the decoder allocates it."""
    f = tmp_path / "greedy.xz"
    f.write_bytes(lzma.compress(b"x", format=lzma.FORMAT_XZ, preset=6))  # asks for an 8 MiB dictionary
    monkeypatch.setattr(packfs, "XZ_MEMLIMIT", 1 << 20)
    with pytest.raises(CompressedFileError, match="greedy.xz"):
        read_stored(f)


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    """A committed reference pack rewritten into the current storage forms (unsigned: a signature binds the
    old bytes), re-derived and re-indexed."""
    pack = copy_pack(reference.skip_unless(OLDER_FORMS, "COMPAT"), tmp_path_factory.mktemp("rewritten"))
    before = total_bytes(pack)
    restore(pack)
    return pack, before


def test_a_pack_in_the_xz_forms_verifies_and_is_smaller(rewritten):
    """Every file the older pack holds in an older form (inside gzip, a large plain summary) is in the xz form
    after the rewrite, none in the older one, and the rewritten pack verifies."""
    pack, before = rewritten
    older = sorted(p.relative_to(OLDER_FORMS) for p in OLDER_FORMS.rglob("*.gz"))
    assert older  # the fixture is a pack in an older form (its samples .csv.gz)
    for rel in older:
        assert (pack / rel).with_suffix(".xz").is_file() and not (pack / rel).exists()
    assert not list(pack.rglob("*.gz"))
    if (OLDER_FORMS / "bench" / "summary.json").is_file():
        assert (pack / "bench" / "summary.json.xz").is_file() and not (pack / "bench" / "summary.json").exists()
    assert not list((pack / "build" / "triton").rglob("*.cubin"))
    assert verify_pack(pack) == []
    assert total_bytes(pack) < before * RATIO_BELOW, total_bytes(pack) / before


@reference.needs("FULL")
@pytest.mark.parametrize("target", ["sass/evpack._C.sass.xz", "bench/summary.json.xz", "sass/histogram.csv.xz",
                                    "bench/samples.csv.xz", "bench/ab_samples.csv.xz", "bench/ab.json.xz"])
def test_a_corrupted_compressed_member_fails_verify(tmp_path, target):
    pack = copy_pack(CURRENT_FORMS, tmp_path)
    f = pack / target
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))
    problems = verify_pack(pack)
    assert problems and all("\n" not in p for p in problems)
    assert any(f"hash mismatch: {target}" == p for p in problems)
    stage = target.split("/")[0]
    if stage != "sass" or target.endswith(".sass.xz"):  # histogram.csv is for people: only its hash covers it
        assert any(p.startswith(f"stage {stage}:") for p in problems), problems


def _reindex_as_a_forger(pack) -> None:
    """index.json written anew over the files now present, the statement and signature dropped."""
    from evpack.pack import write_index

    (pack / "index.json").unlink()
    for f in ("provenance.json", "provenance.json.sig"):
        (pack / f).unlink(missing_ok=True)
    write_index(pack)


def test_a_member_stored_twice_fails_verify(rewritten, tmp_path):
    """An index that lists both forms (re-indexed by the attacker) still fails: the stage cannot read it."""
    pack = copy_pack(rewritten[0], tmp_path)
    (pack / "bench" / "summary.json").write_bytes(read_stored(pack / "bench" / "summary.json.xz"))
    _reindex_as_a_forger(pack)
    problems = verify_pack(pack)
    assert "stage bench: pack.json says pass but its files give error" in problems, problems
    from evpack.stages import bench

    assert "stored twice" in bench.derive(pack / "bench", pack).reason


@reference.needs("FULL")
@pytest.mark.parametrize("name", ["samples.csv", "ab_samples.csv", "ab.json"])
def test_a_bench_member_in_both_forms_fails_verify(tmp_path, name):
    """The older form put back beside the new one (and re-indexed): the bench stage refuses the folder."""
    pack = copy_pack(CURRENT_FORMS, tmp_path)
    d = pack / "bench"
    old = d / (name if name.endswith(".json") else f"{name}.gz")
    write_stored(old, read_stored(d / f"{name}.xz"))
    _reindex_as_a_forger(pack)
    problems = verify_pack(pack)
    assert "stage bench: pack.json says pass but its files give error" in problems, problems


def test_samples_round_trip_in_every_form(tmp_path):
    """The one samples reader takes what the writer writes (.xz) and the older packs' .gz, value for value."""
    rows = [{"key": "evpack|mma|m64|B=1,H=2,S=128,D=64,dtype=fp16,causal=0|cold", "impl": "evpack", "variant": "mma",
             "config": "m64", "shape": "B=1,H=2,S=128,D=64,dtype=fp16,causal=0", "mode": "cold"}]
    samples = {rows[0]["key"]: [12.5, 0.1 + 0.2, 1e-7, 123456.789]}
    for suffix in (".xz", ".gz"):
        d = tmp_path / suffix[1:]
        sm.write_samples(d / f"{sm.SAMPLES}{suffix}", rows, samples)
        assert sm.samples_file(d) == d / f"{sm.SAMPLES}{suffix}" and sm.has_samples(d)
        assert sm.read_samples(sm.samples_file(d)) == samples
    assert sm.SAMPLES_FILE == "samples.csv.xz"
    assert read_stored(tmp_path / "xz" / "samples.csv.xz") == read_stored(tmp_path / "gz" / "samples.csv.gz")
