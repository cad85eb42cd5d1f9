"""What a reader of a pack may open: the limits that keep `verify` bounded on a hostile pack.

A pack is data from anywhere; `verify`, `label`, `report`, `merge` read it before anyone trusts it.
- A name read from a record (a cell of procs.json, a dump named by sass/run.json) becomes a file
  name inside the folder that holds the record, never a path: `plain_name` refuses separators,
  `.`/`..`, NUL and the empty name, so no record can send a reader outside the pack.
- No file of a pack is larger than MAX_FILE_BYTES (the largest today: 2.8 MB); a larger one (or a
  sparse file claiming terabytes) is refused before it is hashed or read.
- A compressed file (sass/*.sass.gz|xz, bench/*samples.csv.gz|xz, any member stored as <name>.xz) is
  inflated to at most MAX_INFLATED_BYTES (the largest today: 53 MB): a decompression bomb is an error, not
  a full memory; an xz stream's decoder may use at most XZ_MEMLIMIT bytes (its header names the dictionary
  size: a few bytes may ask for 1.5 GiB).
- Storage forms (a per-file suffix, so older packs keep verifying): a member `name` of a folder is the file
  `name`, or its bytes inside an xz stream (`name.xz`, packs written since the pack-size limit) or a gzip
  stream (`name.gz`). `member` finds the one form present; two forms of one member are refused (a reader
  and verify could otherwise read different bytes).
- Every file the package writes is written atomically (atomic_file): a new hidden file beside it, never a
  name someone planted (O_EXCL|O_NOFOLLOW), renamed over the target; removed again on any failure.

Standard library only (verify imports it).
"""
from __future__ import annotations

import contextlib
import gzip
import lzma
import os
import queue
import secrets
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MAX_FILE_BYTES = 256 << 20
MAX_INFLATED_BYTES = 512 << 20
XZ_MEMLIMIT = 128 << 20  # xz -9 needs 65 MiB to decode; our writer's preset 6 needs 9 MiB
XZ_PRESET = 6  # measured on a quick pack's 34 MB SASS dump: 0.65 MB in 6.6 s (-9e: 0.54 MB in 22 s; gzip -6: 2.8 MB)
COMPRESSED_SUFFIXES = (".xz", ".gz")  # the stored forms a reader recognises beside the plain file
_CHUNK = 1 << 20


class CompressedFileError(ValueError):
    """A compressed pack file that cannot be inflated (corrupt, truncated, trailing bytes, a bomb): one line
    naming the file."""


def plain_name(name: object) -> bool:
    """A file name inside one folder: no path separator, not '.' or '..', no NUL, not empty."""
    return (isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\\" not in name
            and "\0" not in name)


def read_gzip(path: Path, limit: int = MAX_INFLATED_BYTES) -> bytes:
    """The inflated content of a gzip file. ValueError when it inflates beyond `limit` bytes (nothing
    beyond limit + 1 bytes is ever held); OSError, EOFError or zlib.error for a broken stream."""
    with gzip.open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{Path(path).name} inflates to more than {limit >> 20} MiB: refused as a "
                         "decompression bomb (a pack's compressed files are far smaller)")
    return data


def read_xz(path: Path, limit: int = MAX_INFLATED_BYTES) -> bytes:
    """The content of a single-stream xz file, inflated to at most `limit` bytes with a decoder held to
    XZ_MEMLIMIT. ValueError for a bomb; lzma.LZMAError for a corrupt stream or a greedy header; EOFError for a
    truncated one; ValueError for bytes after the stream (our writer writes one stream)."""
    dec = lzma.LZMADecompressor(format=lzma.FORMAT_XZ, memlimit=XZ_MEMLIMIT)
    out = bytearray()
    with open(path, "rb") as f:
        while not dec.eof:
            if dec.needs_input:
                chunk = f.read(_CHUNK)
                if not chunk:
                    raise EOFError("the xz stream ends before its end marker (truncated)")
            else:
                chunk = b""
            # at most 1 MiB a call: a bomb never holds a second copy of what it inflated so far
            out += dec.decompress(chunk, max_length=min(1 << 20, limit + 1 - len(out)))
            if len(out) > limit:
                raise ValueError(f"{Path(path).name} inflates to more than {limit >> 20} MiB: refused as a "
                                 "decompression bomb (a pack's compressed files are far smaller)")
        if dec.unused_data or f.read(1):
            raise ValueError("bytes after the end of the xz stream")
    return bytes(out)


def read_stored(path: Path, limit: int = MAX_INFLATED_BYTES) -> bytes:
    """A pack file's content by its suffix: inflated (up to `limit`) for .xz and .gz, else as stored.
    CompressedFileError (a ValueError) naming the file when it cannot be inflated; OSError as raised."""
    path = Path(path)
    if path.suffix not in COMPRESSED_SUFFIXES:
        return path.read_bytes()
    try:
        return read_xz(path, limit) if path.suffix == ".xz" else read_gzip(path, limit)
    except (lzma.LZMAError, EOFError, zlib.error, gzip.BadGzipFile, ValueError) as exc:
        raise CompressedFileError(f"{path.name}: cannot be inflated ({type(exc).__name__}: {exc})") from None


def _xz_compressor() -> lzma.LZMACompressor:
    """The one xz encoder of stored files (compress, StoredStream): the same bytes give the same stream."""
    return lzma.LZMACompressor(format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=XZ_PRESET)


def compress(data: bytes, suffix: str) -> bytes:
    """`data` in the stored form of `suffix` ('' plain, '.xz', '.gz'): the same bytes give the same file."""
    if suffix == ".xz":
        xz = _xz_compressor()
        return xz.compress(data) + xz.flush()
    if suffix == ".gz":
        return gzip.compress(data, compresslevel=6, mtime=0)
    if suffix:
        raise ValueError(f"unknown storage suffix {suffix!r}")
    return data


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[Any]:
    """A binary file whose content becomes `path` when the block ends without an exception.

    The bytes go to a new hidden file beside `path`, created with O_CREAT|O_EXCL|O_NOFOLLOW under a
    random name (a file or symlink someone planted at a temp name is never opened, followed or reused),
    which is then renamed over `path`. On any failure (an error, an interrupt, `path` a folder) the temp
    file is removed and `path` is as it was."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"{path.parent}: no free temporary name for {path.name}")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_bytes(path: Path, data: bytes) -> None:
    """Atomic write of `data` to `path` (atomic_file); the folder is created when missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as f:
        f.write(data)


def write_stored(path: Path, data: bytes) -> None:
    """Write `data` to `path` in the stored form its suffix names (atomic: temp file + rename)."""
    path = Path(path)
    write_bytes(path, compress(data, path.suffix if path.suffix in COMPRESSED_SUFFIXES else ""))


class StoredStream:
    """write_stored fed in pieces as they come (a tool's output while it runs): the file is the one
    write_stored(path, b"".join(pieces)) writes, byte for byte (an xz stream does not depend on how its input
    was cut), written when close() is called. The compression runs on a thread of its own, so the reader
    that feeds it keeps draining the tool's pipe; abort() drops everything and writes nothing."""

    _END = None

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._xz = _xz_compressor() if self.path.suffix == ".xz" else None  # other forms: write_stored at close
        self._pieces: list[bytes] = []
        self._error: BaseException | None = None
        self._queue: queue.Queue = queue.Queue(maxsize=256)
        self._thread = threading.Thread(target=self._work, name=f"store {self.path.name}", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while (chunk := self._queue.get()) is not self._END:
            if self._error is not None:
                continue
            try:
                self._pieces.append(self._xz.compress(chunk) if self._xz is not None else chunk)
            except BaseException as exc:  # noqa: BLE001 - handed to close()
                self._error = exc
        if self._xz is not None and self._error is None:
            try:
                self._pieces.append(self._xz.flush())
            except BaseException as exc:  # noqa: BLE001
                self._error = exc

    def feed(self, chunk: bytes) -> None:
        if chunk:
            self._queue.put(bytes(chunk))

    def _finish(self) -> None:
        if self._thread.is_alive():
            self._queue.put(self._END)
            self._thread.join()

    def close(self) -> None:
        """Write the file (atomic, as write_stored); the compressor's error, if it had one, is raised here."""
        self._finish()
        if self._error is not None:
            raise self._error
        data = b"".join(self._pieces)
        if self._xz is not None:
            write_bytes(self.path, data)
        else:
            write_stored(self.path, data)

    def abort(self) -> None:
        self._finish()
        self._pieces = []


def stored_forms(folder: Path, name: str) -> list[Path]:
    """The files of `folder` that hold member `name` (plain, .xz, .gz), those present only."""
    return [p for p in (folder / name, *(folder / f"{name}{s}" for s in COMPRESSED_SUFFIXES)) if p.is_file()]


def member(folder: Path, name: str) -> Path:
    """The file holding member `name` of `folder`: `name` itself, `name.xz` or `name.gz`, whichever is present
    (folder/name when none is, so a caller's missing-file handling applies). ValueError when more than one
    form is present."""
    forms = stored_forms(folder, name)
    if len(forms) > 1:
        raise ValueError(f"{folder.name}/{name} is stored twice ({', '.join(p.name for p in forms)}): a pack holds "
                         "one form of each file")
    return forms[0] if forms else folder / name


def read_member(folder: Path, name: str, limit: int = MAX_INFLATED_BYTES) -> bytes:
    """The content of member `name` of `folder` in whichever form it is stored (see `member`)."""
    return read_stored(member(folder, name), limit)
