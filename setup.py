"""Build the evpack CUDA extensions (torch.utils.cpp_extension + ninja).

    python setup.py build_ext --inplace        # -> python/evpack/_C*.so (+ _canaries*.so)

Extensions: evpack._C (registry.VARIANTS) and, with EVPACK_CANARIES=1, evpack._canaries
(registry.CANARIES). Both compile csrc/bindings.cpp, csrc/registry.cpp, csrc/triton_launch.cpp and the
instantiation files that python/evpack/buildgen.py writes into build/generated/<extension>/. Triton
variants (registry language "triton") are compiled first, ahead of time, by python -m evpack.triton_aot
into build/triton/<extension>/ (cubin, PTX, metadata, ptxas report, one fat binary per kernel); the
registration files python/evpack/triton_cpp.py writes embed those fat binaries in the extension.

Environment:
  EVPACK_CUDA_ARCHS   SM versions, ";" or "," separated (default "80;89;90;90a"): one SASS per arch, one
                      fatbin. Arch-specific targets ("90a": -gencode arch=compute_90a,code=sm_90a) reach only
                      the variants that name them (registry Variant.archs), which are compiled in objects
                      of their own with just those targets; every other variant gets the plain archs. A
                      variant none of whose archs is listed, or that the nvcc cannot build, is skipped
                      with the reason (printed, and in build/generated/<extension>/skipped.json).
  EVPACK_NVCC_FLAGS   extra nvcc flags, shell-split, appended last (e.g. "-maxrregcount=32")
  EVPACK_VARIANTS     comma list of registry names to build (default: all); canary names select canaries
  EVPACK_CANARIES=1   also build evpack._canaries
  PYTORCH_NVCC        compiler in torch's ninja rules; default csrc/tools/nvcc-log, which keeps the
                      `-Xptxas -v` report of every object as <object>.ptxas.log
  EVPACK_REAL_NVCC    the nvcc that nvcc-log runs (default <CUDA_HOME>/bin/nvcc)
  EVPACK_COMPILER_CACHE  auto (default: ccache, else sccache, when on PATH), ccache, sccache or none: the cache
                      nvcc and the host compiler run under (through build/tools/wrap/; never required)
  EVPACK_NINJA        the ninja to run (default: the one build/ninja.json records, else the first on PATH)
  MAX_JOBS            parallel compile jobs (read by torch)

One ninja and the compiler cache: python/evpack/buildtools.py says why and how; what a build ran is
written to build/tools/build_tools.json (the build stage keeps it in the pack).

The CPU build of torch has cpp_extension.CUDA_HOME = None and no c10/cuda headers: CUDA_HOME is
set from evpack.tools.cuda_home(), .cu files go through CppExtension (BuildExtension hands them to
nvcc), and the extension links cudart itself. Nothing is imported from torch, and nothing is
generated, unless a build command runs (`python setup.py --name` stays cheap).
"""
from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
os.chdir(ROOT)  # sources are given relative to the repository root

# Commands that compile the kernels. An editable install (`pip install -e .`, what nox and development
# use) installs the Python package only: the evidence run's build stage compiles the extension in place
# (python/evpack/_C*.so), where the editable package finds it.
BUILD_COMMANDS = {"build", "build_ext", "install", "bdist", "bdist_wheel", "bdist_egg"}
NVCC_FLAGS = ["-std=c++17", "-O3", "--use_fast_math", "-lineinfo", "-Xptxas", "-v", "-Xcompiler", "-fvisibility=hidden"]
CXX_FLAGS = ["-O3", "-fvisibility=hidden"]  # C++ standard: torch's default (its headers lean on C++20)


def _load(name: str):
    """python/evpack/<name>.py by path: the package's __init__ may import torch or the extension."""
    spec = importlib.util.spec_from_file_location(f"_evpack_setup_{name}", ROOT / "python" / "evpack" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def _archs(buildgen) -> list[str]:
    try:
        return buildgen.parse_archs(os.environ.get("EVPACK_CUDA_ARCHS", buildgen.DEFAULT_ARCHS))
    except ValueError as e:
        raise SystemExit(str(e)) from None


def _nvcc_cannot_build(nvcc: str, arch: str, buildgen) -> str | None:
    """None if `nvcc` compiles an empty kernel for `arch`, else the reason (its first error line)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.cu"
        src.write_text("__global__ void probe() {}\n")
        try:
            proc = subprocess.run([nvcc, "-cubin", *buildgen.gencode_flags([arch]), str(src), "-o",
                                   str(Path(tmp) / "probe.cubin")], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"{nvcc} could not be run: {e}"
    if proc.returncode == 0:
        return None
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return f"{nvcc} cannot build sm_{arch}: {lines[0] if lines else f'exit {proc.returncode}'}"


def _split_by_arch(variants: list, archs: list[str], buildgen, nvcc: str) -> tuple[list, list, list]:
    """(plain variants, [(arch-specific variant, its archs)], [(skipped variant name, reason)])."""
    plain, specific, skipped = [], [], []
    for v in variants:
        if not v.archs:
            plain.append(v)
            continue
        mine = buildgen.variant_archs(v, archs)
        if not mine:
            skipped.append((v.name, f"needs {' or '.join('sm_' + a for a in v.archs)}, which EVPACK_CUDA_ARCHS "
                                    f"({';'.join(archs)}) does not list"))
            continue
        reason = next((r for r in (_nvcc_cannot_build(nvcc, a, buildgen) for a in mine) if r), None)
        if reason:
            skipped.append((v.name, reason))
            continue
        specific.append((v, mine))
    return plain, specific, skipped


def _select(registry) -> tuple[list, list]:
    """(variants, canaries) to build, after EVPACK_VARIANTS."""
    variants, canaries = list(registry.VARIANTS), list(registry.CANARIES)
    wanted = [n.strip() for n in os.environ.get("EVPACK_VARIANTS", "").split(",") if n.strip()]
    if wanted:
        known = [v.name for v in variants + canaries]
        unknown = [n for n in wanted if n not in known]
        if unknown:
            raise SystemExit(f"EVPACK_VARIANTS: unknown {', '.join(unknown)} (known: {', '.join(known)})")
        variants = [v for v in variants if v.name in wanted]
        if any(c.name in wanted for c in canaries):
            canaries = [c for c in canaries if c.name in wanted]
    return variants, canaries


def _split_triton(group: list, archs: list[str], buildgen) -> tuple[list, list, list]:
    """(CUDA variants, [(Triton variant, its archs)], [(skipped Triton variant, reason)]). A Triton variant is
    built for the archs of its registry `archs` that EVPACK_CUDA_ARCHS lists; with no Triton installed it is
    left out with the reason; a Triton other than the one torch requires stops the build (one line)."""
    cuda = [v for v in group if v.language != "triton"]
    triton, skipped = [], []
    wanted = [v for v in group if v.language == "triton"]
    if not wanted:
        return cuda, triton, skipped
    pin = _load("triton_pin").triton_pin(ROOT)
    if pin.installed is not None and pin.problem:
        raise SystemExit(f"evpack build: {pin.problem}")
    for v in wanted:
        mine = buildgen.variant_archs(v, archs)
        if pin.installed is None:
            skipped.append((v.name, pin.problem))
        elif not mine:
            skipped.append((v.name, f"needs {' or '.join('sm_' + a for a in v.archs)}, which EVPACK_CUDA_ARCHS "
                                    f"({';'.join(archs)}) does not list"))
        else:
            triton.append((v, mine))
    return cuda, triton, skipped


def _triton_aot(ext: str, variants: list, out_dir: Path, fatbinary: str) -> dict:
    """Compile `variants` (Triton) ahead of time into out_dir (python -m evpack.triton_aot); the manifest."""
    archs = sorted({a for _, mine in variants for a in mine})
    cmd = [sys.executable, "-m", "evpack.triton_aot", "--repo", str(ROOT), "--out", str(out_dir), "--ext", ext,
           "--variants", ",".join(v.name for v, _ in variants), "--archs", ",".join(archs), "--fatbinary", fatbinary]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "python"),
                                                                     os.environ.get("PYTHONPATH")])))
    what = f"triton {', '.join(v.name for v, _ in variants)} for {', '.join(archs)} ({ext})"
    print(f"evpack build: {what}", flush=True)
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise SystemExit(lines[-1] if lines else f"evpack build: triton AOT build exited {proc.returncode}")
    reused = json.loads(proc.stdout.strip().splitlines()[-1]).get("reused") is True  # its one JSON line
    print(f"evpack build: {what}: {'unchanged, kept' if reused else 'compiled'} ({time.monotonic() - start:.1f} s)",
          flush=True)
    return json.loads((out_dir / "manifest.json").read_text())


def _build_tools(buildtools):
    """The ninja this build runs (first on its PATH from here on) and the compiler cache it may use."""
    build_dir = ROOT / "build"
    try:
        ninja, ninja_why = buildtools.choose_ninja(build_dir, os.environ)
        cache, cache_why = buildtools.choose_compiler_cache(os.environ)
    except buildtools.BuildToolError as e:
        raise SystemExit(f"evpack build: {e}") from None
    if ninja is not None:
        os.environ["PATH"] = str(buildtools.use_ninja(build_dir, ninja)) + os.pathsep + os.environ.get("PATH", "")
    # this build decides on the cache (torch would otherwise prepend a ccache/sccache it finds on PATH)
    os.environ["TORCH_NO_COMPILER_WRAPPER"] = "1"
    return build_dir, ninja, ninja_why, cache, cache_why


def _extensions_and_cmdclass():
    registry, buildgen, tools, buildtools = _load("registry"), _load("buildgen"), _load("tools"), _load("buildtools")
    home = tools.cuda_home()
    if home is None:
        raise SystemExit("CUDA toolkit not found: set CUDA_HOME or put nvcc on PATH")
    build_dir, ninja, ninja_why, cache, cache_why = _build_tools(buildtools)

    import torch.utils.cpp_extension as cpp  # noqa: PLC0415 (only when building)

    if cpp.CUDA_HOME is None:
        cpp.CUDA_HOME = str(home)
    os.environ.setdefault("PYTORCH_NVCC", str(ROOT / "csrc" / "tools" / "nvcc-log"))
    os.environ.setdefault("EVPACK_REAL_NVCC", str(Path(cpp.CUDA_HOME) / "bin" / "nvcc"))
    real_nvcc = os.environ["EVPACK_REAL_NVCC"]
    real_cxx = shutil.which(os.environ.get("CXX") or "c++")

    archs = _archs(buildgen)
    plain_archs = [a for a in archs if not buildgen.is_arch_specific(a)] or archs
    extra_flags = shlex.split(os.environ.get("EVPACK_NVCC_FLAGS", ""))
    nvcc_flags = NVCC_FLAGS + buildgen.gencode_flags(plain_archs) + extra_flags
    lib_dir = Path(cpp.CUDA_HOME) / "lib64"
    # rpath to cudart and to torch's libraries: `import evpack._C` works without `import torch` first
    # (the build stage lists kernels that way).
    rpaths = [lib_dir, *map(Path, cpp.library_paths())]
    include_dirs = [str(ROOT / "csrc" / "include"), str(ROOT), str(Path(cpp.CUDA_HOME) / "include")]

    variants, canaries = _select(registry)
    groups = {"_C": variants}
    if os.environ.get("EVPACK_CANARIES", "") == "1":
        groups["_canaries"] = canaries

    triton_cpp = _load("triton_cpp")
    triton_builds: dict[str, list] = {}  # ext -> [(Triton variant, archs)]
    generated: dict[str, tuple[Path, list]] = {}
    own_objects: dict[str, list[tuple[str, tuple[str, ...]]]] = {}  # ext -> [(instantiation file, archs)]
    extensions = []
    for ext, group in groups.items():
        out_dir = Path("build") / "generated" / ext
        cuda_group, triton_builds[ext], triton_skipped = _split_triton(group, archs, buildgen)
        plain, specific, skipped = _split_by_arch(cuda_group, archs, buildgen, real_nvcc)
        skipped += triton_skipped
        for name, reason in skipped:
            print(f"evpack build: skipping variant {name}: {reason}", file=sys.stderr, flush=True)
        generated[ext] = (out_dir, plain + [v for v, _ in specific], skipped)
        instantiations = [(out_dir / name).as_posix() for name, _ in buildgen.plan(plain)]
        own_objects[ext] = [((out_dir / name).as_posix(), mine) for v, mine in specific
                            for name, _ in buildgen.plan([v])]
        extensions.append(
            cpp.CppExtension(
                name=f"evpack.{ext}",
                sources=["csrc/bindings.cpp", "csrc/registry.cpp", "csrc/triton_launch.cpp", *instantiations,
                         *[(out_dir / triton_cpp.file_name(v.name, dt, d)).as_posix()
                           for v, _ in triton_builds[ext] for dt in v.dtypes for d in v.head_dims]],
                include_dirs=include_dirs,
                library_dirs=[str(lib_dir)],
                libraries=["cudart"],
                extra_link_args=[f"-Wl,-rpath,{d}" for d in rpaths],
                extra_compile_args={"cxx": list(CXX_FLAGS), "nvcc": list(nvcc_flags)},
                depends=[src for src, _ in own_objects[ext]],
            )
        )
    common = list(getattr(cpp, "COMMON_NVCC_FLAGS", []))  # torch's own nvcc flags (no half operators, ...)

    def own_object(src: str, build_temp: str) -> Path:
        return Path(build_temp) / (src[: -len(".cu")] + ".o")

    def compile_own(src: str, mine: tuple[str, ...], build_temp: str, ext_name: str) -> str:
        """nvcc (through nvcc-log, so its PTXAS report is kept) for one arch-specific object. The extension's
        name is defined as torch's rules define it, so the PTXAS report says which extension it belongs to."""
        obj = own_object(src, build_temp)
        obj.parent.mkdir(parents=True, exist_ok=True)
        cmd = [os.environ["PYTORCH_NVCC"], "-c", src, "-o", str(obj), *common, f"-DTORCH_EXTENSION_NAME={ext_name}",
               *NVCC_FLAGS,
               *buildgen.gencode_flags(mine), "-Xcompiler", "-fPIC", *[f"-I{d}" for d in include_dirs],
               *extra_flags]
        stamp = obj.with_suffix(".o.cmd")
        fresh = (obj.exists() and stamp.exists() and stamp.read_text() == json.dumps(cmd)
                 and obj.stat().st_mtime_ns >= Path(src).stat().st_mtime_ns)
        if not fresh:
            what = f"nvcc {src} for {', '.join('sm_' + a for a in mine)}"
            print(f"evpack build: {what}", flush=True)
            start = time.monotonic()
            proc = subprocess.run(cmd, capture_output=True, text=True)
            sys.stdout.write(proc.stderr)
            if proc.returncode != 0:
                raise SystemExit(f"evpack build: nvcc failed on {src} (exit {proc.returncode})")
            stamp.write_text(json.dumps(cmd))
            print(f"evpack build: {what}: compiled ({time.monotonic() - start:.1f} s)", flush=True)
        return str(obj)

    class BuildExt(cpp.BuildExtension):
        """Writes the instantiation files first; one build_temp per extension (bindings.cpp is
        compiled once per extension with a different TORCH_EXTENSION_NAME); arch-specific variants
        are compiled here, with their own targets, and linked in as extra objects.

        The extensions build at the same time (one thread, one ninja each, unless --parallel says
        otherwise): each ends with one long object (the wgmma instantiations), and the two compile side
        by side instead of one after the other. Each thread sees its own build_temp. The arch-specific
        objects compile beside the extension's ninja; its link waits for them."""

        _mine = threading.local()

        @property
        def build_temp(self):
            return getattr(self._mine, "build_temp", None) or self.__dict__.get("_build_temp")

        @build_temp.setter
        def build_temp(self, value):
            self.__dict__["_build_temp"] = value

        def finalize_options(self):
            super().finalize_options()
            if not self.parallel:
                self.parallel = max(1, len(self.extensions or ()))

        def build_extensions(self):
            link = self.compiler.link_shared_object

            def link_after_own_objects(*args, **kwargs):
                for future in getattr(self._mine, "own", ()):  # this thread's extension's arch-specific objects
                    future.result()
                return link(*args, **kwargs)

            self.compiler.link_shared_object = link_after_own_objects
            super().build_extensions()

        def run(self):
            for out_dir, group, skipped in generated.values():
                buildgen.generate(ROOT, ROOT / out_dir, group)
                note = ROOT / out_dir / "skipped.json"
                text = json.dumps([{"variant": n, "reason": r} for n, r in skipped], indent=1) + "\n"
                if not note.exists() or note.read_text() != text:
                    note.write_text(text)
            aot = {ext: tvars for ext, tvars in triton_builds.items() if tvars}
            with ThreadPoolExecutor(max_workers=max(1, len(aot))) as pool:  # the extensions' builds side by side
                manifests = dict(zip(aot, pool.map(
                    lambda ext: _triton_aot(ext, aot[ext], ROOT / "build" / "triton" / ext,
                                            str(Path(cpp.CUDA_HOME) / "bin" / "fatbinary")), aot), strict=True))
            for ext, manifest in manifests.items():
                out_dir = ROOT / "build" / "triton" / ext
                for name, text in triton_cpp.plan(manifest, out_dir):
                    path = ROOT / generated[ext][0] / name
                    if not path.exists() or path.read_text() != text:
                        path.write_text(text)
            (build_dir / "tools" / buildtools.RECORD).unlink(missing_ok=True)  # written again after this build
            session = buildtools.CacheSession(cache, build_dir)
            session.start(os.environ)  # a cache that cannot start leaves session.tool None: a plain compile
            try:
                wrappers = buildtools.write_wrappers(build_dir, session.tool, nvcc=real_nvcc, cxx=real_cxx or "c++")
            except buildtools.BuildToolError as e:
                session.finish(os.environ)
                raise SystemExit(f"evpack build: {e}") from None
            os.environ["EVPACK_REAL_NVCC"] = wrappers["nvcc"]  # nvcc-log runs this, which runs the real nvcc
            if real_cxx:
                os.environ["CXX"] = wrappers["c++"]
            try:
                super().run()
            finally:
                counts = session.finish(os.environ)
            buildtools.write_record(build_dir, ninja=ninja, ninja_why=ninja_why, cache=session.tool,
                                    cache_why=cache_why, counts=counts, problem=session.problem)

        def build_extension(self, ext):
            key = ext.name.rsplit(".", 1)[-1]
            self._mine.build_temp = os.path.join(self.build_temp, key)  # this thread's (extension's) own
            try:
                jobs = max(1, int(os.environ.get("MAX_JOBS", "") or os.cpu_count() or 1))
                with ThreadPoolExecutor(max_workers=jobs) as pool:
                    temp = self.build_temp
                    self._mine.own = [pool.submit(compile_own, src, mine, temp, key) for src, mine in own_objects[key]]
                    objs = [str(own_object(src, temp)) for src, _ in own_objects[key]]
                    ext.extra_objects = [o for o in (ext.extra_objects or []) if o not in objs] + objs
                    super().build_extension(ext)
                    for future in self._mine.own:
                        future.result()
                # The objects this build linked, so that PTXAS logs left by an earlier build with other
                # settings (other variants, other archs) are never taken for this build's.
                linked = self.compiler.object_filenames(ext.sources, output_dir=self.build_temp) + objs
                manifest = ROOT / "build" / "generated" / key / "objects.json"
                manifest.write_text(json.dumps(sorted(str(Path(o).resolve()) for o in linked), indent=1) + "\n")
            finally:
                self._mine.build_temp = None
                self._mine.own = ()

    return extensions, {"build_ext": BuildExt.with_options(use_ninja=True)}


def main() -> None:
    ext_modules, cmdclass = [], {}
    if BUILD_COMMANDS.intersection(sys.argv[1:]):
        refused = _load("buildguard").refusal(ROOT)  # build outputs tracked by git would be reused
        if refused:
            raise SystemExit(f"evpack {refused}")
        ext_modules, cmdclass = _extensions_and_cmdclass()
    setup(
        name="evpack",
        version=_load("version").__version__,
        package_dir={"": "python"},
        packages=find_packages("python"),
        package_data={"evpack": ["dispatch_table.json"]},
        ext_modules=ext_modules,
        cmdclass=cmdclass,
        zip_safe=False,
    )


if __name__ == "__main__":
    main()
