"""Pure parser of compute-sanitizer logs (memcheck, racecheck, initcheck, synccheck).

A cell passes only with BOTH a zero exit status and a parsed summary of 0
errors / 0 hazards (and 0 leaked bytes for memcheck's leak check). A missing
summary is `error`, never `pass`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
# Raw strings as the tool prints them (one mapping).
_ERROR_SUMMARY = re.compile(r"^========= ERROR SUMMARY: (\d+) errors?\s*$", re.M)
_RACE_SUMMARY = re.compile(r"^========= RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)",
                           re.M)
_LEAK_SUMMARY = re.compile(r"^========= LEAK SUMMARY: (\d+) bytes leaked in (\d+) allocations?", re.M)
# Leaks are not records: the tool prints "Leaked 4,352 bytes at ..." per allocation, and the
# LEAK SUMMARY's byte count is what a cell reports (tests/fixtures/sanitizer/probe_memcheck_leak_*).
_RECORD = re.compile(r"^========= (Invalid __\w+__ \w+|Uninitialized __\w+__ memory read|Race reported|"
                     r"Barrier error detected|Program hit \w+|Error: Race reported|[A-Z][\w ]*hazard)", re.M)
# What each tool's planted fault must be reported as (the canary check).
EXPECTED_RECORD = {
    "memcheck": "Invalid __global__ write",
    "racecheck": "Race reported",
    "initcheck": "Uninitialized __global__ memory read",
    "synccheck": "Barrier error detected",
}


@dataclass(frozen=True)
class SanitizerResult:
    tool: str
    summary_found: bool
    errors: int | None  # ERROR SUMMARY count, or racecheck's error count
    hazards: int | None  # racecheck only
    warnings: int | None  # racecheck only
    leaked_bytes: int | None  # memcheck --leak-check full only
    records: tuple[str, ...]  # first line of each reported problem kind (deduplicated, in order)

    @property
    def clean(self) -> bool:
        if not self.summary_found:
            return False
        return self.errors == 0 and (self.hazards or 0) == 0 and (self.leaked_bytes or 0) == 0

    def to_json(self) -> dict:
        return {"tool": self.tool, "summary_found": self.summary_found, "errors": self.errors,
                "hazards": self.hazards, "warnings": self.warnings, "leaked_bytes": self.leaked_bytes,
                "records": list(self.records)}


def parse_sanitizer(text: str, tool: str) -> SanitizerResult:
    if tool not in TOOLS:
        raise ValueError(f"unknown sanitizer tool {tool!r}")
    records = []
    for m in _RECORD.finditer(text):
        rec = m.group(1).removeprefix("Error: ")
        if rec not in records:
            records.append(rec)
    leak = _LEAK_SUMMARY.search(text)
    leaked = int(leak.group(1)) if leak else None
    if tool == "racecheck":
        m = _RACE_SUMMARY.search(text)
        if not m:
            return SanitizerResult(tool, False, None, None, None, leaked, tuple(records))
        return SanitizerResult(tool, True, int(m.group(2)), int(m.group(1)), int(m.group(3)), leaked, tuple(records))
    counts = [int(x) for x in _ERROR_SUMMARY.findall(text)]
    if not counts:
        return SanitizerResult(tool, False, None, None, None, leaked, tuple(records))
    if tool == "memcheck" and leak is None:
        # --leak-check full always prints a LEAK SUMMARY; without it the summary is incomplete
        return SanitizerResult(tool, False, max(counts), None, None, None, tuple(records))
    return SanitizerResult(tool, True, max(counts), None, None, leaked, tuple(records))


def cell_status(result: SanitizerResult, returncode: int | None, timed_out: bool) -> tuple[str, str]:
    """(status, one-line reason) of a (tool, variant, config) cell."""
    if timed_out:
        return "error", "timed out"
    if not result.summary_found:
        return "error", f"no {result.tool} summary in the log (exit {returncode})"
    if result.clean and returncode == 0:
        return "pass", "0 errors" + (", 0 hazards" if result.tool == "racecheck" else "") + \
            (", 0 bytes leaked" if result.tool == "memcheck" else "")
    if result.clean:
        return "error", f"summary says clean but exit status is {returncode}"
    what = f"{result.errors} errors" + (f", {result.hazards} hazards" if result.hazards else "") + \
        (f", {result.leaked_bytes} bytes leaked" if result.leaked_bytes else "")
    first = f": {result.records[0]}" if result.records else ""
    return "fail", what + first


def canary_caught(result: SanitizerResult, returncode: int | None) -> bool:
    """The tool flagged the planted fault: non-zero exit, a summary with errors, the expected record."""
    return bool(returncode not in (0, None) and result.summary_found and (result.errors or result.hazards)
                and EXPECTED_RECORD[result.tool] in result.records)
