"""Pure parser of `cuobjdump --dump-sass` output: functions per arch, opcode histograms.

Opcodes are matched exactly, never by substring: the base opcode is the mnemonic before
the first '.', so `HFMA2.MMA` (a CUDA-core FMA/move that the scheduler issues on the
tensor pipe, common in plain code) has base `HFMA2` and is not tensor math, while
`HMMA.16816.F32` has base `HMMA`. Full forms of tensor-core opcodes are kept so FLOPs per
instruction can be derived (`mma_shape`).
"""
from __future__ import annotations

import functools
import hashlib
import re
from collections import Counter
from dataclasses import dataclass

# The one mapping of SASS mnemonics the gates and tables use.
TENSOR_MATH_OPCODES = frozenset({
    "HMMA", "HGMMA",  # fp16/bf16/tf32 (warp mma.sync / Hopper warpgroup wgmma)
    "IMMA", "IGMMA", "BMMA", "BGMMA", "DMMA",  # int8/int4, binary, fp64
    "QMMA", "QGMMA", "OMMA",  # fp8 (Ada/Hopper), fp4
    "UTCHMMA", "UTCQMMA", "UTCIMMA", "UTCOMMA",  # Blackwell tcgen05.mma
})
PROOF_OPCODES = ("HMMA", "HGMMA")  # a `tensor` fp16/bf16 variant must contain one of these
# On these archs a tensor variant built only for arch-specific targets (registry `archs`, e.g. "90a")
# must show the warpgroup instruction: an sm_90a-only kernel with HMMA alone is mma.sync, not wgmma.
ARCH_SPECIFIC_PROOF = {"sm_90a": ("HGMMA",)}
# Accumulator (C/D) type of a tensor-core instruction: the field after its shape. Checked on the
# instructions of PROOF_OPCODES: HMMA.16816.F32, HMMA.16816.F32.BF16 and HGMMA.64x128x16.F32(.BF16)
# accumulate in fp32; HMMA.16816.F16 (mma.sync .f16 C/D, wmma with a half accumulator) and
# HGMMA.64x64x16.F16 (wgmma .f16 D) accumulate in fp16 (cuobjdump 13.5, sm_80/sm_90/sm_90a).
ACCUMULATOR_TYPES = {"F32": "fp32", "F16": "fp16"}
REQUIRED_ACCUMULATOR = "F32"  # a `tensor` variant's HMMA/HGMMA must accumulate in fp32
LOCAL_MEMORY_OPCODES = ("LDL", "STL")  # local memory traffic (spills, stack arrays)
# Columns of the per-kernel table: base opcodes counted, plus exact full forms.
TABLE_OPCODES = ("HMMA", "HGMMA", "FFMA", "HFMA2", "MUFU", "LDSM", "LDGSTS", "LDS", "STS", "LDG", "STG",
                 "LDL", "STL", "BAR")
TABLE_FULL_FORMS = ("HFMA2.MMA",)

_RE_ARCH = re.compile(r"^arch = (?P<arch>sm_\w+)\s*$")
_RE_CODE_FOR = re.compile(r"^\s*code for (?P<arch>sm_\w+)\s*$")
_RE_FUNCTION = re.compile(r"^\s*Function : (?P<name>\S+)\s*$")
_RE_INSTR = re.compile(r"^\s*/\*(?P<addr>[0-9a-f]{4,})\*/\s+(?P<body>[^;]*?)\s*;")
_RE_PRED = re.compile(r"^@!?U?P(?:[0-9]+|T)$")


class SassParseError(ValueError):
    """Instructions outside any function, or a dump with no functions."""


@dataclass(frozen=True)
class SassInstruction:
    address: int
    predicate: str | None  # "@!P0", "@UP1", ...
    opcode: str  # full form: "HMMA.16816.F32", "NOP"
    text: str  # the instruction as printed, without the encoding comment: "@P0 BRA 0x2c80 ;"

    @property
    def base(self) -> str:
        return base_opcode(self.opcode)


@dataclass(frozen=True)
class SassFunction:
    symbol: str
    arch: str
    instructions: tuple[SassInstruction, ...]

    @functools.cached_property
    def _opcodes(self) -> Counter:
        """Full opcode -> count, in order of first appearance (a function has thousands of instructions and a
        few dozen opcodes: the counts below fold this one)."""
        return Counter(i.opcode for i in self.instructions)

    def histogram(self) -> Counter:
        """Base opcode -> count."""
        out: Counter = Counter()
        for op, n in self._opcodes.items():
            out[base_opcode(op)] += n
        return out

    def full_forms(self, bases=TENSOR_MATH_OPCODES) -> Counter:
        """Full opcode -> count, for instructions whose base is in `bases`."""
        return Counter({op: n for op, n in self._opcodes.items() if base_opcode(op) in bases})

    def count_full(self, full: str) -> int:
        return self._opcodes.get(full, 0)

    def first(self, bases=TENSOR_MATH_OPCODES, n: int = 3) -> list[SassInstruction]:
        out = []
        for ins in self.instructions:
            if ins.base in bases:
                out.append(ins)
                if len(out) == n:
                    break
        return out


def base_opcode(opcode: str) -> str:
    return opcode.split(".", 1)[0]


def is_tensor_math(opcode: str) -> bool:
    return base_opcode(opcode) in TENSOR_MATH_OPCODES


# The dumps parsed last in this process, by the SHA-256 of their text, least recently used first: `verify` reads the
# same dump for the sass stage and for the incremental keys, and a pack holds two (evpack._C, evpack._canaries).
# A dump of every kernel is some 40 MB of text and about 46 MB parsed, so four are kept at most.
_PARSED: dict[bytes, tuple[SassFunction, ...]] = {}
_PARSED_KEEP = 4


def parse_sass(text: str) -> list[SassFunction]:
    """All functions in a dump, in order; each tagged with the arch of its ELF section."""
    key = hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).digest()
    parsed = _PARSED.pop(key, None)
    if parsed is None:
        parsed = tuple(_parse(text))
        while len(_PARSED) >= _PARSED_KEEP:
            del _PARSED[next(iter(_PARSED))]
    _PARSED[key] = parsed
    return list(parsed)


def _parse(text: str) -> list[SassFunction]:
    functions: list[SassFunction] = []
    arch: str | None = None
    name: str | None = None
    body: list[SassInstruction] = []

    def close() -> None:
        if name is not None:
            functions.append(SassFunction(name, arch or "", tuple(body)))

    for line in text.splitlines():
        head = line.lstrip()[:3]
        if head == "/* ":  # an instruction's encoding half (/* 0x... */): no pattern below can match it
            continue
        if head[:2] == "/*":  # only an instruction can match
            if m := _RE_INSTR.match(line):
                if name is None:
                    raise SassParseError(f"sass: instruction outside a function: {line.strip()!r}")
                body.append(_instruction(m, line))
            continue
        if m := _RE_ARCH.match(line) or _RE_CODE_FOR.match(line):
            if name is not None:
                close()
                name, body = None, []
            arch = m["arch"]
            continue
        if m := _RE_FUNCTION.match(line):
            close()
            if arch is None:
                raise SassParseError(f"sass: function {m['name']} before any 'arch =' line")
            name, body = m["name"], []
            continue
    close()
    return functions


def _instruction(m: re.Match, line: str) -> SassInstruction:
    tokens = m["body"].split()
    pred = None
    if tokens and _RE_PRED.match(tokens[0]):
        pred, tokens = tokens[0], tokens[1:]
    if not tokens:
        raise SassParseError(f"sass: no opcode in {line.strip()!r}")
    return SassInstruction(int(m["addr"], 16), pred, tokens[0], m["body"].strip() + " ;")


def accumulator(opcode: str) -> str | None:
    """The accumulator field of an HMMA/HGMMA full form: 'HMMA.16816.F32.BF16' -> 'F32',
    'HGMMA.64x64x16.F16' -> 'F16'; None for other opcodes or a form without one."""
    parts = opcode.split(".")
    if parts[0] not in PROOF_OPCODES or len(parts) < 3:
        return None
    return parts[2]


def mma_shape(opcode: str) -> tuple[int, int, int] | None:
    """(M, N, K) of one tensor-core instruction from its full form.

    HMMA.16816.F32 -> (16, 8, 16) per warp; HMMA.1688 -> (16, 8, 8); HMMA.884 -> (8, 8, 4);
    HGMMA.64x64x16.F32 -> (64, 64, 16) per warpgroup. FLOPs per instruction = 2*M*N*K.
    """
    parts = opcode.split(".")
    if len(parts) < 2 or parts[0] not in TENSOR_MATH_OPCODES:
        return None
    shape = parts[1]
    if m := re.fullmatch(r"(\d+)x(\d+)x(\d+)", shape):
        return int(m[1]), int(m[2]), int(m[3])
    if not shape.isdigit():
        return None
    if shape.startswith("16"):
        mm, rest = 16, shape[2:]
    elif shape.startswith("8"):
        mm, rest = 8, shape[1:]
    else:
        return None
    if len(rest) < 2:
        return None
    return mm, int(rest[0]), int(rest[1:])
