"""Pure parser of `ptxas -v` output (as printed by `nvcc -Xptxas -v`).

`parse_ptxas(text)` turns one raw log (one compiled object, any number of archs, in any
order: nvcc --threads reorders whole arch blocks) into one `KernelResources` per entry
function x arch. No subprocess, GPU or files here.

Both register-report formats are read:
    CUDA 12:  ptxas info    : Used 32 registers, 4096 bytes smem, 400 bytes cmem[0]
    CUDA 13:  ptxas info    : Used 32 registers, used 1 barriers, 4096 bytes smem, 400 bytes cmem[0]
Lines starting with '#' are comments (the build stage writes the exact command there).

Performance advisories (CUDA 13.0 prints them as `ptxas info : (C7518) Potential Performance Loss: ...`,
at the top of an arch block, before its "N bytes gmem" line) are kept as `PtxasAdvisory`, tagged with
the arch of the block they were printed in and the function they name (some name none: C7508).
Those that void a Hopper design -- wgmma serialised, `setmaxnreg` ignored -- are `voids_design`.
One printed after the last entry of the log has no block: it concerns the entry it names on every arch
that entry was compiled for (`advisories_for`); one that names no entry of the log concerns no kernel
it can be pinned on, and `unattributed_advisories` returns it for the stage to report.

ptxas prints one report per entry function and arch, and one "Function properties" block per function
and arch: a second entry line, register report or properties block for the same (function, arch) is a
`PtxasParseError`, never resolved by taking one of them.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

# Every raw ptxas string this module understands, in one place.
_RE_ENTRY = re.compile(r"^ptxas info\s*: Compiling entry function '(?P<name>[^']+)' for '(?P<arch>sm_\w+)'")
_RE_PROPS = re.compile(r"^ptxas info\s*: Function properties for (?P<name>\S+)")
_RE_FRAME = re.compile(
    r"^\s*(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, (?P<loads>\d+) bytes spill loads")
_RE_USED = re.compile(r"^ptxas info\s*: Used (?P<regs>\d+) registers(?P<rest>.*)$")
_RE_GMEM = re.compile(r"^ptxas info\s*: (?P<gmem>\d+) bytes gmem(?P<rest>.*)$")
_RE_MAXREG = re.compile(
    r"^ptxas info\s*: Overriding maximum register limit \d+ for '(?P<name>[^']+)' with\s+(?P<limit>\d+)")
_RE_DIAG = re.compile(r"^(ptxas|nvcc)\s*(?P<level>warning|error|fatal)\s*:\s*(?P<msg>.*)$")
_RE_ADVISORY = re.compile(r"^ptxas\s*(?:info|warning)\s*: \((?P<code>C\d+)\) (?P<msg>.*)$")
_RE_ADVISORY_FUNCTION = re.compile(r"in (?:the )?function '(?P<name>[^'$]+)(?:\$\d+)?'")
# the extension of a log: nvcc's -DTORCH_EXTENSION_NAME, or the comment python/evpack/triton_aot.py writes
_RE_EXTENSION = re.compile(r"(?:-DTORCH_EXTENSION_NAME=|embedded in evpack extension )(?P<name>\w+)")
# Advisories that void the design of a wgmma kernel. Matched by message (any "wgmma... serialized",
# any "'setmaxnreg' ignored") and by code, so a reworded message with a known code still counts.
# Seen with CUDA 13.0 (tests/fixtures/ptxas): C7509 extern calls, C7511 insufficient registers,
# C7518 / C7520 compiler-inserted WG.DP / WG.AR in a divergent path; C7508 setmaxnreg without a known
# register count at entry, C7504 setmaxnreg with -rdc. C7510 and C7515 are the other serialisation codes
# named for the family. C7517 / C7519 (warpgroup.wait / arrive injected) are notes: recorded, not failed.
WGMMA_SERIALIZED = "wgmma_serialized"
SETMAXNREG_IGNORED = "setmaxnreg_ignored"
NOTE = "note"
_ADVISORY_MESSAGES = ((re.compile(r"wgmma\S* instructions are serialized"), WGMMA_SERIALIZED),
                      (re.compile(r"'setmaxnreg' ignored"), SETMAXNREG_IGNORED))
_ADVISORY_CODES = {"C7509": WGMMA_SERIALIZED, "C7510": WGMMA_SERIALIZED, "C7511": WGMMA_SERIALIZED,
                   "C7515": WGMMA_SERIALIZED, "C7518": WGMMA_SERIALIZED, "C7520": WGMMA_SERIALIZED,
                   "C7504": SETMAXNREG_IGNORED, "C7508": SETMAXNREG_IGNORED}
# Items after "Used N registers," (comma separated).
_USED_ITEMS = {
    "barriers": re.compile(r"^used (\d+) barriers$"),
    "static_smem_bytes": re.compile(r"^(\d+) bytes smem$"),
    "cumulative_stack_bytes": re.compile(r"^(\d+) bytes cumulative stack size$"),
    "cmem": re.compile(r"^(\d+) bytes cmem\[(\d+)\]$"),
    "textures": re.compile(r"^(\d+) textures$"),
    "samplers": re.compile(r"^(\d+) samplers$"),
    "surfaces": re.compile(r"^(\d+) surfaces$"),
}
# Archs a command line builds SASS for: -gencode arch=compute_90,code=sm_90 / code=[sm_80,sm_90] / -arch=sm_90.
_RE_CODE = re.compile(r"(?<![A-Za-z_-])code=\[?([^\s\]]+)\]?")
_RE_ARCH_FLAG = re.compile(r"(?:^|\s)(?:-arch|--gpu-architecture)(?:=|\s+)(sm_\w+)")


class PtxasParseError(ValueError):
    """The log has an entry function whose report is incomplete or contradictory."""


@dataclass(frozen=True)
class KernelResources:
    symbol: str  # mangled entry-function name
    arch: str  # as ptxas names it: sm_90, sm_90a
    registers: int
    static_smem_bytes: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    cumulative_stack_bytes: int | None  # only printed when non-zero
    barriers: int | None  # None: CUDA 12 format does not report barriers
    cmem_bytes: dict[int, int] = field(default_factory=dict)  # bank -> bytes
    gmem_bytes: int | None = None  # per module and arch (the "N bytes gmem" line before the entries)
    max_registers: int | None = None  # from "Overriding maximum register limit" (-maxrregcount)
    report_format: str = "cuda13"  # "cuda13" (reports barriers) or "cuda12"

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes

    def to_row(self) -> dict:
        """The fields as a table row: cmem_bytes the total over the banks, cmem_banks "bank:bytes;..." after them."""
        return asdict(self) | {"cmem_bytes": sum(self.cmem_bytes.values()),
                               "cmem_banks": ";".join(f"{b}:{n}" for b, n in sorted(self.cmem_bytes.items()))}


@dataclass(frozen=True)
class UsedItems:
    """The items after "Used N registers," in one register report (None: not printed)."""

    cmem: dict[int, int]  # bank -> bytes
    unknown: tuple[str, ...]  # items no _USED_ITEMS pattern matches
    barriers: int | None = None  # printed by CUDA 13 only
    static_smem_bytes: int = 0  # not printed when 0
    cumulative_stack_bytes: int | None = None
    textures: int | None = None
    samplers: int | None = None
    surfaces: int | None = None


@dataclass
class _Entry:
    """An entry function's report on one arch while the log is read: who it is, then its register report."""

    symbol: str
    arch: str
    gmem_bytes: int | None
    max_registers: int | None
    registers: int | None = None
    used: UsedItems | None = None


@dataclass(frozen=True)
class PtxasAdvisory:
    code: str  # "C7518"
    kind: str  # WGMMA_SERIALIZED, SETMAXNREG_IGNORED or NOTE
    line: str  # the line as ptxas printed it
    arch: str | None  # the arch block it was printed in (None: no entry followed it, see advisories_for)
    function: str | None  # mangled name it names (a `$N` clone suffix dropped); None when it names none

    @property
    def voids_design(self) -> bool:
        return self.kind != NOTE


def classify_advisory(code: str, message: str) -> str:
    for rx, kind in _ADVISORY_MESSAGES:
        if rx.search(message):
            return kind
    return _ADVISORY_CODES.get(code, NOTE)


@dataclass(frozen=True)
class PtxasLog:
    command: str | None  # the first '# ...' line, without '# ' (the build stage writes one)
    commands: tuple[str, ...]  # every '# ...' line (a fixture may hold several tool runs)
    kernels: tuple[KernelResources, ...]
    diagnostics: tuple[str, ...]  # ptxas/nvcc warning, error and fatal lines, verbatim
    built_archs: tuple[str, ...]  # archs the command builds SASS for (empty if no command)
    advisories: tuple[PtxasAdvisory, ...] = ()  # `ptxas info : (Cnnnn) ...` lines, in order
    extension: str | None = None  # TORCH_EXTENSION_NAME of the first command ("_C", "_canaries")


def archs_in_command(command: str) -> tuple[str, ...]:
    """The real archs (sm_XX) a nvcc/ptxas command line compiles to; PTX-only targets are not compiled by ptxas."""
    archs: list[str] = []
    for m in _RE_CODE.finditer(command):
        for code in m.group(1).split(","):
            code = code.strip().strip('"\'')
            if code.startswith("sm_") and code not in archs:
                archs.append(code)
    for m in _RE_ARCH_FLAG.finditer(command):
        if m.group(1) not in archs:
            archs.append(m.group(1))
    return tuple(archs)


def _parse_used(rest: str) -> UsedItems:
    cmem: dict[int, int] = {}
    unknown: list[str] = []
    counts: dict[str, int] = {}  # _USED_ITEMS key (a UsedItems field) -> the number printed
    for item in (s.strip() for s in rest.split(",")):
        if not item:
            continue
        for key, rx in _USED_ITEMS.items():
            m = rx.match(item)
            if m:
                if key == "cmem":
                    cmem[int(m.group(2))] = cmem.get(int(m.group(2)), 0) + int(m.group(1))
                else:
                    counts[key] = int(m.group(1))
                break
        else:
            unknown.append(item)
    return UsedItems(cmem, tuple(unknown), **counts)


def parse_ptxas(text: str) -> list[KernelResources]:
    return list(parse_ptxas_log(text).kernels)


def parse_ptxas_log(text: str) -> PtxasLog:
    """Parse one raw log. Raises PtxasParseError when an entry lacks its register report or frame line."""
    commands: list[str] = []
    diagnostics: list[str] = []
    # (name, arch) -> partial record, in first-seen order
    entries: dict[tuple[str, str], _Entry] = {}
    props: dict[tuple[str, str], tuple[int, int, int]] = {}
    pending_maxreg: dict[str, int] = {}
    advisories: list[PtxasAdvisory] = []
    pending_adv: list[tuple[str, str, str | None]] = []  # (code, line, function) before their block's entries
    gmem: int | None = None
    arch: str | None = None  # arch of the entry being reported
    current: tuple[str, str] | None = None
    props_for: str | None = None  # function named by the last "Function properties" line
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        if line.startswith("#"):
            commands.append(line[1:].strip())
            continue
        if m := _RE_ADVISORY.match(line.strip()):
            f = _RE_ADVISORY_FUNCTION.search(m["msg"])
            pending_adv.append((m["code"], line.strip(), f["name"] if f else None))
            continue
        if m := _RE_DIAG.match(line.strip()):
            diagnostics.append(line.strip())
            continue
        if m := _RE_MAXREG.match(line):
            pending_maxreg[m["name"]] = int(m["limit"])
            continue
        if m := _RE_GMEM.match(line):
            gmem = int(m["gmem"])
            current, props_for = None, None
            continue
        if m := _RE_ENTRY.match(line):
            arch = m["arch"]
            advisories += [_advisory(c, ln, arch, f) for c, ln, f in pending_adv]
            pending_adv = []
            current = (m["name"], arch)
            if current in entries:
                raise PtxasParseError(f"ptxas: entry {m['name']} reported twice for {arch}")
            entries[current] = _Entry(m["name"], arch, gmem, pending_maxreg.pop(m["name"], None))
            props_for = None
            continue
        if m := _RE_PROPS.match(line):
            props_for = m["name"]
            continue
        if m := _RE_FRAME.match(line):
            if props_for is None or arch is None:
                raise PtxasParseError(f"ptxas: frame line without a 'Function properties' line: {line.strip()!r}")
            if (props_for, arch) in props:
                raise PtxasParseError(f"ptxas: two 'Function properties' blocks for {props_for} on {arch}")
            props[(props_for, arch)] = (int(m["stack"]), int(m["stores"]), int(m["loads"]))
            props_for = None
            continue
        if m := _RE_USED.match(line):
            if current is None:
                continue  # a register report that belongs to no entry (not printed by ptxas 12/13)
            rec = entries[current]
            if rec.registers is not None:
                raise PtxasParseError(f"ptxas: two register reports for {current[0]} on {current[1]}")
            rec.used = _parse_used(m["rest"])
            rec.registers = int(m["regs"])
            continue
        # other lines (Compile time = ..., nvcc notes) carry nothing we need
    kernels = []
    for key, rec in entries.items():
        used = rec.used
        if rec.registers is None or used is None:
            raise PtxasParseError(f"ptxas: no 'Used N registers' line for {key[0]} on {key[1]}")
        if key not in props:
            raise PtxasParseError(f"ptxas: no stack frame / spill line for {key[0]} on {key[1]}")
        stack, stores, loads = props[key]
        kernels.append(KernelResources(
            symbol=rec.symbol, arch=rec.arch, registers=rec.registers,
            static_smem_bytes=used.static_smem_bytes, stack_bytes=stack,
            spill_store_bytes=stores, spill_load_bytes=loads,
            cumulative_stack_bytes=used.cumulative_stack_bytes,
            barriers=used.barriers, cmem_bytes=dict(used.cmem),
            gmem_bytes=rec.gmem_bytes, max_registers=rec.max_registers,
            report_format="cuda13" if used.barriers is not None else "cuda12"))
    advisories += [_advisory(c, ln, None, f) for c, ln, f in pending_adv]
    built: list[str] = []
    for cmd in commands:
        built += [a for a in archs_in_command(cmd) if a not in built]
    ext = _RE_EXTENSION.search(commands[0]) if commands else None
    return PtxasLog(commands[0] if commands else None, tuple(commands), tuple(kernels), tuple(diagnostics),
                    tuple(built), tuple(advisories), ext["name"] if ext else None)


def _advisory(code: str, line: str, arch: str | None, function: str | None) -> PtxasAdvisory:
    msg = line.split(f"({code})", 1)[-1]
    return PtxasAdvisory(code, classify_advisory(code, msg), line, arch, function)


def advisories_for(log: PtxasLog, symbol: str, arch: str) -> list[PtxasAdvisory]:
    """The design-voiding advisories that may concern one entry on one arch: those of its arch block that
    name it, and those of its arch block that name no entry of the block (no function, or a device
    function: ptxas does not say which kernel calls it, so every kernel of the block is suspect); and
    those printed after the log's last entry (no block) that name it, on every arch it was compiled for."""
    entries = {k.symbol for k in log.kernels if k.arch == arch}
    return [a for a in log.advisories if a.voids_design and (
        (a.arch == arch and (a.function == symbol or a.function not in entries))
        or (a.arch is None and a.function == symbol))]


def unattributed_advisories(log: PtxasLog) -> list[PtxasAdvisory]:
    """Design-voiding advisories that `advisories_for` gives to no kernel of the log: printed after its
    last entry, naming no function or one that is no entry of the log (a problem of the log, not dropped)."""
    entries = {k.symbol for k in log.kernels}
    return [a for a in log.advisories if a.voids_design and a.arch is None and a.function not in entries]
