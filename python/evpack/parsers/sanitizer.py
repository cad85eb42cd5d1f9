"""Pure parser of compute-sanitizer logs (memcheck, racecheck, initcheck, synccheck).

A cell passes only with BOTH a zero exit status and a parsed summary of 0
errors / 0 hazards (and 0 leaked bytes for memcheck's leak check). A missing
summary is `error`, never `pass`. The log must also agree with itself: a problem
record (`Invalid __global__ write`, a race, an uninitialized read, a barrier error)
under a zero summary, or two summaries of one kind that disagree, is not clean;
the worst count of each kind is the one reported.
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
    # one line per summary kind printed more than once with different counts (the worst is the one kept)
    conflicts: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        """Every summary says zero (errors, hazards, warnings, leaked bytes), they agree, and no record."""
        if not self.summary_found or self.records or self.conflicts:
            return False
        return self.errors == 0 and not self.hazards and not self.warnings and not self.leaked_bytes

    def to_json(self) -> dict:
        out = {"tool": self.tool, "summary_found": self.summary_found, "errors": self.errors,
               "hazards": self.hazards, "warnings": self.warnings, "leaked_bytes": self.leaked_bytes,
               "records": list(self.records)}
        if self.conflicts:  # only a log that disagrees with itself has the key
            out["summary_conflicts"] = list(self.conflicts)
        return out


def _disagree(label: str, values: list[str]) -> list[str]:
    """One line when a summary kind was printed with different counts; none when it agrees (or once)."""
    if len(set(values)) < 2:
        return []
    return [f"{len(values)} {label} lines disagree ({'; '.join(values)}): the worst is counted"]


def parse_sanitizer(text: str, tool: str) -> SanitizerResult:
    if tool not in TOOLS:
        raise ValueError(f"unknown sanitizer tool {tool!r}")
    records = []
    for m in _RECORD.finditer(text):
        rec = m.group(1).removeprefix("Error: ")
        if rec not in records:
            records.append(rec)
    recs = tuple(records)
    # every summary line of each kind is read: the worst counts, and a kind printed with different counts
    # is a conflict (a clean summary cannot hide a second, dirty one, whichever comes first)
    leaks = [(int(b), int(n)) for b, n in _LEAK_SUMMARY.findall(text)]
    leaked = max(b for b, _ in leaks) if leaks else None
    conflicts = _disagree("LEAK SUMMARY", [f"{b} bytes leaked in {n} allocations" for b, n in leaks])
    if tool == "racecheck":
        races = [(int(h), int(e), int(w)) for h, e, w in _RACE_SUMMARY.findall(text)]
        if not races:
            return SanitizerResult(tool, False, None, None, None, leaked, recs, tuple(conflicts))
        conflicts += _disagree("RACECHECK SUMMARY", [f"{h} hazards ({e} errors, {w} warnings)" for h, e, w in races])
        return SanitizerResult(tool, True, max(e for _, e, _ in races), max(h for h, _, _ in races),
                               max(w for _, _, w in races), leaked, recs, tuple(conflicts))
    counts = [int(x) for x in _ERROR_SUMMARY.findall(text)]
    conflicts += _disagree("ERROR SUMMARY", [f"{n} errors" for n in counts])
    if not counts:
        return SanitizerResult(tool, False, None, None, None, leaked, recs, tuple(conflicts))
    if tool == "memcheck" and not leaks:
        # --leak-check full always prints a LEAK SUMMARY; without it the summary is incomplete
        return SanitizerResult(tool, False, max(counts), None, None, None, recs, tuple(conflicts))
    return SanitizerResult(tool, True, max(counts), None, None, leaked, recs, tuple(conflicts))


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
        (f", {result.warnings} warnings" if result.warnings and not result.hazards else "") + \
        (f", {result.leaked_bytes} bytes leaked" if result.leaked_bytes else "")
    first = f": {result.records[0]}" if result.records else ""
    notes = list(result.conflicts)
    if result.records and not (result.errors or result.hazards):
        notes.append(f"the log holds problem records ({', '.join(result.records)}) under a summary of 0")
    return "fail", what + first + "".join(f"; {n}" for n in notes)


def canary_caught(result: SanitizerResult, returncode: int | None) -> bool:
    """The tool flagged the planted fault: non-zero exit, a summary with errors, the expected record."""
    return bool(returncode not in (0, None) and result.summary_found and (result.errors or result.hazards)
                and EXPECTED_RECORD[result.tool] in result.records)
