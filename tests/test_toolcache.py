"""The tool cache (evpack.toolcache): tool output reused by the hash of the device code it was run on.

A stand-in tool (a shell script that counts its runs) drives the cache rules; the premise, that two nvcc
builds of one source differ in their bytes but not in their device code or its disassembly, is checked
on real nvcc and cuobjdump output (slow). Each attack on the cache is a test: a damaged or swapped entry,
a folder others can write, links, a cache inside a pack, an input that changes while the tool reads it.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from evpack import toolcache, tools

REPO = Path(__file__).resolve().parents[1]


def elf(sections: list[tuple[bytes, bytes]]) -> bytes:
    """A minimal 64-bit little-endian ELF file holding `sections` (name, bytes) and a section name table."""
    names = [n for n, _ in sections] + [b".shstrtab"]
    strtab, name_offs = b"\0", []
    for n in names:
        name_offs.append(len(strtab))
        strtab += n + b"\0"
    blobs = [d for _, d in sections] + [strtab]
    offsets, cur = [], 64
    for b in blobs:
        offsets.append(cur)
        cur += len(b)
    shnum = len(blobs) + 1
    ehdr = (b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
            + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, cur, 0, 64, 0, 0, 64, shnum, shnum - 1))
    shdrs = bytes(64)
    for i, (b, off) in enumerate(zip(blobs, offsets, strict=True)):
        sh_type = 3 if i == len(blobs) - 1 else 1
        shdrs += struct.pack("<IIQQQQIIQQ", name_offs[i], sh_type, 0, 0, off, len(b), 0, 0, 1, 0)
    return ehdr + b"".join(blobs) + shdrs


def test_device_code_digest_reads_only_the_fat_binary_sections(tmp_path):
    def digest(sections) -> str | None:
        p = tmp_path / "x.so"
        p.write_bytes(elf(sections))
        return toolcache.device_code_digest(p)

    base = digest([(b".text", b"host code 1"), (b".nv_fatbin", b"cubins A")])
    assert base is not None
    if shutil.which("readelf"):  # the stand-in is an ELF file the binutils read too
        out = subprocess.run(["readelf", "-S", "-W", str(tmp_path / "x.so")], capture_output=True, text=True)
        assert ".nv_fatbin" in out.stdout, out.stdout + out.stderr
    assert digest([(b".text", b"host code 2 (other temp names)"), (b".nv_fatbin", b"cubins A")]) == base
    assert digest([(b".text", b"host code 1"), (b".nv_fatbin", b"cubins B")]) != base
    assert digest([(b".text", b"host code 1"), (b".nv_fatbin", b"cubins A"), (b".nvFatBinSegment", b"\x10")]) != base
    assert digest([(b".text", b"host code 1"), (b".nv_fatbix", b"cubins A")]) is None  # no fat binary at all
    full = elf([(b".text", b"host"), (b".nv_fatbin", b"cubins A")])
    for bad in (b"", b"not an elf file at all", full[:70], full[:-10], b"\x7fELF" + bytes([1, 1]) + full[6:]):
        (tmp_path / "bad").write_bytes(bad)
        assert toolcache.device_code_digest(tmp_path / "bad") is None, bad[:8]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None or tools.find_tool("cuobjdump") is None,
                    reason="needs nvcc and cuobjdump")
def test_two_nvcc_builds_differ_in_bytes_not_in_device_code(tmp_path):
    """Why the key is the device code: nvcc names temporary files after its pid, so every build of the
    same source is another file; the cubins, and cuobjdump's disassembly, are the same."""
    src = tmp_path / "k.cu"
    src.write_text('#include "variants/scalar.cuh"\n'
                   "EVPACK_INSTANTIATE(scalar, m64n64w2s1, 64, 64, 2, 1, __half, fp16, 64)\n")
    objs = []
    for i in (1, 2):
        obj = tmp_path / f"k{i}.o"
        subprocess.run(["nvcc", "-c", "-std=c++17", f"-I{REPO / 'csrc'}", f"-I{REPO / 'csrc' / 'include'}",
                        "-gencode=arch=compute_90,code=sm_90", str(src), "-o", str(obj)], check=True,
                       capture_output=True, timeout=300)
        objs.append(obj)
    assert objs[0].read_bytes() != objs[1].read_bytes()
    assert toolcache.device_code_digest(objs[0]) == toolcache.device_code_digest(objs[1]) is not None
    dumps = [subprocess.run([tools.find_tool("cuobjdump"), "--dump-sass", str(o)], capture_output=True,
                            env=tools.tool_env(), check=True).stdout for o in objs]
    assert dumps[0] == dumps[1] and b"Function : " in dumps[0]


# ---- the rules, with a stand-in tool -------------------------------------------------------------------

TOOL = """#!/bin/sh
# stand-in disassembler: counts its runs, prints what it read, and what its helper says
echo run >> "$COUNT"
printf 'dump of: '; cat "$2"; printf '\\n'; fakehelper
echo 'a note on stderr' >&2
[ -n "$TOUCH_INPUT" ] && printf 'changed' >> "$2"
exit "${TOOL_EXIT:-0}"
"""


@pytest.fixture
def world(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "faketool"
    tool.write_text(TOOL)
    helper = bin_dir / "fakehelper"
    helper.write_text("#!/bin/sh\necho helper v1\n")
    for p in (tool, helper):
        p.chmod(0o755)
    cache = tmp_path / "cache"
    monkeypatch.setenv(toolcache.ENV, str(cache))
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", COUNT=str(tmp_path / "count"))
    binary = tmp_path / "k.so"
    binary.write_bytes(elf([(b".text", b"host 1"), (b".nv_fatbin", b"cubins A")]))

    class World:
        pass

    w = World()
    w.tool, w.helper, w.cache, w.env, w.binary, w.tmp = tool, helper, cache, env, binary, tmp_path

    def run(*extra: str, **env_extra: str) -> toolcache.ToolRun:
        return toolcache.run([str(tool), "--dump", str(w.binary), *extra], input_path=w.binary,
                             helpers=("fakehelper",), env=dict(env, **env_extra), timeout=60)

    def runs() -> int:
        count = tmp_path / "count"
        return len(count.read_text().splitlines()) if count.exists() else 0

    w.run, w.runs = run, runs
    return w


def test_a_second_run_on_the_same_device_code_is_reused_byte_for_byte(world):
    first = world.run()
    assert first.returncode == 0 and first.reused is None and world.runs() == 1
    world.binary.write_bytes(elf([(b".text", b"host 2: another build"), (b".nv_fatbin", b"cubins A")]))
    second = world.run()
    assert world.runs() == 1, "the tool ran again on unchanged device code"
    assert (second.returncode, second.stdout, second.stderr) == (first.returncode, first.stdout, first.stderr)
    assert second.reused and len(second.reused["key"]) == 64 and second.reused["created"]
    entry = world.cache / second.reused["key"]
    assert gzip.decompress((entry / "stdout.gz").read_bytes()) == first.stdout
    assert oct((world.cache).stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("change", ["device code", "tool", "helper", "arguments"])
def test_anything_the_output_depends_on_is_in_the_key(world, change):
    world.run()
    extra = ()
    if change == "device code":
        world.binary.write_bytes(elf([(b".text", b"host 1"), (b".nv_fatbin", b"cubins B")]))
    elif change == "tool":
        world.tool.write_text(TOOL.replace("dump of", "disassembly of"))
    elif change == "helper":
        world.helper.write_text("#!/bin/sh\necho helper v2\n")  # same name, same path, another build
    else:
        extra = ("--other-option",)
    again = world.run(*extra)
    assert world.runs() == 2 and again.reused is None


@pytest.mark.parametrize("damage", ["stdout", "stderr", "meta", "truncated gzip", "swapped entry"])
def test_a_damaged_or_swapped_entry_is_removed_and_the_tool_runs(world, damage):
    first = world.run()
    (entry,) = [p for p in world.cache.iterdir() if not p.name.startswith(".")]
    if damage == "stdout":
        (entry / "stdout.gz").write_bytes(gzip.compress(b"dump of: forged HGMMA\n"))
    elif damage == "stderr":
        (entry / "stderr").write_bytes(b"")
    elif damage == "meta":
        meta = json.loads((entry / "meta.json").read_text())
        meta["material"]["tools"]["faketool"] = "0" * 64
        (entry / "meta.json").write_text(json.dumps(meta))
    elif damage == "truncated gzip":
        (entry / "stdout.gz").write_bytes((entry / "stdout.gz").read_bytes()[:10])
    else:  # a valid entry of other input, renamed to this key
        world.binary.write_bytes(elf([(b".text", b"x"), (b".nv_fatbin", b"other cubins")]))
        world.run()
        other = next(p for p in world.cache.iterdir() if p != entry and not p.name.startswith("."))
        shutil.rmtree(entry)
        other.rename(entry)
        world.binary.write_bytes(elf([(b".text", b"host 1"), (b".nv_fatbin", b"cubins A")]))
    runs = world.runs()
    again = world.run()
    assert again.reused is None and world.runs() == runs + 1
    assert again.stdout == first.stdout and again.stderr == first.stderr
    assert world.run().reused is not None  # the entry written again is good


def test_a_folder_others_can_write_or_a_link_is_never_used(world, tmp_path, monkeypatch):
    world.cache.mkdir(mode=0o700)
    world.cache.chmod(0o777)
    world.run()
    world.run()
    assert world.runs() == 2 and not any(world.cache.iterdir())
    world.cache.chmod(0o700)
    world.run()
    (entry,) = list(world.cache.iterdir())
    moved = tmp_path / "elsewhere"
    entry.rename(moved)
    entry.symlink_to(moved)  # an entry that is a link (to a folder anyone may have filled)
    assert world.run().reused is None and world.runs() == 4
    link_root = tmp_path / "link-cache"
    link_root.symlink_to(world.cache)
    monkeypatch.setenv(toolcache.ENV, str(link_root))
    assert toolcache.usable_root() == (None, f"{link_root} is a symbolic link")


def test_turned_off_it_reads_and_writes_nothing(world, monkeypatch, tmp_path):
    monkeypatch.setenv(toolcache.ENV, "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    world.run()
    world.run()
    assert world.runs() == 2 and not world.cache.exists() and not (tmp_path / "xdg").exists()


def test_failed_runs_and_inputs_that_change_while_read_are_not_kept(world):
    assert world.run(TOOL_EXIT="3").returncode == 3
    world.binary.write_bytes(b"no ELF file: keyed by all of its bytes")
    assert world.run(TOUCH_INPUT="1").returncode == 0  # the tool changed its input (a rebuild meanwhile)
    assert not [p for p in world.cache.iterdir() if not p.name.startswith(".")]
    assert world.runs() == 2


def test_a_cache_inside_a_pack_is_refused(world, monkeypatch, tmp_path):
    pack = tmp_path / "packs" / "20261124T000000Z-abc"
    pack.mkdir(parents=True)
    (pack / "index.json").write_text("{}")
    monkeypatch.setenv(toolcache.ENV, str(pack / "sass" / "cache"))
    root, why = toolcache.usable_root()
    assert root is None and "inside the pack" in why
    world.run()
    assert not (pack / "sass").exists()


def test_old_entries_are_dropped(world, monkeypatch):
    monkeypatch.setattr(toolcache, "MAX_ENTRIES", 3)
    for i in range(5):
        world.run(f"--variant={i}")
    assert len([p for p in world.cache.iterdir() if not p.name.startswith(".")]) == 3
    assert world.run("--variant=4").reused is not None  # the newest stays
    assert world.run("--variant=0").reused is None and world.runs() == 6  # the oldest went


# ---- the build's tools (evpack.buildtools): one ninja, the compiler cache ------------------------------

from evpack import buildtools  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "compcache"


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return path


def _fake_ninja(folder: Path, version: str) -> Path:
    return _script(folder / "ninja", f'[ "$1" = --version ] && echo {version} && exit 0\necho "ran {version}"\n')


def test_the_build_keeps_running_the_ninja_it_recorded(tmp_path):
    old, new = _fake_ninja(tmp_path / "system", "1.11.1"), _fake_ninja(tmp_path / "venv" / "bin", "1.13.2")
    build = tmp_path / "build"
    tool, why = buildtools.choose_ninja(build, {"PATH": str(old.parent)})
    assert (tool.path, tool.version, why) == (str(old), "1.11.1", "first on PATH")
    shim = buildtools.use_ninja(build, tool)
    # another entry point (a nox virtualenv) puts another ninja first on PATH: the recorded one still runs
    path = f"{new.parent}{os.pathsep}{old.parent}"
    tool, why = buildtools.choose_ninja(build, {"PATH": path})
    assert tool.path == str(old) and "build/ninja.json" in why
    out = subprocess.run(["ninja"], capture_output=True, text=True, env={"PATH": f"{shim}{os.pathsep}{path}"})
    assert out.stdout.strip() == "ran 1.11.1"
    # EVPACK_NINJA names another; a recorded ninja that answers another version, or is gone, is replaced
    assert buildtools.choose_ninja(build, {"PATH": path, "EVPACK_NINJA": str(new)})[0].path == str(new)
    _fake_ninja(old.parent, "1.12.0")
    assert buildtools.choose_ninja(build, {"PATH": path})[0].path == str(new)
    buildtools.use_ninja(build, buildtools.choose_ninja(build, {"PATH": path})[0])
    assert os.readlink(shim / "ninja") == str(new)
    new.unlink()
    assert buildtools.choose_ninja(build, {"PATH": path}) == (buildtools.Tool("ninja", str(old), "1.12.0"),
                                                              "first on PATH")
    assert buildtools.choose_ninja(build, {"PATH": str(tmp_path / "empty")})[0] is None
    with pytest.raises(buildtools.BuildToolError, match="EVPACK_NINJA=/nonexistent/ninja: not an executable"):
        buildtools.choose_ninja(build, {"PATH": path, "EVPACK_NINJA": "/nonexistent/ninja"})


def _real_ninjas() -> list[str]:
    """Distinct ninja versions on this machine (PATH, the `ninja` wheel), one path each."""
    cands = [shutil.which("ninja"), "/usr/bin/ninja", str(Path(os.__file__).parents[2] / "bin" / "ninja")]
    try:
        import ninja as wheel  # noqa: PLC0415

        cands.append(str(Path(wheel.BIN_DIR) / "ninja"))
    except (ImportError, AttributeError):
        pass
    by_version: dict[str, str] = {}
    for c in cands:
        v = buildtools.tool_version(c) if c and os.path.isfile(c) else None
        if v:
            by_version.setdefault(v, c)
    return list(by_version.values())


@pytest.mark.skipif(len(_real_ninjas()) < 2, reason="needs two ninja versions (system and wheel) to compare")
def test_two_real_ninjas_rebuild_each_others_work_and_the_recorded_one_does_not(tmp_path):
    """The fault this guards against, on the real tools: a ninja of another version reads the other's
    .ninja_log as missing or changed and rebuilds everything; the recorded ninja, whatever PATH says, does not."""
    first, second = _real_ninjas()[:2]
    work = tmp_path / "work"
    work.mkdir()
    (work / "build.ninja").write_text("rule cp\n  command = cp $in $out\nbuild b.txt: cp a.txt\n")
    (work / "a.txt").write_text("a\n")

    def explain(ninja: str, path: str = "", where: Path = work) -> str:
        out = subprocess.run([ninja, "-n", "-d", "explain"], cwd=where, capture_output=True, text=True,
                             env=dict(os.environ, PATH=path or os.environ["PATH"]))
        return out.stdout + out.stderr

    subprocess.run([first], cwd=work, check=True, capture_output=True)
    assert "no work to do" in explain(first)
    other = shutil.copytree(work, tmp_path / "other")  # the other version may rewrite the log, even with -n
    assert "no work to do" not in explain(second, where=other), "these two ninja versions share a log format"
    build = tmp_path / "build"
    tool, _ = buildtools.choose_ninja(build, {"PATH": str(Path(first).parent)})
    shim = buildtools.use_ninja(build, tool)
    tool2, _ = buildtools.choose_ninja(build, {"PATH": f"{Path(second).parent}{os.pathsep}{Path(first).parent}"})
    assert tool2.path == tool.path
    assert "no work to do" in explain("ninja", f"{shim}{os.pathsep}{Path(second).parent}")


def _fake_cache(folder: Path, name: str, *, works: bool = True) -> Path:
    return _script(folder / name, (f'[ "$1" = --version ] && echo "{name} 9.9" && exit 0\n' if works else "exit 1\n")
                   + f'echo "{name}" "$@" >> "$CALLS"\nexec "$@"\n')


def test_the_compiler_cache_is_chosen_by_mode_and_never_required(tmp_path):
    both, only_s, broken = tmp_path / "both", tmp_path / "only-sccache", tmp_path / "broken-ccache"
    _fake_cache(both, "ccache"), _fake_cache(both, "sccache"), _fake_cache(only_s, "sccache")
    _fake_cache(broken, "ccache", works=False), _fake_cache(broken, "sccache")
    pick = buildtools.choose_compiler_cache
    assert pick({"PATH": str(both)})[0].name == "ccache"
    assert pick({"PATH": str(both), "EVPACK_COMPILER_CACHE": "sccache"})[0].name == "sccache"
    assert pick({"PATH": str(only_s)})[0].name == "sccache"
    assert pick({"PATH": str(broken)})[0].name == "sccache"  # a ccache that does not run is passed over
    assert pick({"PATH": str(tmp_path / "none")}) == (None, "neither ccache nor sccache on PATH")
    assert pick({"PATH": str(both), "EVPACK_COMPILER_CACHE": "none"})[0] is None
    for mode, needle in (("ccache", "no working ccache on PATH"), ("distcc", "expected one of auto, ccache")):
        with pytest.raises(buildtools.BuildToolError, match=needle):
            pick({"PATH": str(only_s), "EVPACK_COMPILER_CACHE": mode})


def test_the_wrappers_run_the_cache_then_the_real_compiler_whatever_its_path(tmp_path):
    odd = tmp_path / "it's a dir with spaces"
    compiler = _script(odd / "nvcc", 'echo "compiled:" "$@"\n')
    cache = buildtools.Tool("ccache", str(_fake_cache(odd, "ccache")), "ccache 9.9")
    calls = tmp_path / "calls"
    env = dict(os.environ, CALLS=str(calls))
    build = tmp_path / "build"
    wrappers = buildtools.write_wrappers(build, cache, nvcc=str(compiler), cxx="/usr/bin/c++")
    out = subprocess.run([wrappers["nvcc"], "-c", "a b.cu", "-o", "x.o"], capture_output=True, text=True, env=env)
    assert out.stdout == "compiled: -c a b.cu -o x.o\n"
    assert calls.read_text() == f"ccache {compiler} -c a b.cu -o x.o\n"
    mtime = Path(wrappers["nvcc"]).stat().st_mtime_ns
    assert buildtools.write_wrappers(build, cache, nvcc=str(compiler), cxx="/usr/bin/c++") == wrappers
    assert Path(wrappers["nvcc"]).stat().st_mtime_ns == mtime  # unchanged: not rewritten
    buildtools.write_wrappers(build, None, nvcc=str(compiler), cxx="/usr/bin/c++")  # no cache: same paths
    out = subprocess.run([wrappers["nvcc"], "-v"], capture_output=True, text=True, env=env)
    assert out.stdout == "compiled: -v\n" and len(calls.read_text().splitlines()) == 1


def test_a_wrapper_never_wraps_itself(tmp_path):
    """CXX (or EVPACK_REAL_NVCC) left pointing at the wrappers of an earlier build would make a wrapper exec itself
    for ever: refused with one line."""
    build = tmp_path / "build"
    wrappers = buildtools.write_wrappers(build, None, nvcc="/usr/bin/true", cxx="/usr/bin/true")
    with pytest.raises(buildtools.BuildToolError, match="is this build's own wrapper"):
        buildtools.write_wrappers(build, None, nvcc="/usr/bin/true", cxx=wrappers["c++"])


def test_cache_counts_from_real_tool_output():
    log = (FIXTURES / "ccache.stats.log").read_text()
    assert buildtools.ccache_counts(log) == {"hits": 2, "misses": 2, "uncacheable": 1}
    stats = json.loads((FIXTURES / "sccache.stats.json").read_text())
    counts = buildtools.sccache_counts(stats)
    assert {k: counts[k] for k in ("hits", "misses", "uncacheable")} == {"hits": 2, "misses": 2, "uncacheable": 1}
    assert counts["by_kind"]["hits"]["CUBIN"] == 1  # the ptxas phase of the nvcc call, reused
    assert buildtools.sccache_counts({"stats": "garbage"}) is None and buildtools.ccache_counts("") == {
        "hits": 0, "misses": 0, "uncacheable": 0}


@pytest.mark.parametrize("name", ["ccache", "sccache"])
def test_a_real_cache_replays_the_ptxas_report_and_counts_one_builds_calls(tmp_path, name):
    """Through the wrapper, a second compile of the same code is a hit whose stderr (the `-Xptxas -v` report
    nvcc-log keeps) equals the first's but for ptxas's own timing line; the session counts exactly these calls."""
    if shutil.which(name) is None or buildtools.tool_version(shutil.which(name)) is None:
        pytest.skip(f"{name} is not on PATH")
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    env = dict(os.environ, CCACHE_DIR=str(tmp_path / "ccache"), SCCACHE_DIR=str(tmp_path / "sccache"))
    env.pop("CCACHE_STATSLOG", None)
    cache, _ = buildtools.choose_compiler_cache(dict(env, EVPACK_COMPILER_CACHE=name))
    build = tmp_path / "build"
    session = buildtools.CacheSession(cache, build)
    session.start(env)
    assert session.problem is None
    try:
        nvcc = buildtools.write_wrappers(build, session.tool, nvcc=shutil.which("nvcc"), cxx="c++")["nvcc"]
        shutil.copy(FIXTURES / "axpy.cu", tmp_path / "axpy.cu")
        errs = [subprocess.run([nvcc, "-c", "-Xptxas", "-v", "-gencode=arch=compute_90,code=sm_90", "axpy.cu", "-o",
                                f"axpy{i}.o"], cwd=tmp_path, capture_output=True, text=True, env=env, check=True).stderr
                for i in (1, 2)]
    finally:
        counts = session.finish(env)
    strip = [[ln for ln in e.splitlines() if "Compile time" not in ln] for e in errs]
    assert strip[0] == strip[1] and any("Used" in ln and "registers" in ln for ln in strip[0])
    assert {k: counts[k] for k in ("hits", "misses")} == {"hits": 1, "misses": 1}, counts


def test_streamed_output_is_the_run_and_the_cache_hit_byte_for_byte(world):
    """on_chunk sees the output as it comes; the result, the cache entry and a later hit are the same bytes."""
    got: list[bytes] = []
    first = toolcache.run([str(world.tool), "--dump", str(world.binary)], input_path=world.binary,
                          helpers=("fakehelper",), env=world.env, timeout=60, on_chunk=got.append)
    assert first.reused is None and b"".join(got) == first.stdout and b"dump of" in first.stdout
    assert first.stderr == b"a note on stderr\n" and first.returncode == 0
    hit: list[bytes] = []
    again = toolcache.run([str(world.tool), "--dump", str(world.binary)], input_path=world.binary,
                          helpers=("fakehelper",), env=world.env, timeout=60, on_chunk=hit.append)
    assert again.reused is not None and hit == [first.stdout] and again.stdout == first.stdout
    assert world.runs() == 1


def test_output_is_handed_on_while_the_tool_still_runs(tmp_path, monkeypatch):
    """The tool prints, then waits until the reader has seen that line (a file on_chunk creates): only a reader
    that hands output on while the tool runs lets it finish."""
    import sys

    monkeypatch.setenv(toolcache.ENV, "off")
    seen = tmp_path / "seen"
    tool = ("import os, sys, time\nsys.stdout.write('first\\n'); sys.stdout.flush()\n"
            f"while not os.path.exists({str(seen)!r}): time.sleep(0.01)\nsys.stdout.write('second\\n')\n")
    chunks: list[bytes] = []

    def on_chunk(chunk: bytes) -> None:
        chunks.append(chunk)
        seen.touch()

    out = toolcache.run([sys.executable, "-c", tool], input_path=Path(sys.executable), timeout=30, on_chunk=on_chunk)
    assert out.stdout == b"first\nsecond\n" and chunks[0] == b"first\n" and out.returncode == 0


def test_a_streamed_tool_past_its_timeout_is_killed(tmp_path, monkeypatch):
    import subprocess
    import sys
    import time

    monkeypatch.setenv(toolcache.ENV, "off")
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as exc:
        toolcache.run([sys.executable, "-c", "import sys, time; print('x', flush=True); time.sleep(60)"],
                      input_path=Path(sys.executable), timeout=1, on_chunk=lambda c: None)
    assert time.monotonic() - t0 < 30 and exc.value.output == b"x\n"
