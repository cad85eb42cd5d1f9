"""Which Triton the build must use: the version the installed torch requires.

torch's own metadata names it (`Requires-Dist: triton==3.7.1; platform_system == "Linux" ...` in the
torch 2.13.0 wheels on PyPI; the GPU machine's torch 2.11.0+cu130 names triton 3.6.0). A CPU build of
torch (2.13.0+cpu) names none: then the pin is pyproject.toml's `cpu` extra, which holds the triton that
its torch pin requires, and it applies only when the installed torch is that torch. Nothing here imports
torch or triton (importlib.metadata reads the installed distributions).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import tomllib

_PIN = re.compile(r"^\s*(?P<name>[A-Za-z0-9_.-]+)\s*==\s*(?P<version>[^;\s]+)")


@dataclass(frozen=True)
class TritonPin:
    installed: str | None  # triton's version, None when not installed
    required: str | None  # the version torch requires, None when it cannot be told
    torch: str | None  # the installed torch's version
    source: str  # where `required` comes from, in words

    @property
    def problem(self) -> str:
        """'' when the installed triton is the required one, else one line saying what is wrong."""
        if self.installed is None:
            return f"triton is not installed (torch {self.torch} requires triton=={self.required})"
        if self.required is None:
            return f"cannot tell which triton torch {self.torch} requires ({self.source})"
        if self.installed != self.required:
            return (f"triton {self.installed} is installed but torch {self.torch} requires triton=={self.required} "
                    f"({self.source}): install triton=={self.required}")
        return ""


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def pin_in(requirements, name: str) -> str | None:
    """The exact version `name==X` pinned among requirement strings (markers ignored), else None."""
    for req in requirements or ():
        m = _PIN.match(req)
        if m and m["name"].lower().replace("_", "-") == name:
            return m["version"]
    return None


def project_pins(repo: Path) -> tuple[str | None, str | None]:
    """(torch pin, triton pin) of pyproject.toml's `cpu` extra."""
    try:
        cpu = tomllib.loads((Path(repo) / "pyproject.toml").read_text(encoding="utf-8"))[
            "project"]["optional-dependencies"]["cpu"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return None, None
    return pin_in(cpu, "torch"), pin_in(cpu, "triton")


def triton_pin(repo: Path) -> TritonPin:
    torch_version = _version("torch")
    installed = _version("triton")
    if torch_version is None:
        return TritonPin(installed, None, None, "torch is not installed")
    required = pin_in(metadata.requires("torch"), "triton")
    if required is not None:
        return TritonPin(installed, required, torch_version, f"torch {torch_version}'s Requires-Dist")
    torch_pin, triton_req = project_pins(repo)
    base = torch_version.split("+", 1)[0]
    if torch_pin is not None and triton_req is not None and base == torch_pin:
        return TritonPin(installed, triton_req, torch_version,
                         f"pyproject.toml cpu extra: triton=={triton_req} is what torch=={torch_pin} requires")
    return TritonPin(installed, None, torch_version,
                     f"torch {torch_version}'s metadata names no triton and pyproject.toml pins torch {torch_pin}")
