"""packfs.StoredStream: a file written from pieces (a tool's output while it runs) is the file write_stored
writes from the whole, byte for byte, in every stored form; abort() writes nothing; a failure is raised at close."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evpack.packfs import StoredStream, read_stored, write_stored

DATA = b"".join(f"/*{i:04x}*/ HGMMA.64x128x16.F32 R{i % 200}, gdesc[UR4], R{i % 17} ;\n".encode()
                for i in range(30000))


@pytest.mark.parametrize("suffix", ["", ".xz", ".gz"])
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(DATA)), max_size=12))
@settings(max_examples=15, deadline=None)
def test_pieces_give_the_file_the_whole_gives(tmp_path_factory, suffix, cuts):
    folder = tmp_path_factory.mktemp("s")
    bounds = [0, *sorted(cuts), len(DATA)]
    stream = StoredStream(folder / f"dump{suffix}")
    for a, b in zip(bounds, bounds[1:], strict=False):
        stream.feed(DATA[a:b])
    stream.close()
    write_stored(folder / f"whole{suffix}", DATA)
    assert (folder / f"dump{suffix}").read_bytes() == (folder / f"whole{suffix}").read_bytes()
    assert read_stored(folder / f"dump{suffix}") == DATA


def test_abort_writes_nothing(tmp_path):
    stream = StoredStream(tmp_path / "dump.xz")
    stream.feed(DATA)
    stream.abort()
    assert list(tmp_path.iterdir()) == []


def test_a_compressor_failure_is_raised_at_close_and_writes_nothing(tmp_path):
    stream = StoredStream(tmp_path / "dump.xz")

    class Broken:
        def compress(self, chunk):
            raise MemoryError("no memory for the dictionary")

        def flush(self):
            return b""

    stream._xz = Broken()
    stream.feed(DATA)
    with pytest.raises(MemoryError):
        stream.close()
    assert list(tmp_path.iterdir()) == []
