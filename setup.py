"""Build the evpack CUDA extensions (torch.utils.cpp_extension + ninja).

    python setup.py build_ext --inplace        # -> python/evpack/_C*.so (+ _canaries*.so)

Extensions: evpack._C (registry.VARIANTS) and, with EVPACK_CANARIES=1, evpack._canaries
(registry.CANARIES). Both compile csrc/bindings.cpp, csrc/registry.cpp and the instantiation
files that python/evpack/buildgen.py writes into build/generated/<extension>/.

Environment:
  EVPACK_CUDA_ARCHS   SM versions, ";" or "," separated (default "80;89;90"): one SASS per arch, one fatbin;
                      an extension also gets every arch-specific target its variants declare (registry
                      `archs`, e.g. 90a), where those variants hold their code (stubs elsewhere)
  EVPACK_NVCC_FLAGS   extra nvcc flags, shell-split, appended last (e.g. "-maxrregcount=32")
  EVPACK_VARIANTS     comma list of registry names to build (default: all); canary names select canaries
  EVPACK_CANARIES=1   also build evpack._canaries
  PYTORCH_NVCC        compiler in torch's ninja rules; default csrc/tools/nvcc-log, which keeps the
                      `-Xptxas -v` report of every object as <object>.ptxas.log
  EVPACK_REAL_NVCC    the nvcc that nvcc-log runs (default <CUDA_HOME>/bin/nvcc)
  MAX_JOBS            parallel compile jobs (read by torch)

The CPU build of torch has cpp_extension.CUDA_HOME = None and no c10/cuda headers: CUDA_HOME is
set from evpack.tools.cuda_home(), .cu files go through CppExtension (BuildExtension hands them to
nvcc), and the extension links cudart itself. Nothing is imported from torch, and nothing is
generated, unless a build command runs (`python setup.py --name` stays cheap).
"""
from __future__ import annotations

import importlib.util
import os
import shlex
import sys
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
os.chdir(ROOT)  # sources are given relative to the repository root

# Commands that compile the kernels. An editable install (`pip install -e .`, what nox and development
# use) installs the Python package only: the evidence run's build stage compiles the extension in place
# (python/evpack/_C*.so), where the editable package finds it.
BUILD_COMMANDS = {"build", "build_ext", "install", "bdist", "bdist_wheel", "bdist_egg"}
DEFAULT_ARCHS = "80;89;90"
NVCC_FLAGS = ["-std=c++17", "-O3", "--use_fast_math", "-lineinfo", "-Xptxas", "-v", "-Xcompiler", "-fvisibility=hidden"]
CXX_FLAGS = ["-O3", "-fvisibility=hidden"]  # C++ standard: torch's default (its headers lean on C++20)


def _load(name: str):
    """python/evpack/<name>.py by path: the package's __init__ may import torch or the extension."""
    spec = importlib.util.spec_from_file_location(f"_evpack_setup_{name}", ROOT / "python" / "evpack" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def _arch_flags(spec: str) -> list[str]:
    archs = [a.strip().lower().removeprefix("sm_").replace(".", "") for a in spec.replace(",", ";").split(";")]
    archs = [a for a in archs if a]
    if not archs or not all(a.isdigit() for a in archs):
        raise SystemExit(f"EVPACK_CUDA_ARCHS: expected SM versions such as '80;89;90', got {spec!r}")
    return [f"-gencode=arch=compute_{a},code=sm_{a}" for a in dict.fromkeys(archs)]


def _declared_arch_flags(group, base: list[str]) -> list[str]:
    """base plus the targets the group's variants declare in registry `archs` (e.g. "90a"), once each."""
    extra = [f"-gencode=arch=compute_{a},code=sm_{a}" for v in group for a in getattr(v, "archs", ())]
    return base + [f for f in dict.fromkeys(extra) if f not in base]


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


def _extensions_and_cmdclass():
    registry, buildgen, tools = _load("registry"), _load("buildgen"), _load("tools")
    home = tools.cuda_home()
    if home is None:
        raise SystemExit("CUDA toolkit not found: set CUDA_HOME or put nvcc on PATH")

    import torch.utils.cpp_extension as cpp  # noqa: PLC0415 (only when building)

    if cpp.CUDA_HOME is None:
        cpp.CUDA_HOME = str(home)
    os.environ.setdefault("PYTORCH_NVCC", str(ROOT / "csrc" / "tools" / "nvcc-log"))
    os.environ.setdefault("EVPACK_REAL_NVCC", str(Path(cpp.CUDA_HOME) / "bin" / "nvcc"))

    arch_flags = _arch_flags(os.environ.get("EVPACK_CUDA_ARCHS", DEFAULT_ARCHS))
    user_flags = shlex.split(os.environ.get("EVPACK_NVCC_FLAGS", ""))
    lib_dir = Path(cpp.CUDA_HOME) / "lib64"
    # rpath to cudart and to torch's libraries: `import evpack._C` works without `import torch` first
    # (the build stage lists kernels that way).
    rpaths = [lib_dir, *map(Path, cpp.library_paths())]

    variants, canaries = _select(registry)
    groups = {"_C": variants}
    if os.environ.get("EVPACK_CANARIES", "") == "1":
        groups["_canaries"] = canaries

    generated: dict[str, tuple[Path, list]] = {}
    extensions = []
    for ext, group in groups.items():
        out_dir = Path("build") / "generated" / ext
        generated[ext] = (out_dir, group)
        instantiations = [(out_dir / name).as_posix() for name, _ in buildgen.plan(group)]
        extensions.append(
            cpp.CppExtension(
                name=f"evpack.{ext}",
                sources=["csrc/bindings.cpp", "csrc/registry.cpp", *instantiations],
                include_dirs=[str(ROOT / "csrc" / "include"), str(ROOT), str(Path(cpp.CUDA_HOME) / "include")],
                library_dirs=[str(lib_dir)],
                libraries=["cudart"],
                extra_link_args=[f"-Wl,-rpath,{d}" for d in rpaths],
                extra_compile_args={"cxx": list(CXX_FLAGS),
                                    "nvcc": NVCC_FLAGS + _declared_arch_flags(group, arch_flags) + user_flags},
            )
        )

    class BuildExt(cpp.BuildExtension):
        """Writes the instantiation files first; one build_temp per extension (bindings.cpp is
        compiled once per extension with a different TORCH_EXTENSION_NAME)."""

        def run(self):
            for out_dir, group in generated.values():
                buildgen.generate(ROOT, ROOT / out_dir, group)
            super().run()

        def build_extension(self, ext):
            base = self.build_temp
            self.build_temp = os.path.join(base, ext.name.rsplit(".", 1)[-1])
            try:
                super().build_extension(ext)
            finally:
                self.build_temp = base

    return extensions, {"build_ext": BuildExt.with_options(use_ninja=True)}


def main() -> None:
    ext_modules, cmdclass = [], {}
    if BUILD_COMMANDS.intersection(sys.argv[1:]):
        ext_modules, cmdclass = _extensions_and_cmdclass()
    setup(
        name="evpack",
        version="0.1.0",
        package_dir={"": "python"},
        packages=find_packages("python"),
        package_data={"evpack": ["dispatch_table.json"]},
        ext_modules=ext_modules,
        cmdclass=cmdclass,
        zip_safe=False,
    )


if __name__ == "__main__":
    main()
