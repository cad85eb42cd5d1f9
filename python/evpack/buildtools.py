"""The build's own tools, chosen once and written down: the ninja that runs the build, and the compiler
cache (ccache or sccache) that nvcc and the host compiler run under.

Pure standard library: setup.py loads this file by path before torch is imported.

One ninja. torch's BuildExtension runs `ninja` from PATH, and PATH differs between entry points: a nox
virtualenv puts its bin/ (the `ninja` wheel, 1.13) first, a plain shell finds the system ninja (1.11 on
Debian 12). ninja keeps the hash of the command behind every output in <build_temp>/.ninja_log, and
each version reads only its own log format: 1.13 meets a 1.11 log with "build log version is too old;
starting over", 1.11 meets a 1.13 log with "command line changed" (another hash), and either way every
object is compiled again. So the first build records the ninja it ran in build/ninja.json, and every
later build runs that same binary (through build/tools/bin/ninja, first on the build's PATH) whatever
PATH the entry point has; EVPACK_NINJA names another one, and a recorded ninja that is gone or answers
another version is replaced by the one on PATH (one rebuild).

Compiler cache (never required). EVPACK_COMPILER_CACHE: auto (default: ccache, else sccache, when one
on PATH answers --version), ccache, sccache, or none. nvcc and the host compiler are called through two
small scripts in build/tools/wrap/ (CXX and EVPACK_REAL_NVCC point at them) that exec the cache, if any,
then the real compiler: ninja's command lines name the scripts whether a cache is used or not, so
turning the cache on or off recompiles nothing. A cache hit replays the compiler's stderr, so the
`-Xptxas -v` report that csrc/tools/nvcc-log keeps is the one ptxas wrote when it compiled that code.
torch's own wrapping (it prepends ccache/sccache found on PATH) is turned off: this choice is the one
made and recorded. Counts of one build: ccache through its stats log (CCACHE_STATSLOG, one entry per
call), sccache from a server of its own (a free port, stopped after the build).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

RECORD = "build_tools.json"  # build/tools/build_tools.json: what the last successful build used
CACHE_MODES = ("auto", "ccache", "sccache", "none")
SCHEMA_VERSION = 1


class BuildToolError(ValueError):
    """A tool named by the environment that cannot be used (one line, for setup.py to exit with)."""


@dataclass(frozen=True)
class Tool:
    name: str
    path: str
    version: str


def tool_version(path: str) -> str | None:
    """The first line of `path --version`, or None when it does not run or answer."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln.strip() for ln in (out.stdout or out.stderr).splitlines() if ln.strip()]
    return lines[0] if out.returncode == 0 and lines else None


def _tool(name: str, path: str | None) -> Tool | None:
    if not path:
        return None
    version = tool_version(path)
    return Tool(name, str(Path(path).absolute()), version) if version else None


# ---- ninja -------------------------------------------------------------------------------------------

def choose_ninja(build_dir: Path, environ: Mapping[str, str]) -> tuple[Tool | None, str]:
    """(the ninja this build runs, why). Raises BuildToolError for an EVPACK_NINJA that is no ninja."""
    named = environ.get("EVPACK_NINJA", "").strip()
    if named:
        tool = _tool("ninja", shutil.which(named, path=environ.get("PATH")) or named)
        if tool is None:
            raise BuildToolError(f"EVPACK_NINJA={named}: not an executable that answers `--version`")
        return tool, "EVPACK_NINJA"
    record = Path(build_dir) / "ninja.json"
    try:
        rec = json.loads(record.read_text(encoding="utf-8"))
        tool = _tool("ninja", rec["path"])
        if tool is not None and tool.version == rec["version"]:
            return tool, "the ninja that built this tree (build/ninja.json)"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    tool = _tool("ninja", shutil.which("ninja", path=environ.get("PATH")))
    return tool, ("first on PATH" if tool else "no ninja on PATH")


def use_ninja(build_dir: Path, tool: Tool) -> Path:
    """Record `tool` in build/ninja.json and link it as build/tools/bin/ninja; returns that folder, to be
    put first on the build's PATH (it holds nothing else, so no other command changes)."""
    build_dir = Path(build_dir)
    _write_if_changed(build_dir / "ninja.json", json.dumps({"path": tool.path, "version": tool.version},
                                                           indent=1) + "\n")
    bin_dir = build_dir / "tools" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    link = bin_dir / "ninja"
    if not (link.is_symlink() and os.readlink(link) == tool.path):
        tmp = bin_dir / ".ninja.tmp"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(tool.path)
        tmp.replace(link)
    return bin_dir


# ---- compiler cache ----------------------------------------------------------------------------------

def choose_compiler_cache(environ: Mapping[str, str]) -> tuple[Tool | None, str]:
    """(ccache or sccache, or None; why). Raises BuildToolError for a mode that is unknown or a cache
    that was asked for by name and cannot be used."""
    mode = environ.get("EVPACK_COMPILER_CACHE", "auto").strip().lower() or "auto"
    if mode in ("none", "off", "0"):
        return None, f"EVPACK_COMPILER_CACHE={mode}"
    if mode not in CACHE_MODES:
        raise BuildToolError(f"EVPACK_COMPILER_CACHE={mode}: expected one of {', '.join(CACHE_MODES)}")
    names = ("ccache", "sccache") if mode == "auto" else (mode,)
    path = environ.get("PATH")
    for name in names:
        tool = _tool(name, shutil.which(name, path=path))
        if tool is not None:
            return tool, ("found on PATH" if mode == "auto" else f"EVPACK_COMPILER_CACHE={mode}")
    if mode != "auto":
        raise BuildToolError(f"EVPACK_COMPILER_CACHE={mode}: no working {mode} on PATH")
    return None, "neither ccache nor sccache on PATH"


def _write_if_changed(path: Path, text: str, mode: int | None = None) -> None:
    if not (path.is_file() and path.read_text(encoding="utf-8") == text):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        if mode is not None:
            tmp.chmod(mode)
        tmp.replace(path)


def _sh_quote(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"


def wrapper_text(compiler: str, cache: Tool | None) -> str:
    launcher = f"{_sh_quote(cache.path)} " if cache else ""
    return ("#!/bin/sh\n# Written by setup.py (python/evpack/buildtools.py): the compiler, through the compiler "
            "cache when one is used.\n" f"exec {launcher}{_sh_quote(compiler)} \"$@\"\n")


def write_wrappers(build_dir: Path, cache: Tool | None, *, nvcc: str, cxx: str) -> dict[str, str]:
    """build/tools/wrap/{nvcc,c++}: exec the cache (if any) and the real compiler. Returns their paths."""
    wrap = Path(build_dir).absolute() / "tools" / "wrap"
    out = {}
    for name, real in (("nvcc", nvcc), ("c++", cxx)):
        path = wrap / name
        found = shutil.which(real)
        if found and Path(found).resolve().parent == wrap.resolve():  # CXX or EVPACK_REAL_NVCC left over from a build
            raise BuildToolError(f"the {name} to wrap, {real}, is this build's own wrapper: set CXX / EVPACK_REAL_NVCC "
                                 "to the real compiler (or unset them)")
        _write_if_changed(path, wrapper_text(real, cache), mode=stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP
                          | stat.S_IROTH | stat.S_IXOTH)
        out[name] = str(path)
    return out


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CacheSession:
    """One build's use of the compiler cache: start() sets the environment, finish() returns the counts."""

    def __init__(self, tool: Tool | None, build_dir: Path) -> None:
        self.tool = tool
        self.stats_log = Path(build_dir).absolute() / "tools" / "ccache-stats.log"
        self.problem: str | None = None

    def start(self, environ: dict[str, str]) -> None:
        if self.tool is None:
            return
        if self.tool.name == "ccache":
            self.stats_log.parent.mkdir(parents=True, exist_ok=True)
            self.stats_log.unlink(missing_ok=True)  # ccache appends: this build's calls only
            environ["CCACHE_STATSLOG"] = str(self.stats_log)
            return
        environ["SCCACHE_SERVER_PORT"] = str(_free_port())
        environ.setdefault("SCCACHE_IDLE_TIMEOUT", "300")  # a build that dies leaves no server for long
        try:
            out = subprocess.run([self.tool.path, "--start-server"], capture_output=True, text=True, timeout=60,
                                 env=environ)
        except (OSError, subprocess.SubprocessError) as exc:
            out = None
            self.problem = f"sccache --start-server: {exc}"
        if out is not None and out.returncode != 0:
            self.problem = f"sccache --start-server exited {out.returncode}: {(out.stderr or out.stdout).strip()[:200]}"
        if self.problem:  # the build goes on without a cache
            self.tool = None

    def finish(self, environ: Mapping[str, str]) -> dict | None:
        """The counts of this build ({"hits", "misses", "uncacheable"} and the tool's own numbers)."""
        if self.tool is None:
            return None
        if self.tool.name == "ccache":
            # no log: nothing was compiled, or this ccache predates its stats log; either way no counts to give
            try:
                return ccache_counts(self.stats_log.read_text(encoding="utf-8", errors="replace"))
            except OSError:
                return None
        try:
            out = subprocess.run([self.tool.path, "--show-stats", "--stats-format=json"], capture_output=True,
                                 text=True, timeout=60, env=dict(environ))
            counts = sccache_counts(json.loads(out.stdout)) if out.returncode == 0 else None
            if counts is None:
                self.problem = f"sccache --show-stats exited {out.returncode}"
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            counts, self.problem = None, f"sccache --show-stats: {exc}"
        try:
            subprocess.run([self.tool.path, "--stop-server"], capture_output=True, timeout=60, env=dict(environ))
        except (OSError, subprocess.SubprocessError):
            pass
        return counts


# ccache's stats log (CCACHE_STATSLOG): "# <input>" then one counter per line for each call.
_CCACHE_HITS = {"direct_cache_hit", "preprocessed_cache_hit"}
_CCACHE_MISSES = {"cache_miss"}


def ccache_counts(log: str) -> dict:
    """Hits, misses and uncacheable calls (linking, unsupported options, ...) from a ccache stats log."""
    calls: list[set[str]] = []
    for line in log.splitlines():
        if line.startswith("# "):
            calls.append(set())
        elif line.strip() and calls:
            calls[-1].add(line.strip())
    hits = sum(1 for c in calls if c & _CCACHE_HITS)
    misses = sum(1 for c in calls if not c & _CCACHE_HITS and c & _CCACHE_MISSES)
    return {"hits": hits, "misses": misses, "uncacheable": len(calls) - hits - misses}


# sccache counts nvcc's phases under kinds of their own besides the call ("CUDA"): these are not calls.
_SCCACHE_PHASES = {"CUDA (Device code)", "PTX", "CUBIN"}


def sccache_counts(stats: dict) -> dict | None:
    """Hits, misses and uncacheable calls (linking included, as ccache counts them) from
    `sccache --show-stats --stats-format=json`: its server's counts since it started (one build's, with a
    server of its own); by_kind keeps sccache's own per-kind numbers (nvcc's phases too)."""
    s = stats.get("stats") if isinstance(stats, dict) else None
    if not isinstance(s, dict):
        return None

    def kinds(key: str) -> dict[str, int]:
        v = s.get(key)
        counts = v.get("counts") if isinstance(v, dict) else None
        return {k: n for k, n in (counts or {}).items() if isinstance(n, int)}

    def number(key: str) -> int:
        v = s.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else 0

    hits, misses = kinds("cache_hits"), kinds("cache_misses")
    return {"hits": sum(n for k, n in hits.items() if k not in _SCCACHE_PHASES),
            "misses": sum(n for k, n in misses.items() if k not in _SCCACHE_PHASES),
            "uncacheable": sum(number(k) for k in ("requests_not_cacheable", "requests_unsupported_compiler",
                                                   "requests_not_compile")),
            "by_kind": {"hits": hits, "misses": misses}}


def write_record(build_dir: Path, *, ninja: Tool | None, ninja_why: str, cache: Tool | None, cache_why: str,
                 counts: dict | None, problem: str | None) -> Path:
    """build/tools/build_tools.json: what this build ran (the build stage keeps a copy in the pack)."""
    rec = {"schema_version": SCHEMA_VERSION,
           "ninja": dict(asdict(ninja), why=ninja_why) if ninja else {"why": ninja_why},
           "compiler_cache": dict(asdict(cache), why=cache_why, counts=counts) if cache else
           {"name": None, "why": cache_why}}
    if problem:
        rec["compiler_cache"]["problem"] = problem
    path = Path(build_dir) / "tools" / RECORD
    _write_if_changed(path, json.dumps(rec, indent=1) + "\n")
    return path
