"""Versions of the tools a pack depends on (each None when the tool is absent)."""
from __future__ import annotations

import re
import subprocess

from .tools import find_tool, tool_env

_VERSION_RE = {
    "nvcc": r"release [\d.]+, V([\d.]+)",
    "ptxas": r"release [\d.]+, V([\d.]+)",
    "cuobjdump": r"release [\d.]+, V([\d.]+)",
    "nvdisasm": r"release [\d.]+, V([\d.]+)",
    "compute-sanitizer": r"Version ([\d.]+)",
    "ncu": r"Version ([\d.]+)",
}


def tool_version(name: str) -> str | None:
    path = find_tool(name)
    if not path:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, env=tool_env())
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(_VERSION_RE[name], out.stdout + out.stderr)
    return m.group(1) if m else None


def driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def torch_version() -> str | None:
    try:
        import torch  # noqa: PLC0415
    except Exception:
        return None
    return str(torch.__version__)


def toolchain() -> dict[str, str | None]:
    versions = {name: tool_version(name) for name in _VERSION_RE}
    versions["driver"] = driver_version()
    versions["torch"] = torch_version()
    return versions
