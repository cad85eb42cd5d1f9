"""The SASS stage's records. As typed, read-only views (records/view.py): a kernel row (sass/outcome.json -> data
-> kernels, the canaries' kernels, off_target: what the stage's own checks and its report read of a row; the
row is written by stages/sass.kernel_row as JSON), sass/run.json (the disassembled binaries, the tools, the
problems of the run) and the outcome's data that report.md reads. As a frozen dataclass that writes its JSON:
one function's opcode histogram (sass/histogram.json -> functions).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .view import KernelNamed, View, objects


@dataclass(frozen=True)
class TensorLine(View):
    """One of a row's first tensor-core instructions: its address (4+ hex digits) and its text as printed."""

    address: Any = None
    text: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class SassRow(View, KernelNamed):
    """One function of one module on one arch: who it is, its opcode counts and its proof-gate status."""

    module: Any = None
    arch: Any = None
    symbol: Any = None
    variant: Any = None  # None: a function the registry does not know
    config: Any = None
    dtype: Any = None
    head_dim: Any = None
    kind: Any = None  # the registry's kind: tensor / scalar
    canary: Any = None
    instructions: Any = None
    tensor_math: Any = None
    tensor_forms: Any = None
    # counts of parsers.sass.TABLE_OPCODES (lower case) and of the HFMA2.MMA full form
    hmma: Any = None
    hgmma: Any = None
    ffma: Any = None
    hfma2: Any = None
    mufu: Any = None
    ldsm: Any = None
    ldgsts: Any = None
    lds: Any = None
    sts: Any = None
    ldg: Any = None
    stg: Any = None
    ldl: Any = None
    stl: Any = None
    bar: Any = None
    hfma2_mma: Any = None
    first_tensor_lines: Any = None  # [{"address", "text"}]: TensorLine's objects
    status: Any = None
    reason: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)

    def first_lines(self) -> list[tuple[Any, Any]]:
        """(address, text) of the first tensor-core instructions, as the row holds them."""
        return [(q.address, q.text) for q in map(TensorLine.from_json, objects(self.first_tensor_lines))]


def rows_of(value: Any) -> list[SassRow]:
    return [SassRow.from_json(r) for r in objects(value)]


@dataclass(frozen=True)
class SassBinary(View):
    """One binary of sass/run.json -> binaries (and of the outcome's data -> binaries): the shared object the
    build recorded, its digest there and here, and the dump cuobjdump made of it."""

    module: Any = None
    path: Any = None
    build_json: Any = None  # run.json only: build/binary.json, build/binary_canaries.json
    build_sha256: Any = None
    sha256: Any = None
    dump: Any = None
    dump_bytes: Any = None
    command: Any = None
    rc: Any = None
    reused: Any = None
    stderr: Any = None  # the file cuobjdump's stderr is kept in (when it printed any)
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class SassRun(View):
    """sass/run.json: the disassembler the run found, the binaries it disassembled, what went wrong."""

    schema_version: Any = None
    tools: Any = None
    binaries: tuple[SassBinary, ...] = ()
    problems: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class SassData(View):
    """sass/outcome.json -> data: what report.md reads of it (the canaries are read by records/canary.py)."""

    binaries: tuple[SassBinary, ...] = ()
    problems: Any = None
    report_arch: Any = None
    archs: Any = None
    kernels: Any = None
    off_target: Any = None
    raw: Mapping = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class SassHistogram:
    """One function's opcode counts on one arch (base opcodes, and the full forms the tables count)."""

    module: str
    symbol: str
    arch: str
    histogram: dict[str, int]
    full_forms: dict[str, int]

    def to_json(self) -> dict:
        return {"module": self.module, "symbol": self.symbol, "arch": self.arch, "histogram": self.histogram,
                "full_forms": self.full_forms}
