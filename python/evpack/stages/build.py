"""Stage `build`: the real build (setup.py build_ext --inplace, ninja), its log and PTXAS output kept.

The `-Xptxas -v` output is written per object by csrc/tools/nvcc-log during
the very compile that produces the imported shared object; this stage copies
those logs into build/ptxas/ and records the SHA-256 of the built objects.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..binary import find_built, sha256_file
from ..markdown import code, text  # report_md: every pack value escaped
from ..model import PackFacts
from ..records.binary import BinaryRecord
from ..records.build import BuildData, BuildResult, BuildTools, BuiltKernel, SkippedVariant, ToolInfo
from ..records.view import objects
from . import build_triton
from .base import ERROR, FAIL, PASS, StageContext, StageOutcome, progress, read_json, write_json
from .order import declared

NAME = "build"
SPEC = declared(NAME)  # stages/order.py: the one declaration of this stage
NEEDS_GPU, TIMEOUT_S = SPEC.needs_gpu, SPEC.timeout_s
REQUIRED_FILES = SPEC.required_files  # raw files a stage that decided keeps (verify requires them)
MODULES = {"_C": "binary.json", "_canaries": "binary_canaries.json"}
LOGGED_ENV = ("EVPACK_CUDA_ARCHS", "EVPACK_NVCC_FLAGS", "EVPACK_VARIANTS", "EVPACK_CANARIES")  # build.log's header
# The ninja and the compiler cache (ccache/sccache, with this build's hits and misses) the build ran:
# python/evpack/buildtools.py. A view for people; nothing is decided from it.
BUILD_TOOLS = "build_tools.json"


def build_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("EVPACK_CANARIES", "1")  # the evidence run needs the canaries
    env.setdefault("MAX_JOBS", str(max(1, os.cpu_count() or 1)))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run(ctx: StageContext) -> None:
    env = build_env()
    cmd = [sys.executable, "setup.py", "build_ext", "--inplace"]
    t0 = time.monotonic()
    log_path = ctx.dir / "build.log"
    ninja_step = re.compile(r"^\[(\d+)/(\d+)\]")
    with open(log_path, "w", encoding="utf-8") as log:
        log.write(f"# {' '.join(cmd)}\n# " + " ".join(f"{k}={env.get(k, '')}" for k in LOGGED_ENV) + "\n")
        proc = subprocess.Popen(cmd, cwd=ctx.repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            m = ninja_step.match(line)
            if m:
                progress(f"build [{m.group(1)}/{m.group(2)}] {time.monotonic() - t0:6.1f} s")
        rc = proc.wait()
    result = {"command": cmd, "returncode": rc, "elapsed_s": round(time.monotonic() - t0, 2),
              "env": {k: env.get(k) for k in (*LOGGED_ENV, "MAX_JOBS")}}
    write_json(ctx.dir / "result.json", result)
    if rc != 0:
        return
    # the extensions this build made: an extension left by an earlier build (the canaries of an earlier
    # evidence run, say) is not part of this one
    built = [m for m in MODULES if m == "_C" or (m == "_canaries" and env.get("EVPACK_CANARIES") == "1")]
    for module in built:
        so = find_built(ctx.repo, module)
        if so is None:
            continue
        write_json(ctx.dir / MODULES[module], {"module": f"evpack.{module}", "path": str(so.resolve()),
                                               "sha256": sha256_file(so)})
    _copy_ptxas_logs(ctx.repo, ctx.dir / "ptxas", built)
    sos = {m: Path(BinaryRecord.from_json(read_json(ctx.dir / MODULES[m])).path) for m in built
           if (ctx.dir / MODULES[m]).is_file()}
    build_triton.keep(ctx.repo, ctx.dir, sos)
    _copy_skipped(ctx.repo, ctx.dir)
    tools_record = ctx.repo / "build" / "tools" / BUILD_TOOLS  # written by setup.py after this build
    if tools_record.is_file():
        shutil.copyfile(tools_record, ctx.dir / BUILD_TOOLS)
        write_json(ctx.dir / "result.json", dict(result, build_tools=BUILD_TOOLS))  # kept: verify requires it
    _write_kernel_table(ctx, built)


def _copy_skipped(repo: Path, dest: Path) -> None:
    """build/generated/<ext>/skipped.json (variants the build left out, with the reason: an arch the
    build does not list, an nvcc that cannot target it) into the pack as skipped_<ext>.json."""
    for note in sorted((repo / "build" / "generated").glob("*/skipped.json")):
        shutil.copyfile(note, dest / f"skipped_{note.parent.name}.json")


def _linked_objects(build: Path, built: list[str]) -> set[str] | None:
    """The objects the last build linked into the extensions it made (build/generated/<ext>/objects.json,
    written by setup.py), or None for a build that wrote no manifest."""
    manifests = [build / "generated" / ext / "objects.json" for ext in built]
    manifests = [m for m in manifests if m.is_file()]
    if not manifests:
        return None
    return {o for m in manifests for o in json.loads(m.read_text(encoding="utf-8"))}


def _copy_ptxas_logs(repo: Path, dest: Path, built: list[str]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    build = repo / "build"
    linked = _linked_objects(build, built)
    for log in sorted(build.glob("temp*/**/*.o.ptxas.log")):
        obj = Path(str(log)[: -len(".ptxas.log")])
        if not obj.exists() or (linked is not None and str(obj.resolve()) not in linked):
            continue  # gone, or left by an earlier build with other settings: not part of this binary
        rel = obj.relative_to(build).as_posix()
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", rel.split("/", 1)[-1]) + ".log"
        shutil.copyfile(log, dest / name)


def _write_kernel_table(ctx: StageContext, built: list[str]) -> None:
    """Ask each built extension which kernels it registered (works on CPU torch: nothing is launched)."""
    out = subprocess.run([sys.executable, "-m", "evpack.kernel_table", *(f"evpack.{m}" for m in built)],
                         capture_output=True, text=True, timeout=300, cwd=ctx.repo)
    (ctx.dir / "kernels.log").write_text(out.stdout + out.stderr, encoding="utf-8")
    if out.returncode == 0:
        write_json(ctx.dir / "kernels.json", json.loads(out.stdout.strip().splitlines()[-1]))


def required_files(stage_dir: Path) -> tuple[str, ...]:
    """REQUIRED_FILES, and for a build that succeeded: the kernel table's raw output (kernels.log), the notes of
    variants it left out, the tools record result.json names, and the Triton record when it built Triton
    kernels: no file the build kept can go missing unnoticed."""
    try:
        res = BuildResult.from_json(read_json(stage_dir / "result.json"))
        ok = res.returncode == 0
    except (OSError, ValueError, KeyError, TypeError):
        return REQUIRED_FILES  # unreadable: the derivation names it
    out = REQUIRED_FILES + (("kernels.log",) if ok else ())
    if ok and any(stage_dir.glob("skipped_*.json")):  # a build that writes the notes writes one per extension
        out += tuple(f"skipped_{m}.json" for m, rec in MODULES.items() if (stage_dir / rec).is_file())
    if ok and res.build_tools == BUILD_TOOLS:  # result.json names the tools record it kept
        out += (BUILD_TOOLS,)
    if ok and _built_triton(stage_dir):  # the Triton record is what the cubins are checked against
        out += (build_triton.RECORD,)
    return out


def _built_triton(stage_dir: Path) -> bool:
    """Whether the build's kernel list (kernels.json) holds a kernel of a Triton variant of the registry."""
    from .. import registry

    try:
        kernels = read_json(stage_dir / "kernels.json")
        names = {BuiltKernel.from_json(k).variant for k in objects(kernels)}
    except (OSError, ValueError, TypeError, AttributeError):
        return False  # an unreadable kernel list is named by the derivation
    # a name this code does not know (an older or newer pack's variant) is no Triton variant here
    return any(v.language == "triton" and v.name in names for v in registry.variants(include_canaries=True))


def derive(stage_dir: Path, pack_dir: Path) -> StageOutcome:
    res = BuildResult.from_json(read_json(stage_dir / "result.json"))
    if res.returncode != 0:
        log = (stage_dir / "build.log").read_text(encoding="utf-8", errors="replace").splitlines()
        err = next((ln for ln in log if "error" in ln.lower() and not ln.startswith("#")), log[-1] if log else "")
        return StageOutcome(FAIL, f"build exited {res.returncode}: {err.strip()[:160]}")
    if not (stage_dir / "binary.json").exists():
        return StageOutcome(ERROR, "build exited 0 but no evpack._C shared object was found")
    binrec = BinaryRecord.from_json(read_json(stage_dir / "binary.json"))
    logs = sorted((stage_dir / "ptxas").glob("*.log"))
    if not logs:
        return StageOutcome(ERROR, "no PTXAS logs were captured (is csrc/tools/nvcc-log in use?)")
    kernels = read_json(stage_dir / "kernels.json") if (stage_dir / "kernels.json").exists() else []
    if not kernels:
        return StageOutcome(ERROR, "the built extension lists no kernels (see build/kernels.log)")
    canaries = BinaryRecord.from_json(read_json(stage_dir / "binary_canaries.json")).sha256 if (
        stage_dir / "binary_canaries.json").exists() else None
    data = {"so_sha256": binrec.sha256, "so_path": binrec.path, "canaries_sha256": canaries,
            "ptxas_logs": len(logs), "kernels": len(kernels), "env": {} if "env" not in res.raw else res.env}
    sos = {m: BinaryRecord.from_json(read_json(stage_dir / rec)).sha256 for m, rec in MODULES.items()
           if (stage_dir / rec).is_file()}
    triton_problems, triton_data = build_triton.check(stage_dir, sos)
    if triton_problems:
        return StageOutcome(ERROR, f"{len(triton_problems)} Triton problem(s); first: {triton_problems[0]}",
                            dict(data, triton=triton_data, triton_problems=triton_problems))
    if triton_data:
        data.update(triton=triton_data)
    skipped = [dict(s, extension=p.stem.removeprefix("skipped_")) for p in sorted(stage_dir.glob("skipped_*.json"))
               for s in read_json(p)]
    note = ""
    if skipped:
        data.update(skipped_variants=skipped)
        note = "; left out: " + "; ".join(f"{s.variant} ({s.reason})" for s in map(SkippedVariant.from_json, skipped))
    return StageOutcome(PASS, f"built {len(kernels)} kernels from {len(logs)} CUDA objects; "
                              f"_C sha256 {binrec.sha256[:12]}{note}", data)


def facts(outcome: StageOutcome, pack: PackFacts) -> PackFacts:
    """The digest of the built evpack._C: the one binary every other stage must have loaded."""
    return pack.with_(so_sha256=BuildData.from_json(outcome.data).so_sha256)


def report_md(stage_dir: Path, outcome: StageOutcome) -> str:
    if outcome.status != PASS:
        return ""
    d = BuildData.from_json(outcome.data)
    return (f"- shared object {code(Path(str(d.so_path)).name)} sha256 {code(d.so_sha256)}\n"
            f"- archs {code(d.env.EVPACK_CUDA_ARCHS or 'default (80;89;90;90a)')}, extra nvcc flags "
            f"{code(d.env.EVPACK_NVCC_FLAGS or 'none')}; {text(d.kernels)} kernels, "
            f"{text(d.ptxas_logs)} PTXAS logs" + _tools_line(stage_dir / BUILD_TOOLS))



def _plain(value: object, limit: int = 80) -> str:
    """A tool's name or version as plain text: letters, digits and . _ + - ( ) / , : only (the record is data)."""
    return re.sub(r"[^A-Za-z0-9 ._+()/,:-]", "", str(value))[:limit].strip() or "?"


def _tools_line(path: Path) -> str:
    """'- ninja ...; compiler cache ...' from build_tools.json ('' for a pack without one, or an unreadable one)."""
    try:
        rec = BuildTools.from_json(read_json(path))
        ninja, cache = ToolInfo.from_json(dict(rec.ninja)), ToolInfo.from_json(dict(rec.compiler_cache))
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    line = f"\n- ninja {_plain(ninja.version)}"
    if cache.name not in ("ccache", "sccache"):
        return line + "; no compiler cache"
    counts = cache.counts if isinstance(cache.counts, dict) else {}
    nums = [counts.get(k) for k in ("hits", "misses", "uncacheable")]
    tally = (" ({} hits, {} misses, {} uncacheable calls)".format(*nums)
             if all(isinstance(n, int) and not isinstance(n, bool) for n in nums) else "")
    return line + f"; compiler cache {_plain(cache.version or cache.name)}{tally}"
