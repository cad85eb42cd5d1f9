"""Ahead-of-time build of the registry's Triton variants: `python -m evpack.triton_aot --out DIR --ext _C ...`.

For every (variant, config, dtype, head dim, arch) this compiles the variant's `fwd_kernel` with
Triton's own compiler for an explicit target (`triton.compile(ASTSource, target=GPUTarget("cuda", cc,
32))`: no GPU needed) and keeps, under DIR/<variant>/:

    <config>_<dtype>_d<D>_<arch>.cubin      the binary (the one the extension embeds and launches)
    <config>_<dtype>_d<D>_<arch>.ptx        Triton's PTX
    <config>_<dtype>_d<D>_<arch>.json       Triton's compile metadata (shared memory, warps, stages, ...)
    <config>_<dtype>_d<D>_<arch>.ptxas.log  the `ptxas -v` report of that very compile (Triton prints it
                                            when asked: knobs.nvidia.dump_ptxas_log), first line a comment
    <config>_<dtype>_d<D>.fatbin            the cubins of every arch, by CUDA's `fatbinary` (uncompressed)

and DIR/manifest.json: the Triton version (installed and required by torch), every file's SHA-256, and
per kernel the symbol, shared-memory bytes, warps and the PTX parameter list. DIR/inputs.json holds what
those files were made from (`inputs`); a later build whose inputs are the same, and whose files still
match the manifest's hashes, keeps them instead of compiling again (the JSON line says "reused": true). The entry symbol is the
C++-mangled name of the CUDA variants' scheme (`evpack::<variant>::fwd_kernel<cfg_<config>, T, D>`), so
the PTXAS, SASS, tensor-proof and sanitizer stages map it to the registry as they map every kernel.

Exit 0 with one JSON line on stdout; exit 2 with one line on stderr when the Triton is not the pinned one,
a kernel does not compile, or its PTX parameters are not the launcher's.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from . import registry
from .binary import sha256_file
from .buildgen import files_digest
from .packfs import write_bytes
from .records.triton import TritonManifest
from .triton_pin import triton_pin

SCHEMA_VERSION = 1
# EVPACK_CUDA_ARCHS entry -> Triton compute capability. Triton compiles capability 90 for sm_90a (wgmma,
# TMA), so that target is the arch-specific one; Triton has no plain-sm_90 target.
TRITON_CAPABILITY = {"80": 80, "86": 86, "89": 89, "90a": 90}
# C++ element type as mangled in the symbol scheme (parsers/symbols.MANGLED_DTYPES) and Triton's pointer type.
MANGLED = {"fp16": "6__half", "bf16": "13__nv_bfloat16"}
TRITON_PTR = {"fp16": "*fp16", "bf16": "*bf16"}
# The kernel interface (csrc/triton/flash_fwd.py docstring): runtime arguments in order, and their Triton types.
POINTERS = ("Q", "K", "V", "O")
INT_ARGS = ("stride_qb8", "stride_qh8", "stride_qm8", "stride_kb8", "stride_kh8", "stride_kn8",
            "stride_vb8", "stride_vh8", "stride_vn8", "stride_ob8", "stride_oh8", "stride_om8", "heads", "seqlen")
TAIL_ARGS = (("sm_scale", "fp32"), ("causal", "i32"))
CONSTEXPRS = ("BLOCK_M", "BLOCK_N", "HEAD_DIM")
# The .param list the launcher (csrc/triton_launch.cpp) passes: the arguments above, then Triton's two
# trailing scratch pointers (global and profile scratch; both null: the kernels must need none).
EXPECTED_PARAMS = ("u64",) * 4 + ("u32",) * 14 + ("f32", "u32") + ("u64", "u64")
_RE_PARAM = re.compile(r"\.param\s+\.(?P<type>[a-z]\d+)\b")


class AotError(Exception):
    """One line: what could not be built."""


def symbol(variant: str, config: str, dtype: str, head_dim: int) -> str:
    """evpack::<variant>::fwd_kernel<evpack::<variant>::cfg_<config>, T, D>(evpack::FwdParams), mangled."""
    cfg = f"cfg_{config}"
    return (f"_ZN6evpack{len(variant)}{variant}10fwd_kernelINS0_{len(cfg)}{cfg}E{MANGLED[dtype]}"
            f"Li{head_dim}EEEvNS_9FwdParamsE")


def ptx_params(ptx: str, name: str) -> tuple[str, ...]:
    """The .param types of entry `name` in `ptx` ('u64', 'u32', 'f32', ...)."""
    m = re.search(rf"\.entry\s+{re.escape(name)}\s*\((?P<params>[^)]*)\)", ptx)
    if not m:
        raise AotError(f"{name}: no .entry of that name in the PTX")
    return tuple(p["type"] for p in _RE_PARAM.finditer(m["params"]))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_kernel(repo: Path, variant: registry.Variant):
    """The variant's `fwd_kernel` (a triton.jit function) from its source file."""
    path = Path(repo) / variant.source
    spec = importlib.util.spec_from_file_location(f"evpack_triton_{variant.name}", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise AotError(f"variant {variant.name}: Triton source {variant.source} not found")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    fn = getattr(module, "fwd_kernel", None)
    if fn is None or not hasattr(fn, "arg_names"):
        raise AotError(f"variant {variant.name}: {variant.source} defines no @triton.jit fwd_kernel")
    want = list(POINTERS + INT_ARGS + tuple(n for n, _ in TAIL_ARGS) + CONSTEXPRS)
    if list(fn.arg_names) != want:
        raise AotError(f"variant {variant.name}: fwd_kernel arguments {list(fn.arg_names)} are not the interface "
                       f"{want} (docs/adding-a-triton-variant.md)")
    return fn


@dataclasses.dataclass(frozen=True)
class Built:
    variant: str
    config: str
    dtype: str
    head_dim: int
    arch: str  # as ptxas names it: sm_80, sm_90a
    symbol: str
    shared: int  # dynamic shared memory bytes the launch must request
    num_warps: int
    num_stages: int
    block_m: int
    block_n: int
    files: dict  # kind -> {"path": relative to the out dir, "sha256": ...}

    @property
    def cubin_path(self) -> str:
        """The cubin's path, relative to the out dir."""
        return self.files["cubin"]["path"]


def compile_one(fn, variant: registry.Variant, cfg: registry.TileConfig, dtype: str, head_dim: int, arch: str,
                out: Path, ext: str) -> Built:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.runtime.jit import JITFunction

    name = symbol(variant.name, cfg.name, dtype, head_dim)
    named = JITFunction(fn.fn, repr=lambda _: name)  # the PTX entry is named by the symbol scheme
    signature = {p: TRITON_PTR[dtype] for p in POINTERS} | {a: "i32" for a in INT_ARGS} | dict(TAIL_ARGS)
    signature |= {c: "constexpr" for c in CONSTEXPRS}
    # q, k, v, o: 16-byte aligned (the binding checks it)
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(len(POINTERS))}
    src = triton.compiler.ASTSource(named, signature, constexprs={"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n,
                                                                  "HEAD_DIM": head_dim}, attrs=attrs)
    target = GPUTarget("cuda", TRITON_CAPABILITY[arch], 32)
    # compiled now, never from Triton's cache (a cache hit runs no ptxas, so prints no report), and the
    # report of the ptxas run that makes this cubin printed (to the captured stdout)
    triton.knobs.compilation.always_compile = True
    triton.knobs.nvidia.dump_ptxas_log = True
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            kernel = triton.compile(src, target=target, options={"num_warps": cfg.warps, "num_stages": cfg.stages})
    except Exception as e:  # noqa: BLE001 (Triton raises many types; the first line says which)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise AotError(f"{variant.name}/{cfg.name}/{dtype}/d{head_dim} for sm_{arch}: triton.compile failed: "
                       f"{type(e).__name__}: {first}") from None
    md = kernel.metadata
    label = f"{variant.name}/{cfg.name}/{dtype}/d{head_dim}"
    if md.name != name:
        raise AotError(f"{label}: Triton named the entry {md.name!r}, not {name!r}")
    for what in ("global_scratch_size", "profile_scratch_size"):
        if getattr(md, what, 0):
            raise AotError(f"{label}: needs {what} {getattr(md, what)} B; the launcher passes no scratch")
    if getattr(md, "num_ctas", 1) != 1 or getattr(md, "launch_cooperative_grid", False):
        raise AotError(f"{label}: clusters or cooperative launch are not supported by the launcher")
    params = ptx_params(kernel.asm["ptx"], name)
    if params != EXPECTED_PARAMS:
        raise AotError(f"{label}: PTX parameters {params} are not the launcher's {EXPECTED_PARAMS}")
    ptxas_log = log.getvalue()
    cubin_arch = re.search(rf"Compiling entry function '{re.escape(name)}' for '(sm_\w+)'", ptxas_log)
    if cubin_arch is None:
        raise AotError(f"{label}: Triton printed no ptxas report for {name} (knobs.nvidia.dump_ptxas_log)")
    sm = cubin_arch[1]
    stem = f"{cfg.name}_{dtype}_d{head_dim}_{sm}"
    vdir = out / variant.name
    vdir.mkdir(parents=True, exist_ok=True)
    meta = {k: v for k, v in md._asdict().items() if isinstance(v, (str, int, float, bool, type(None), list))}
    meta["target"] = {"backend": target.backend, "arch": target.arch, "warp_size": target.warp_size}
    header = (f"# ptxas -v --gpu-name={sm}: run by triton {triton.__version__} (triton.compile) for {name}; "
              f"embedded in evpack extension {ext}\n")
    blobs = {"cubin": kernel.asm["cubin"], "ptx": kernel.asm["ptx"].encode(),
             "json": (json.dumps(meta, indent=1, sort_keys=True) + "\n").encode(),
             "ptxas.log": (header + ptxas_log).encode()}
    files = {}
    for kind, data in blobs.items():
        rel = f"{variant.name}/{stem}.{kind}"
        _write(out / rel, data)
        files[kind] = {"path": rel, "sha256": sha256(data)}
    return Built(variant.name, cfg.name, dtype, head_dim, sm, name, int(md.shared), int(md.num_warps),
                 int(md.num_stages), cfg.block_m, cfg.block_n, files)


def _write(path: Path, data: bytes) -> None:
    write_bytes(path, data)


def fatbinary(tool: str, cubins: list[tuple[str, Path]], dest: Path) -> None:
    """One uncompressed fat binary of (arch, cubin) images: the extension embeds it, cuobjdump reads it."""
    cmd = [tool, f"--create={dest}", "--compress=false",
           *(f"--image3=kind=elf,sm={arch.removeprefix('sm_')},file={path}" for arch, path in cubins)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise AotError(f"fatbinary failed on {dest.name}: {lines[0] if lines else proc.returncode}")


INPUTS = "inputs.json"
# Triton settings this build makes itself (compile_one, main): not inputs
_OWN_SETTINGS = ("TRITON_CACHE_DIR", "TRITON_ALWAYS_COMPILE", "TRITON_DUMP_PTXAS_LOG")
_PACKAGE = Path(__file__).resolve().parent


def inputs(repo: Path, ext: str, variants: list[registry.Variant], archs: list[str], fatbinary_tool: str) -> dict:
    """What a build's files are made from: the arguments, the Triton and torch versions, Triton's settings from
    the environment, the fatbinary tool's bytes, the kernel sources and every Python file of this package (the
    registry's configs, this compiler driver; any edit there builds again)."""
    pin = triton_pin(repo)
    if pin.problem:
        raise AotError(pin.problem)
    tool = shutil.which(fatbinary_tool)
    return {"schema_version": SCHEMA_VERSION, "ext": ext, "variants": [v.name for v in variants], "archs": archs,
            "triton": pin.installed, "torch": pin.torch, "python": sys.version,
            "triton_env": {k: v for k, v in sorted(os.environ.items())
                           if k.startswith("TRITON_") and k not in _OWN_SETTINGS},
            "fatbinary": {"path": tool, "sha256": sha256_file(Path(tool)) if tool else None},
            "sources": files_digest(repo, [Path(repo) / v.source for v in variants] + list(_PACKAGE.rglob("*.py")))}


def reusable(out: Path, wanted: dict) -> dict | None:
    """The manifest in `out` when it was built from `wanted` and every file it names still has its hash."""
    try:
        if json.loads((out / INPUTS).read_text()) != wanted:
            return None
        manifest = json.loads((out / "manifest.json").read_text())
        files = [f for k in manifest["kernels"] for f in k["files"].values()] + manifest["fatbins"]
        if all(sha256((out / f["path"]).read_bytes()) == f["sha256"] for f in files):
            return manifest
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def build(repo: Path, out: Path, ext: str, variants: list[registry.Variant], archs: list[str],
          fatbinary_tool: str) -> dict:
    """Compile every kernel of `variants` for `archs` into `out`; returns the manifest (also written)."""
    pin = triton_pin(repo)
    if pin.problem:
        raise AotError(pin.problem)
    out.mkdir(parents=True, exist_ok=True)
    kernels, fatbins = [], []
    for v in variants:
        fn = load_kernel(repo, v)
        mine = [a for a in archs if a in v.archs and a in TRITON_CAPABILITY]
        if not mine:
            raise AotError(f"variant {v.name}: none of its archs {', '.join(v.archs)} is in {';'.join(archs)}")
        for cfg in v.configs:
            for dtype in v.dtypes:
                for d in v.head_dims:
                    built = [compile_one(fn, v, cfg, dtype, d, a, out, ext) for a in mine]
                    rel = f"{v.name}/{cfg.name}_{dtype}_d{d}.fatbin"
                    fatbinary(fatbinary_tool, [(b.arch, out / b.cubin_path) for b in built], out / rel)
                    data = (out / rel).read_bytes()
                    missing = [b.arch for b in built if (out / b.cubin_path).read_bytes() not in data]
                    if missing:
                        raise AotError(f"{rel}: the fat binary does not hold the {', '.join(missing)} cubin verbatim")
                    fatbins.append({"variant": v.name, "config": cfg.name, "dtype": dtype, "head_dim": d,
                                    "symbol": built[0].symbol, "path": rel, "sha256": sha256(data),
                                    "shared": {b.arch: b.shared for b in built},
                                    "num_warps": built[0].num_warps, "num_stages": built[0].num_stages,
                                    "block_m": cfg.block_m, "block_n": cfg.block_n})
                    kernels += [dataclasses.asdict(b) for b in built]
    import triton

    manifest = {"schema_version": SCHEMA_VERSION, "extension": ext, "triton_version": triton.__version__,
                "triton_required": pin.required, "triton_required_source": pin.source, "torch_version": pin.torch,
                "archs": archs, "kernels": kernels, "fatbins": fatbins}
    _write(out / "manifest.json", (json.dumps(manifest, indent=1) + "\n").encode())
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evpack.triton_aot", description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, default=Path.cwd())
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--ext", required=True, help="the extension that embeds the kernels (_C, _canaries)")
    ap.add_argument("--variants", required=True, help="comma list of registry names (language triton)")
    ap.add_argument("--archs", required=True, help="EVPACK_CUDA_ARCHS entries, comma or ';' separated")
    ap.add_argument("--fatbinary", default="fatbinary")
    args = ap.parse_args(argv)
    os.environ.setdefault("TRITON_CACHE_DIR", str(args.out / "cache"))
    try:
        variants = [registry.get(n.strip(), include_canaries=True) for n in args.variants.split(",") if n.strip()]
        bad = [v.name for v in variants if v.language != "triton"]
        if bad:
            raise AotError(f"not Triton variants: {', '.join(bad)}")
        archs = [a for a in re.split(r"[;,\s]+", args.archs) if a]
        wanted = inputs(args.repo, args.ext, variants, archs, args.fatbinary)
        manifest = reusable(args.out, wanted)
        reused = manifest is not None
        if not reused:
            (args.out / INPUTS).unlink(missing_ok=True)  # written only once the new build is whole
            manifest = build(args.repo, args.out, args.ext, variants, archs, args.fatbinary)
            _write(args.out / INPUTS, (json.dumps(wanted, indent=1) + "\n").encode())
    except (AotError, ValueError, OSError) as e:
        print(f"evpack triton build: {e}", file=sys.stderr)
        return 2
    m = TritonManifest.from_json(manifest)
    print(json.dumps({"kernels": len(m.kernels), "fatbins": len(m.fatbins), "triton_version": m.triton_version,
                      "reused": reused}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
