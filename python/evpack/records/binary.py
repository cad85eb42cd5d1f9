"""<stage>/binary.json (and build/binary_canaries.json): which shared object a build produced, or a stage loaded or
disassembled (evpack.binary.loaded_binary), and its SHA-256."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .view import View

DEFAULT_MODULE = "evpack._C"  # records written before the canary extension name no module


@dataclass(frozen=True)
class BinaryRecord(View):
    module: Any
    path: Any
    sha256: Any
    raw: Mapping

    @property
    def module_name(self) -> Any:
        return self.module if "module" in self.raw else DEFAULT_MODULE
