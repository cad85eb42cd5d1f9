"""SASS stage: disassemble the exact shared object the pipeline imports; prove tensor-core use.

run(): re-hash the file named by build/binary.json (and build/binary_canaries.json when
the canary extension was built), record sass/binary.json {"module", "path", "sha256"},
run `cuobjdump --dump-sass` on it (cuobjdump needs nvdisasm on PATH: tools.tool_env) and
keep the dump verbatim as sass/<module>.sass.xz (older packs: .sass.gz; packfs inflates either, capped), plus
parsed histograms (histogram.csv inside xz: 0.7 MB of repeated symbol names).

derive(): re-parses the dumps. Gates per kernel symbol x arch:
  - the disassembled file is the one the build recorded (SHA-256 equal), else fail;
  - the symbol names a registry kernel, else fail (unknown kernel);
  - `tensor` variant: >= 1 HMMA/HGMMA, every one accumulating in F32 (sass.ACCUMULATOR_TYPES: an
    `HMMA.16816.F16` / `HGMMA.*.F16` accumulator is fp16 accumulation, a precision downgrade), and no
    LDL/STL; `scalar` variant: no tensor-core math at all (exact opcodes: HFMA2.MMA is a CUDA-core
    instruction and does not count);
  - a `tensor` variant built only for arch-specific targets (registry `archs`, e.g. 90a): on those
    archs the warpgroup opcode of sass.ARCH_SPECIFIC_PROOF (HGMMA on sm_90a), not only HMMA;
  - every built kernel is in the dump on every arch the dump holds that its variant targets, else error.
Rows of a variant on an arch outside its registry `archs` (stubs) decide nothing (the data's `off_target`).
Canary results go under the data's `canaries` (the decoy canary is expected to pass here; canary_fp16_accum,
a tensor kernel with fp16 accumulators, must fail: the canary matrix reads it as this gate's liveness).
"""
from __future__ import annotations

import glob
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import binary, registry, toolcache, tools
from ..markdown import code, fence, short, text  # report_md: every pack value escaped
from ..packfs import StoredStream, plain_name, read_stored, write_stored
from ..parsers import sass, symbols
from ..records.binary import BinaryRecord
from ..records.build import BuiltKernel
from ..records.canary import canary_records
from ..records.sass import SassBinary, SassData, SassHistogram, SassRow, SassRun, rows_of
from .base import ERROR, FAIL, PASS, SKIPPED, StageContext, StageOutcome, read_json, worst, write_json, write_text
from .kernel_rows import (
    load_built_kernels,
    required_archs,
    split_canaries,
    split_off_target,
    summary_counts,
    unknown_built,
    write_csv,
)
from .order import declared

NAME = "sass"
SPEC = declared(NAME)  # stages/order.py: the one declaration of this stage
NEEDS_GPU, TIMEOUT_S = SPEC.needs_gpu, SPEC.timeout_s
REQUIRED_FILES = SPEC.required_files  # raw files a stage that decided keeps (verify requires them)


def required_files(stage_dir: Path) -> tuple[str, ...]:
    """REQUIRED_FILES, and the stderr file run.json names for a binary whose disassembler printed any: a file
    the record names cannot go missing unnoticed."""
    try:
        binaries = SassRun.from_json(read_json(stage_dir / "run.json")).binaries
        named = tuple(glob.escape(b.stderr) for b in binaries  # a literal name, never a pattern
                      if isinstance(b.stderr, str) and plain_name(b.stderr))
    except (OSError, ValueError, AttributeError, TypeError):
        return REQUIRED_FILES  # an unreadable run.json is named by the derivation
    return REQUIRED_FILES + named
BINARY_RECORD = SPEC.binary_record  # the record of the binary a passing stage loaded
SCHEMA_VERSION = 1
DERIVE_IN_PARENT = SPEC.derive_in_parent  # the dump parsed here is parsed once per verify (derivation._derive_parallel)
# A quick pack's dump is 34 MB of text (53 kernels x 4 archs, CUDA 13.0): 2.8 MB gzip-compressed, 0.65 MB in xz
# (packfs.XZ_PRESET); the pack keeps cuobjdump's stdout byte for byte inside an xz stream (no timestamp:
# reproducible bytes). Packs before the 8 MB pack limit hold .sass.gz; run.json names the file either way.
COMPRESS_DUMP = True
DUMP_SUFFIX = ".xz"
HISTOGRAM_CSV = "histogram.csv.xz"  # older packs: histogram.csv (people read it: `xzcat`, pandas reads it as is)
REPORT_ARCH = "sm_90"  # the arch whose tensor-core lines report.md quotes (else the highest in the dump)
# build/<file> -> (sass/<file>, dump file stem)
BINARIES = (("binary.json", "evpack._C"), ("binary_canaries.json", "evpack._canaries"))

ROW_KEYS = ("module", "arch", "symbol", "variant", "config", "dtype", "head_dim", "kind", "canary",
            "instructions", "tensor_math", "tensor_forms",
            *(op.lower() for op in sass.TABLE_OPCODES), "hfma2_mma", "first_tensor_lines", "status", "reason")
_CSV_DROP = ("tensor_forms", "first_tensor_lines")


def _dump_name(module: str) -> str:
    return f"{module}.sass{DUMP_SUFFIX}" if COMPRESS_DUMP else f"{module}.sass"


def read_dump(path: Path) -> str:
    """The cuobjdump output as it was printed (xz or gzip is storage only; inflated up to packfs' limit;
    packfs.CompressedFileError, a ValueError, for a stream that cannot be inflated)."""
    data = read_stored(path)
    return data.decode("utf-8", errors="replace")


# ---- run -------------------------------------------------------------------------------

def _tool_version(exe: str) -> str | None:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60, env=tools.tool_env())
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
    return next((ln for ln in lines if "release" in ln), lines[-1] if lines else None)


def run(ctx: StageContext) -> None:
    build = ctx.pack_dir / "build"
    binaries: list[dict] = []
    problems: list[str] = []
    cuobjdump, nvdisasm = tools.find_tool("cuobjdump"), tools.find_tool("nvdisasm")
    record = {"schema_version": SCHEMA_VERSION,
              "tools": {"cuobjdump": cuobjdump, "nvdisasm": nvdisasm,
                        "cuobjdump_version": _tool_version(cuobjdump) if cuobjdump else None},
              "binaries": binaries, "problems": problems}
    if not (build / "binary.json").exists():
        problems.append("no build/binary.json: nothing to disassemble")
        write_json(ctx.dir / "run.json", record)
        return
    if cuobjdump is None:
        problems.append("cuobjdump not found (PATH, CUDA_HOME/bin, pip nvidia-cuda-cuobjdump)")
    if nvdisasm is None:
        problems.append("nvdisasm not found (cuobjdump --dump-sass needs it; pip nvidia-cuda-nvdisasm)")
    present = [(b, m) for b, m in BINARIES if (build / b).exists()]
    with ThreadPoolExecutor(max_workers=max(1, len(present))) as pool:  # the modules' dumps at the same time
        done = list(pool.map(lambda bm: _dump_module(ctx, *bm, cuobjdump, nvdisasm), present))
    for entry, problem in done:
        binaries.append(entry)
        problems.extend(problem)
    write_json(ctx.dir / "run.json", record)
    # parsed tables for people; derive() re-parses the dumps itself
    outcome, rows, hists = evaluate(ctx.pack_dir, ctx.dir)
    write_json(ctx.dir / "histogram.json", {"schema_version": SCHEMA_VERSION, "functions": [h.to_json() for h in hists]})
    write_json(ctx.dir / "table.json", {"schema_version": SCHEMA_VERSION, "columns": list(ROW_KEYS), "rows": rows})
    import pandas as pd

    cols = [k for k in ROW_KEYS if k not in _CSV_DROP]
    write_csv(ctx.dir / "table.csv", pd.DataFrame([{k: r[k] for k in cols} for r in rows], columns=cols))
    long = [{"module": h.module, "symbol": h.symbol, "arch": h.arch, "opcode": op, "count": n}
            for h in hists for op, n in sorted(h.histogram.items())]
    write_stored(ctx.dir / HISTOGRAM_CSV,
                 pd.DataFrame(long, columns=["module", "symbol", "arch", "opcode", "count"]).to_csv(index=False).encode())


def _dump_module(ctx: StageContext, build_name: str, module_default: str, cuobjdump: str | None,
                 nvdisasm: str | None) -> tuple[dict, list[str]]:
    """Disassemble one module the build recorded (build/<build_name>) and keep its dump: (run.json's entry of
    it, problems). cuobjdump and xz hold no lock Python needs, so the two modules run side by side."""
    problems: list[str] = []
    b = BinaryRecord.from_json(read_json(ctx.pack_dir / "build" / build_name))
    module = b.module if "module" in b.raw else module_default
    path = Path(b.path)
    sha256 = binary.sha256_file(path) if path.exists() else None
    entry = {"module": module, "path": str(path), "build_json": f"build/{build_name}",
             "build_sha256": b.sha256, "sha256": sha256, "dump": None, "command": None, "rc": None}
    if sha256 is None:
        return entry, [f"{module}: {path} (from build/{build_name}) does not exist"]
    write_json(ctx.dir / build_name, {"module": module, "path": str(path), "sha256": sha256})
    if cuobjdump is None or nvdisasm is None:
        return entry, problems
    cmd = [cuobjdump, "--dump-sass", str(path)]
    # the output of an earlier run on the same device code and tools, byte for byte, when there is one
    # the dump is compressed while cuobjdump still writes it (packfs.StoredStream: the same file as write_stored)
    stored = StoredStream(ctx.dir / _dump_name(module))
    try:
        proc = toolcache.run(cmd, input_path=path, helpers=("nvdisasm",), env=tools.tool_env(),
                             timeout=TIMEOUT_S - 60, on_chunk=stored.feed)
    except BaseException:
        stored.abort()
        raise
    entry.update(command=" ".join(cmd), rc=proc.returncode, dump=_dump_name(module), dump_bytes=len(proc.stdout))
    if proc.reused:
        entry.update(reused=proc.reused)  # the tool cache entry (key, when it was made)
    stored.close()
    if proc.stderr.strip():
        stderr = f"{module}.stderr.txt"
        entry.update(stderr=stderr)
        write_text(ctx.dir / stderr, proc.stderr.decode("utf-8", errors="replace"))
    after = binary.sha256_file(path)
    if after != sha256:
        problems.append(f"{module}: {path} changed while it was disassembled ({sha256} -> {after})")
    return entry, problems


# ---- derive ----------------------------------------------------------------------------

def kernel_row(module: str, fn: sass.SassFunction, kid: symbols.KernelId | None, variants=None) -> dict:
    """One table row and its proof-gate status for one function in one arch (pure)."""
    hist = fn.histogram()
    forms = dict(sorted(fn.full_forms().items()))
    tensor_math, hfma2_mma = sum(forms.values()), fn.count_full("HFMA2.MMA")

    def row(kid: symbols.KernelId | None, status: str, reason: str) -> dict:
        return {"module": module, "arch": fn.arch, "symbol": fn.symbol, "variant": kid and kid.variant,
                "config": kid and kid.config, "dtype": kid and kid.dtype, "head_dim": kid and kid.head_dim,
                "kind": kid and kid.kind, "canary": kid.canary if kid else False, "instructions": len(fn.instructions),
                "tensor_math": tensor_math, "tensor_forms": forms,
                **{op.lower(): hist.get(op, 0) for op in sass.TABLE_OPCODES}, "hfma2_mma": hfma2_mma,
                "first_tensor_lines": [{"address": f"{i.address:04x}", "text": i.text} for i in fn.first()],
                "status": status, "reason": reason}

    if kid is None:
        return row(None, FAIL, f"unknown kernel: {symbols.explain(fn.symbol, variants)}")
    reasons = []
    if kid.kind == "tensor":
        proof = sum(hist.get(op, 0) for op in sass.PROOF_OPCODES)
        if proof == 0:
            reasons.append(f"tensor variant without {'/'.join(sass.PROOF_OPCODES)}"
                           f" (tensor-core math: {tensor_math}, HFMA2.MMA: {hfma2_mma})")
        var = next((v for v in (variants or registry.variants(include_canaries=True)) if v.name == kid.variant), None)
        need = sass.ARCH_SPECIFIC_PROOF.get(fn.arch, ()) if var is not None and var.archs else ()
        if proof and need and not any(hist.get(op, 0) for op in need):
            reasons.append(f"{kid.variant} is built for {', '.join(var.archs)} only: no {'/'.join(need)} on {fn.arch}"
                           f" ({', '.join(f'{op} x{hist.get(op, 0)}' for op in sass.PROOF_OPCODES)})")
        local = {op: hist.get(op, 0) for op in sass.LOCAL_MEMORY_OPCODES if hist.get(op, 0)}
        if local:
            reasons.append("local-memory traffic: " + ", ".join(f"{op} x{n}" for op, n in local.items()))
        if low := low_precision_accumulation(fn):
            reasons.append(low)
    elif kid.kind == "scalar":
        if tensor_math:
            reasons.append("scalar variant with tensor-core math: "
                           + ", ".join(f"{op} x{n}" for op, n in forms.items()))
    else:
        reasons.append(f"registry kind {kid.kind!r} has no SASS rule")
    return row(kid, FAIL if reasons else PASS, "; ".join(reasons))


def low_precision_accumulation(fn: sass.SassFunction) -> str:
    """Why `fn` (a tensor variant's function) does not accumulate in fp32 ('' when every HMMA/HGMMA does):
    the function, each offending full form with its count, and the first such instruction as printed."""
    bad = [i for i in fn.instructions if i.base in sass.PROOF_OPCODES
           and sass.accumulator(i.opcode) != sass.REQUIRED_ACCUMULATOR]
    if not bad:
        return ""
    forms = Counter(i.opcode for i in bad)
    kinds = sorted({sass.ACCUMULATOR_TYPES.get(sass.accumulator(i.opcode) or "", "an unreadable type") for i in bad})
    first = bad[0]
    return (f"accumulates in {' and '.join(kinds)}, not fp32: "
            + ", ".join(f"{op} x{n}" for op, n in sorted(forms.items()))
            + f" in {fn.symbol} (first /*{first.address:04x}*/ {first.text})")


def _histogram(module: str, fn: sass.SassFunction) -> SassHistogram:
    forms = fn.full_forms(sass.TENSOR_MATH_OPCODES)
    for full in sass.TABLE_FULL_FORMS:
        if n := fn.count_full(full):
            forms[full] = n
    return SassHistogram(module, fn.symbol, fn.arch, dict(sorted(fn.histogram().items())), dict(sorted(forms.items())))


def evaluate(pack_dir: Path, stage_dir: Path) -> tuple[StageOutcome, list[dict], list[SassHistogram]]:
    """(outcome, every row incl. canaries, histograms). Reads only files inside the pack."""
    data: dict = {"schema_version": SCHEMA_VERSION}
    if not (pack_dir / "build" / "binary.json").exists():
        return StageOutcome(SKIPPED, "no build in this pack (build/binary.json missing)", data), [], []
    run_json = stage_dir / "run.json"
    if not run_json.exists():
        return StageOutcome(ERROR, "the SASS stage recorded no run (sass/run.json missing)", data), [], []
    run = SassRun.from_json(read_json(run_json))
    problems: list[str] = list(run.problems if "problems" in run.raw else [])
    failures: list[str] = []
    bins = []
    dumped = set()  # the modules whose binary was hashed
    rows: list[dict] = []
    hists: list[SassHistogram] = []
    archs: list[str] = []
    for build_name, _ in BINARIES:
        src = pack_dir / "build" / build_name
        if not src.exists():
            continue
        b = BinaryRecord.from_json(read_json(src))
        module = b.module
        mine_path = stage_dir / build_name
        mine = BinaryRecord.from_json(read_json(mine_path)) if mine_path.exists() else None
        entry = next((e for e in run.binaries if e.build_json == f"build/{build_name}"), SassBinary.from_json({}))
        bins.append({"module": module, "path": b.path, "build_sha256": b.sha256, "sha256": mine and mine.sha256,
                     "dump": entry.dump, "dump_bytes": entry.dump_bytes, "command": entry.command})
        if mine is None:
            problems.append(f"{module}: no sass/{build_name} (the binary was not hashed)")
            continue
        if mine.sha256:
            dumped.add(module)
        if mine.sha256 != b.sha256:
            failures.append(f"{module}: binary mismatch: build recorded sha256 {b.sha256}, "
                            f"disassembled {mine.sha256} ({mine.path})")
        dump_name = entry.dump or _dump_name(module)
        if not plain_name(dump_name):  # a record names a file inside sass/, never a path out of the pack
            problems.append(f"{module}: dump {dump_name!r} is not a file name inside sass/")
            continue
        dump = stage_dir / dump_name
        if entry.rc not in (0, None) or not dump.exists():
            problems.append(f"{module}: cuobjdump did not produce a dump (rc {entry.rc})")
            continue
        try:
            fns = sass.parse_sass(read_dump(dump))
        except (sass.SassParseError, OSError, ValueError) as e:
            problems.append(f"{module}: {e}")
            continue
        if not fns:
            problems.append(f"{module}: the dump holds no functions ({dump.name}, {dump.stat().st_size} B)")
            continue
        seen = set()
        for fn in fns:
            if (fn.symbol, fn.arch) in seen:
                problems.append(f"{module}: {fn.symbol} appears twice for {fn.arch}")
                continue
            seen.add((fn.symbol, fn.arch))
            if fn.arch not in archs:
                archs.append(fn.arch)
            rows.append(kernel_row(module, fn, symbols.identify(fn.symbol)))
            hists.append(_histogram(module, fn))
    rows, off_target = split_off_target(rows)
    # every built kernel is in its module's dump on every arch that dump holds
    built, built_problem = load_built_kernels(pack_dir)
    if built is None:
        problems.append(built_problem)
    else:
        failures += [f"build/kernels.json names a kernel outside the registry: {u}" for u in unknown_built(built)]
        have = {(r.module, r.kernel, r.arch) for r in rows_of(rows) if r.variant}
        mod_archs: dict[str, set] = {}
        for r in rows_of(rows + off_target):
            mod_archs.setdefault(r.module, set()).add(r.arch)
            # and the other way round: a registry kernel the binary holds is one the build says it made (as the
            # PTXAS rows are held to kernels.json), so kernels.json cannot drop a kernel the later stages are then
            # not asked for
            if r.variant and r.kernel not in built:
                problems.append(f"{r.short} is in the {r.module} SASS but not in build/kernels.json")
        for key, k in built.items():
            module = BuiltKernel.from_json(k).extension
            if module not in dumped:
                problems.append(f"{key[0]}/{key[1]}/{key[2]}/d{key[3]}: module {module} was not disassembled")
                continue
            var = next((v for v in registry.variants(include_canaries=True) if v.name == key[0]), None)
            targets = required_archs(key[0], sorted(mod_archs.get(module, ())))
            for a in targets:
                if (module, key, a) not in have:
                    problems.append(f"{key[0]}/{key[1]}/{key[2]}/d{key[3]} is not in the {module} SASS for {a}")
            if var is not None and var.archs and mod_archs.get(module) and not targets:
                problems.append(f"{key[0]}/{key[1]}/{key[2]}/d{key[3]} targets {', '.join(var.archs)} but the "
                                f"{module} SASS holds only {', '.join(sorted(mod_archs[module]))}")
    main, canaries = split_canaries(rows, NAME)
    if not main and not problems:
        problems.append("no (non-canary) kernels in the SASS")
    main_rows = rows_of(main)
    status = worst([r.status for r in main_rows] + [ERROR] * len(problems) + [FAIL] * len(failures) or [PASS])
    report_arch = REPORT_ARCH if REPORT_ARCH in archs else (max(archs, key=_arch_num) if archs else None)
    data.update(binaries=bins, tools={} if "tools" not in run.raw else run.tools, archs=archs,
                report_arch=report_arch, summary=summary_counts(main), problems=failures + problems, kernels=main,
                canaries=canaries)
    if off_target:
        data.update(off_target=off_target)
    return StageOutcome(status, _reason(status, main_rows, failures, problems, archs), data), rows + off_target, hists


def _arch_num(arch: str) -> int:
    digits = "".join(ch for ch in arch[3:] if ch.isdigit())
    return int(digits) if digits else 0


def _reason(status: str, main: list[SassRow], failures: list[str], problems: list[str], archs: list[str]) -> str:
    if status == PASS:
        t = sum(1 for r in main if r.kind == "tensor")
        hg = sum(1 for r in main if r.kind == "tensor" and r.hgmma)
        with_hgmma = f" ({hg} with HGMMA)" if hg else ""
        return (f"{len(main)} kernel x arch rows on {', '.join(archs)}: {t} tensor rows with HMMA/HGMMA{with_hgmma} "
                f"accumulating in F32 and no LDL/STL, {len(main) - t} scalar rows with no tensor-core math")
    bad = [f"{r.short}: {r.reason}" for r in main if r.status in (FAIL, ERROR)]
    items = problems + failures + bad if status == ERROR else failures + bad + problems
    return f"{len(items)} problem(s); first: {items[0]}" if items else status


def derive(stage_dir: Path, pack_dir: Path) -> StageOutcome:
    return evaluate(pack_dir, stage_dir)[0]


# ---- report ----------------------------------------------------------------------------

def _label(r: SassRow) -> str:
    return (text(f"{r.variant} {r.config} {r.dtype} d{r.head_dim}") if r.variant
            else code(r.symbol, in_table=True))


def _opcode_table(rows: list[SassRow], arch: str) -> list[str]:
    lines = ["| kernel | kind | instr | HMMA | HGMMA | HFMA2.MMA | FFMA | MUFU | LDSM | LDGSTS | LDL/STL | status |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in sorted((r for r in rows if r.arch == arch), key=lambda r: (bool(r.canary), _label(r))):
        status = text(r.status if not r.reason else f"{r.status}: {r.reason}")
        kind = text((r.kind or "?") + (" (canary)" if r.canary else ""))
        counts = [text(n) for n in (r.instructions, r.hmma, r.hgmma, r.hfma2_mma, r.ffma, r.mufu, r.ldsm, r.ldgsts)]
        local = text(f"{r.ldl}/{r.stl}")
        lines.append(f"| {_label(r)} | {kind} | {' | '.join(counts)} | {local} | {status} |")
    return lines


def _first_lines(rows: list[SassRow], arch: str) -> list[str]:
    """The first tensor-core instructions of each tensor kernel on `arch`, collapsed in one <details>."""
    tensor_rows = sorted((r for r in rows if r.arch == arch and r.kind == "tensor"), key=_label)
    if not tensor_rows:
        return []
    # the summary is plain text (the report escapes it); the rest is Markdown
    lines = [f"<details><summary>First tensor-core instructions of {len(tensor_rows)} kernels "
             f"({short(arch, 40)})</summary>", ""]
    for r in tensor_rows:
        lines.append(f"First tensor-core instructions of {_label(r)} ({text(arch)}):")
        lines += fence([f"/*{address}*/ {line}" for address, line in r.first_lines()] or ["(none)"])
    return lines + ["", "</details>"]


def report_md(stage_dir: Path, outcome: StageOutcome) -> str:
    d = SassData.from_json(outcome.data)
    lines = [f"### SASS tensor-core proof — {text(outcome.status)}", "", text(outcome.reason), ""]
    for b in d.binaries:
        lines.append(f"- {code(b.module)}: {code(b.path)} sha256 {code(b.sha256)} "
                     f"(build recorded {code(b.build_sha256)}), dump {code('sass/' + str(b.dump))} "
                     f"({text(b.dump_bytes)} B)")
    for p in (d.problems if "problems" in d.raw else [])[:20]:
        lines.append(f"- **problem:** {text(p)}")
    lines.append("")
    arch = d.report_arch
    rows = rows_of(d.kernels) + rows_of([r for c in canary_records(outcome.data) for r in c.kernels or []])
    if arch:
        lines += [f"Opcode counts on {text(arch)} (exact mnemonics; HFMA2.MMA is CUDA-core code, not tensor math). "
                  "Other archs: `sass/table.csv`.", ""]
        lines += _opcode_table(rows, arch) + [""] + _first_lines(rows, arch)
        # arch-specific targets (sm_90a) hold the Hopper-only variants: their counts are shown too
        extra = sorted(a for a in {r.arch for r in rows} if a != arch and a in sass.ARCH_SPECIFIC_PROOF)
        for a in extra:
            lines += ["", f"Opcode counts on {text(a)} (variants built for arch-specific targets need "
                          f"{'/'.join(sass.ARCH_SPECIFIC_PROOF[a])} here):", ""]
            lines += _opcode_table(rows, a) + [""] + _first_lines(rows, a)
        others = sorted({r.arch for r in rows} - {arch} - set(extra), key=str)
        for a in others:
            rs = [r for r in rows if r.arch == a and not r.canary]
            lines.append(f"- {text(a)}: {sum(r.status == PASS for r in rs)}/{len(rs)} kernel rows pass")
    off_target = rows_of(d.off_target)
    if off_target:
        lines.append(f"- {len(off_target)} row(s) of variants on archs outside their registry `archs` (stubs) "
                     "decide nothing: " + text(", ".join(sorted({r.short for r in off_target}))))
    return "\n".join(lines)
