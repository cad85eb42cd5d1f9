"""What a carried cell depends on, as far as a pack's own files say it (standard library only: verify uses it).

Per variant:
  device     SHA-256 over the variant's functions in the SASS dump of evpack._C (module, arch, symbol and every
             instruction as cuobjdump printed it, all archs) and over the PTXAS resources of its kernels
             (build/ptxas/*.log: registers, shared memory, stack, spills, constant banks). It changes when any
             kernel of the variant changes and not when another variant's does.
  build      SHA-256 of the build's settings (build/result.json env: archs, extra nvcc flags, ...).
  toolchain  the versions pack.json records (nvcc, ptxas, cuobjdump, nvdisasm, compute-sanitizer, ncu, torch)
             and the Python version.
  gpu        the GPU and driver env.json records (name, memory, compute capability, driver, CUDA of the driver).
Two more parts are recorded at run time, since no pack file holds what they hash (sources.py): `source` (the
variant's kernel body and the shared host/device sources) and `check` (the check code of the stage).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..jsonio import read_json
from ..packfs import plain_name, read_stored
from ..parsers.ptxas import PtxasParseError, parse_ptxas
from ..parsers.sass import SassParseError, parse_sass
from ..parsers.symbols import parse_symbol
from ..records.pack import PackJson
from ..records.sass import SassRun

DERIVED_PARTS = ("device", "build", "toolchain", "gpu")
RECORDED_PARTS = ("source", "check")
PARTS = DERIVED_PARTS + RECORDED_PARTS
EARLY_PARTS = tuple(p for p in PARTS if p != "device")  # known when the build ends, before the SASS dump
MODULE = "evpack._C"  # the extension of the registered variants (canaries live in evpack._canaries)
TOOLCHAIN_FIELDS = ("nvcc", "ptxas", "cuobjdump", "nvdisasm", "compute-sanitizer", "ncu", "torch")
GPU_FIELDS = ("gpu_name", "total_vram_bytes", "compute_capability", "driver_version", "cuda_driver_reported")


class KeysUnavailable(ValueError):
    """A pack's files do not give a variant's keys (no SASS dump, an unreadable one, ...)."""


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _dump_text(pack_dir: Path) -> str:
    try:
        run = read_json(pack_dir / "sass" / "run.json")
    except (OSError, ValueError) as exc:
        raise KeysUnavailable(f"sass/run.json unreadable ({exc})") from None
    entry = next((b for b in SassRun.from_json(run).binaries if b.module == MODULE), None)
    if entry is None or not plain_name(entry.dump):
        raise KeysUnavailable(f"sass/run.json names no dump of {MODULE}")
    path = pack_dir / "sass" / entry.dump
    try:
        data = read_stored(path)  # .xz (packs of now), .gz (older packs) or plain
    except (OSError, ValueError) as exc:
        raise KeysUnavailable(f"sass/{entry.dump} unreadable ({exc})") from None
    return data.decode("utf-8", errors="replace")


def _variant_of(symbol: str) -> str | None:
    parsed = parse_symbol(symbol)
    return parsed.variant if parsed is not None else None


def device_digests(pack_dir: Path) -> dict[str, str]:
    """{variant: device digest} for every variant with a function in the pack's evpack._C SASS dump."""
    try:
        functions = parse_sass(_dump_text(pack_dir))
    except SassParseError as exc:
        raise KeysUnavailable(f"the SASS dump does not parse ({exc})") from None
    code: dict[str, list] = {}
    for fn in functions:
        v = _variant_of(fn.symbol)
        if v is not None:
            code.setdefault(v, []).append([fn.arch, fn.symbol, [i.text for i in fn.instructions]])
    resources: dict[str, list] = {}
    for log in sorted((pack_dir / "build" / "ptxas").glob("*.log")):
        try:
            kernels = parse_ptxas(log.read_text(encoding="utf-8", errors="replace"))
        except (OSError, PtxasParseError) as exc:
            raise KeysUnavailable(f"build/ptxas/{log.name} unreadable ({exc})") from None
        for k in kernels:
            v = _variant_of(k.symbol)
            if v is not None:
                resources.setdefault(v, []).append(json.dumps(k.to_row(), sort_keys=True))
    return {v: _digest({"module": MODULE, "sass": sorted(fns), "ptxas": sorted(resources.get(v, []))})
            for v, fns in code.items()}


def environment_parts(pack_record: dict, env: dict, build_env: dict) -> dict:
    """The build, toolchain and gpu parts from pack.json-shaped facts, env.json and the build's settings."""
    pack = PackJson.from_json(pack_record)
    toolchain = {**{f: pack.toolchain_table.get(f) for f in TOOLCHAIN_FIELDS}, "python": pack.python_info.version}
    return {"build": _digest(build_env), "toolchain": toolchain, "gpu": {f: env.get(f) for f in GPU_FIELDS}}


def environment_keys(pack_dir: Path, pack_record: dict | None = None) -> dict:
    """The build, toolchain and gpu parts (every variant shares them), from the pack's files (pack.json unless
    `pack_record` is given). They are known once the build ended; KeysUnavailable when the files do not give them."""
    try:
        pj = pack_record if pack_record is not None else read_json(pack_dir / "pack.json")
        env = read_json(pack_dir / "env.json")
        build_env = read_json(pack_dir / "build" / "result.json").get("env", {})
    except (OSError, ValueError, AttributeError) as exc:
        raise KeysUnavailable(f"a file the keys are derived from is unreadable ({exc})") from None
    if not isinstance(env, dict) or not isinstance(pj, dict):
        raise KeysUnavailable("env.json or pack.json is not an object")
    return environment_parts(pj, env, build_env)


def derived_keys(pack_dir: Path, pack_record: dict | None = None) -> dict[str, dict]:
    """{variant: {part: value}} of the DERIVED_PARTS, from the pack's files (pack.json unless `pack_record`
    is given: the evidence run, before pack.json is written, passes the same facts). KeysUnavailable when the files
    do not give them."""
    common = environment_keys(pack_dir, pack_record)
    return {v: {"device": d, **common} for v, d in device_digests(pack_dir).items()}
