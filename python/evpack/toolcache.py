"""Tool output reused by content hash: a disassembler run on device code it has already disassembled.

`run(cmd, input_path=...)` runs `cmd` (cuobjdump --dump-sass <binary>), or hands back the exit status,
stdout and stderr, byte for byte, of an earlier run whose key is the same. The key is the SHA-256 of:
  - the device code of the input: its ELF sections that hold fat binaries (.nv_fatbin, the cubins of
    every arch, and .nvFatBinSegment), names and bytes; not the host code, whose bytes change on every
    nvcc run (nvcc names its temporary files after its process id) while the cubins do not. A file
    that holds no such section (or is not a 64-bit ELF file) is keyed by all of its bytes;
  - the command's arguments, the input's path replaced by a placeholder;
  - the SHA-256 of the tool's executable and of each helper it runs (cuobjdump runs nvdisasm), as the
    command's PATH resolves them: another build of a tool is another key, whatever its version says.
Nothing parsed is kept: a pack gets the tool's output exactly as a fresh run writes it, and every
parse (the stage's tables, `verify`) reads that output as it does a fresh one, so a parser change needs
no new key. Only runs that exit 0 are kept.

Where: $EVPACK_TOOL_CACHE (a folder; off, none, no, false or 0: no cache), else
$XDG_CACHE_HOME/evpack/tools (~/.cache/evpack/tools): outside every pack. The folder is used only when
it is a real folder (not a link), owned by this user and writable by no one else, and no pack holds it;
each entry is <key>/ {meta.json, stdout.gz, stderr}, written into a temporary folder and renamed into
place, used only when meta.json names the same key material and the output's size and SHA-256 match
(a damaged entry is removed and the tool runs). The newest MAX_ENTRIES entries are kept.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .records.view import View, view

log = logging.getLogger("evpack")

ENV = "EVPACK_TOOL_CACHE"
OFF = ("off", "none", "no", "false", "0")
RECIPE = 1  # what an entry holds and how its key is made; a change here makes every old entry a miss
MAX_ENTRIES = 16
_INPUT = "<input>"
_SHT_NOBITS = 8


_STREAM_CHUNK = 1 << 20  # stdout is handed on in pieces of at most this many bytes


@dataclass(frozen=True)
class ToolRun:
    """A tool's exit status and output; `reused` names the cache entry it came from (None: it ran now)."""

    returncode: int
    stdout: bytes
    stderr: bytes
    reused: dict | None = None


# ---- the key -----------------------------------------------------------------------------------------

def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def device_code_digest(path: Path) -> str | None:
    """SHA-256 over the fat-binary sections of a 64-bit little-endian ELF file (each section's name, size
    and bytes, in the order of the section table), or None when `path` is no such file or holds none."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None
            (shoff,) = struct.unpack_from("<Q", head, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
            if shentsize < 64 or not 0 < shnum <= 0xFF00 or shstrndx >= shnum:
                return None
            f.seek(shoff)
            table = f.read(shentsize * shnum)
            if len(table) != shentsize * shnum:
                return None
            sections = [struct.unpack_from("<IIQQQQ", table, i * shentsize) for i in range(shnum)]
            _, _, _, _, str_off, str_size = sections[shstrndx]
            f.seek(str_off)
            names = f.read(str_size)
            h = hashlib.sha256()
            found = 0
            for name_off, sh_type, _flags, _addr, offset, size in sections:
                end = names.find(b"\0", name_off)
                name = names[name_off:end] if 0 <= name_off < len(names) and end >= 0 else b""
                if b"fatbin" not in name.lower():
                    continue
                h.update(name + b"\0" + struct.pack("<QI", size, sh_type))
                if sh_type != _SHT_NOBITS:
                    f.seek(offset)
                    data = f.read(size)
                    if len(data) != size:
                        return None
                    h.update(data)
                found += 1
    except OSError:
        return None
    return h.hexdigest() if found else None


def key_material(cmd: list[str], input_path: Path, helpers: tuple[str, ...] = (),
                 env: dict[str, str] | None = None) -> dict | None:
    """What the output depends on, or None when a tool cannot be found and hashed (then nothing is cached)."""
    search = (env or os.environ).get("PATH")
    tools = {}
    for name in (cmd[0], *helpers):
        found = name if os.path.isabs(name) else shutil.which(name, path=search)
        if not found or not os.path.isfile(found):
            return None
        tools[Path(name).name] = _sha256(Path(found))
    device = device_code_digest(input_path)
    source = {"device_code_sha256": device} if device else {"file_sha256": _sha256(input_path)}
    return {"recipe": RECIPE, "args": [_INPUT if a == str(input_path) else a for a in cmd[1:]],
            "input": source, "tools": tools}


def _key(material: dict) -> str:
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


# ---- the folder --------------------------------------------------------------------------------------

def cache_root() -> Path | None:
    """The cache folder the environment names (None: turned off)."""
    value = os.environ.get(ENV)
    if value is not None and value.strip().lower() in OFF:
        return None
    if value and value.strip():
        return Path(value).expanduser().absolute()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).absolute() / "evpack" / "tools"


def _private_dir(path: Path) -> str | None:
    """Why `path` may not hold cache entries (None: it may): a link, not a folder, another owner, writable by
    group or others."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to uid {st.st_uid}, not to this user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def usable_root() -> tuple[Path | None, str | None]:
    """(the cache folder, None) ready for use, or (None, why not: turned off, unsafe, not creatable)."""
    root = cache_root()
    if root is None:
        return None, f"{ENV} turns it off"
    for folder in (root, *root.parents):
        if (folder / "pack.json").is_file() or (folder / "index.json").is_file():
            return None, f"{root} is inside the pack {folder}: a pack never holds a cache"
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        return None, f"{root} cannot be created: {exc.strerror or exc}"
    why = _private_dir(root)
    return (None, why) if why else (root, None)


@dataclass(frozen=True)
class EntryMeta(View):
    """An entry's meta.json (_write_entry): its key and key material, the exit status, the output's size and
    hashes, when it was made."""

    key: Any
    material: Any
    returncode: Any
    stdout_bytes: Any
    stdout_sha256: Any
    stderr_sha256: Any
    created: Any
    raw: Mapping


def _read_entry(entry: Path, key: str, material: dict) -> ToolRun | None:
    if _private_dir(entry) is not None:
        return None
    try:
        files = {n: entry / n for n in ("meta.json", "stdout.gz", "stderr")}
        for p in files.values():
            st = os.lstat(p)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                return None
        meta = view(EntryMeta, json.loads((entry / "meta.json").read_text(encoding="utf-8")))
        if meta.key != key or meta.material != material:
            return None
        out = gzip.decompress((entry / "stdout.gz").read_bytes())
        err = (entry / "stderr").read_bytes()
        if (len(out) != meta.stdout_bytes or hashlib.sha256(out).hexdigest() != meta.stdout_sha256
                or hashlib.sha256(err).hexdigest() != meta.stderr_sha256):
            return None
        return ToolRun(int(meta.returncode), out, err, {"key": key, "created": meta.created})
    except (OSError, ValueError, KeyError, TypeError, EOFError, gzip.BadGzipFile):
        return None


def _write_entry(root: Path, key: str, material: dict, result: ToolRun) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    try:
        (tmp / "stdout.gz").write_bytes(gzip.compress(result.stdout, compresslevel=1, mtime=0))
        (tmp / "stderr").write_bytes(result.stderr)
        meta = {"key": key, "material": material, "returncode": result.returncode,
                "stdout_bytes": len(result.stdout), "stdout_sha256": hashlib.sha256(result.stdout).hexdigest(),
                "stderr_sha256": hashlib.sha256(result.stderr).hexdigest(),
                "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        dest = root / key
        if os.path.lexists(dest):
            _remove(dest)
        tmp.rename(dest)
    except OSError as exc:
        log.info("tool cache: entry %s not kept: %s", key[:12], exc.strerror or exc)
        _remove(tmp)


def _remove(path: Path) -> None:
    try:
        if path.is_symlink() or not path.is_dir():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path)
    except OSError:
        pass


def _evict(root: Path) -> None:
    """Keep the MAX_ENTRIES entries used last; drop temporary folders older than an hour."""
    entries, now = [], time.time()
    for p in root.iterdir():
        try:
            mtime = os.lstat(p / "meta.json").st_mtime if not p.name.startswith(".") else os.lstat(p).st_mtime
        except OSError:
            mtime = 0.0
        if p.name.startswith(".tmp-"):
            if now - mtime > 3600:
                _remove(p)
        elif len(p.name) == 64:
            entries.append((mtime, p))
    for _, p in sorted(entries, reverse=True)[MAX_ENTRIES:]:
        _remove(p)


# ---- the one call ------------------------------------------------------------------------------------

def _run_streaming(cmd: list[str], env, timeout: float | None, on_chunk: Callable[[bytes], None]) -> ToolRun:
    """subprocess.run(cmd, capture_output=True, env=env, timeout=timeout), with each piece of stdout handed to
    on_chunk as the tool writes it (subprocess.TimeoutExpired after killing the tool, as subprocess.run)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    err: list[bytes] = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    reader.start()
    expired = threading.Event()

    def _expire() -> None:
        expired.set()
        proc.kill()

    watchdog = threading.Timer(timeout, _expire) if timeout is not None else None
    if watchdog is not None:
        watchdog.start()
    out: list[bytes] = []
    try:
        while chunk := proc.stdout.read1(_STREAM_CHUNK):
            out.append(chunk)
            on_chunk(chunk)
    finally:
        if watchdog is not None:
            watchdog.cancel()
        if sys.exc_info()[0] is not None:
            proc.kill()
        proc.wait()
        reader.join()
        proc.stdout.close()
        proc.stderr.close()
    if expired.is_set():
        raise subprocess.TimeoutExpired(cmd, timeout, b"".join(out), b"".join(err))
    return ToolRun(proc.returncode, b"".join(out), b"".join(err))


def run(cmd: list[str], *, input_path: Path, helpers: tuple[str, ...] = (), env: dict[str, str] | None = None,
        timeout: float | None = None, on_chunk: Callable[[bytes], None] | None = None) -> ToolRun:
    """`cmd`'s exit status and output: from the cache when an entry has this key, else from running it.
    `on_chunk` (optional) is handed the output as it comes: piece by piece while the tool runs, whole on a hit."""
    root, why = usable_root()
    material = key_material(cmd, Path(input_path), helpers, env) if root is not None else None
    key = _key(material) if material is not None else None
    if root is not None and key is not None:
        entry = root / key
        if os.path.lexists(entry):
            hit = _read_entry(entry, key, material)
            if hit is not None:
                os.utime(entry / "meta.json")
                log.info("tool cache: %s output for device code %s reused (entry of %s)", Path(cmd[0]).name,
                         material["input"].get("device_code_sha256", material["input"].get("file_sha256"))[:12],
                         hit.reused["created"])
                if on_chunk is not None:
                    on_chunk(hit.stdout)
                return hit
            log.warning("tool cache: entry %s is damaged or not this run's: removed, the tool runs", key[:12])
            _remove(entry)
    elif why and os.environ.get(ENV, "").strip().lower() not in OFF:
        log.info("tool cache not used: %s", why)
    result = _run_streaming(cmd, env, timeout, on_chunk or (lambda chunk: None))
    if root is not None and key is not None and result.returncode == 0:
        # the input may have changed while the tool read it: keep the output only for what is there now
        if key_material(cmd, Path(input_path), helpers, env) == material:
            _write_entry(root, key, material, result)
            _evict(root)
    return result
