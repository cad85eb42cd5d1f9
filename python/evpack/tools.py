"""Locating the CUDA command-line tools (PATH, CUDA_HOME, then pip's nvidia-* wheels)."""
from __future__ import annotations

import os
import shutil
import site
import sys
from pathlib import Path


def _wheel_bin_dirs() -> list[Path]:
    roots = [Path(p) for p in site.getsitepackages() + [site.getusersitepackages()]]
    roots += [Path(p) for p in sys.path if p.endswith("site-packages")]
    dirs = []
    for root in roots:
        for sub in ("nvidia/cu13/bin", "nvidia/cuda_nvcc/bin", "nvidia/cu12/bin"):
            d = root / sub
            if d.is_dir() and d not in dirs:
                dirs.append(d)
    return dirs


def cuda_home() -> Path | None:
    """The CUDA toolkit root: $CUDA_HOME, else the folder above the nvcc whose include/ has the runtime."""
    cands = []
    if os.environ.get("CUDA_HOME"):
        cands.append(Path(os.environ["CUDA_HOME"]))
    nvcc = shutil.which("nvcc")
    if nvcc:
        cands.append(Path(nvcc).resolve().parent.parent)
    cands += [Path("/usr/local/cuda")]
    for c in cands:
        if (c / "include" / "cuda_runtime_api.h").exists():
            return c
    return None


def find_tool(name: str) -> str | None:
    """Absolute path of a CUDA tool, or None."""
    found = shutil.which(name)
    if found:
        return found
    home = cuda_home()
    extra = [home / "bin"] if home else []
    for d in extra + _wheel_bin_dirs():
        cand = d / name
        if cand.exists() and os.access(cand, os.X_OK):
            return str(cand)
    return None


def tool_env() -> dict[str, str]:
    """Environment for running cuobjdump: it needs nvdisasm on PATH (also when both come from wheels)."""
    env = dict(os.environ)
    extra = [str(d) for d in _wheel_bin_dirs()]
    home = cuda_home()
    if home:
        extra.append(str(home / "bin"))
    env["PATH"] = os.pathsep.join([env.get("PATH", "")] + extra)
    return env
