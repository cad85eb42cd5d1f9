"""What a reader of a pack may open: the limits that keep `verify` bounded on a hostile pack.

A pack is data from anywhere; `verify`, `label`, `report`, `merge` read it before anyone trusts it.
- A name read from a record (a cell of procs.json, a dump named by sass/run.json) becomes a file
  name inside the folder that holds the record, never a path: `plain_name` refuses separators,
  `.`/`..`, NUL and the empty name, so no record can send a reader outside the pack.
- No file of a pack is larger than MAX_FILE_BYTES (the largest today: 2.8 MB); a larger one (or a
  sparse file claiming terabytes) is refused before it is hashed or read.
- A compressed file (sass/*.sass.gz, bench/*samples.csv.gz) is inflated to at most
  MAX_INFLATED_BYTES (the largest today: 53 MB): a decompression bomb is an error, not a full memory.

Standard library only (verify imports it).
"""
from __future__ import annotations

import gzip
from pathlib import Path

MAX_FILE_BYTES = 256 << 20
MAX_INFLATED_BYTES = 512 << 20


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
