"""compute-sanitizer log parsing on real logs (tests/fixtures/README.md says where each came from)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from evpack.parsers.sanitizer import TOOLS, canary_caught, cell_status, parse_sanitizer

FIX = Path(__file__).parent / "fixtures" / "sanitizer"
PROBE_FAULTS = ("clean", "oob", "race", "uninit", "divsync")


def _probe(tool: str, fault: str) -> tuple[str, int]:
    """A probe log and the exit status the probe script appended as its last line (`rc=N`)."""
    text = (FIX / f"san_{tool}_{fault}.txt").read_text(encoding="utf-8")
    return text, int(re.search(r"^rc=(\d+)$", text, re.M).group(1))


# What the tools reported for the probe's five kernels on the H200 (each read off the log by hand
# and checked against its summary line): tool -> fault -> (errors, hazards).
PROBE_EXPECTED = {
    "memcheck": {"clean": (0, None), "oob": (0, None), "race": (0, None), "uninit": (0, None), "divsync": (0, None)},
    "racecheck": {"clean": (0, 0), "oob": (0, 0), "race": (1, 1), "uninit": (0, 0), "divsync": (0, 0)},
    "initcheck": {"clean": (0, None), "oob": (0, None), "race": (0, None), "uninit": (128, None),
                  "divsync": (0, None)},
    "synccheck": {"clean": (0, None), "oob": (0, None), "race": (0, None), "uninit": (0, None),
                  "divsync": (64, None)},
}


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("fault", PROBE_FAULTS)
def test_probe_logs_parse_to_their_summaries(tool, fault):
    text, rc = _probe(tool, fault)
    res = parse_sanitizer(text, tool)
    assert res.summary_found
    assert (res.errors, res.hazards) == PROBE_EXPECTED[tool][fault]
    status, _ = cell_status(res, rc, timed_out=False)
    assert status == ("pass" if res.errors == 0 else "fail")
    if tool == "memcheck":
        assert res.leaked_bytes == 0  # the probe frees everything; --leak-check full printed its summary


@pytest.mark.parametrize(("tool", "fault", "record"), [
    ("racecheck", "race", "Race reported"),
    ("initcheck", "uninit", "Uninitialized __global__ memory read"),
    ("synccheck", "divsync", "Barrier error detected"),
])
def test_probe_faults_are_caught_with_their_record(tool, fault, record):
    text, rc = _probe(tool, fault)
    res = parse_sanitizer(text, tool)
    assert res.records == (record,)
    assert canary_caught(res, rc)


def test_a_tool_that_saw_nothing_does_not_count_as_catching():
    """The probe's out-of-bounds write landed inside the allocation's granule: memcheck saw nothing.
    That log must not count as a catch, whatever the exit status."""
    text, rc = _probe("memcheck", "oob")
    res = parse_sanitizer(text, "memcheck")
    assert res.clean and not canary_caught(res, rc) and not canary_caught(res, 86)


# Canary cells of the reference pack 20261121T142018Z-b40b5c2fd4c6 (exit status 86 = --error-exitcode).
@pytest.mark.parametrize(("name", "tool", "errors", "hazards", "leaked", "record"), [
    ("pack_memcheck_canary_oob_write.log", "memcheck", 5, None, 17408, "Invalid __global__ write"),
    ("pack_racecheck_canary_smem_race.log", "racecheck", 4, 4, None, "Race reported"),
    ("pack_initcheck_canary_uninit_read.log", "initcheck", 328, None, None, "Uninitialized __global__ memory read"),
    ("pack_synccheck_canary_divergent_sync.log", "synccheck", 64, None, None, "Barrier error detected"),
])
def test_reference_pack_canaries(name, tool, errors, hazards, leaked, record):
    res = parse_sanitizer((FIX / name).read_text(encoding="utf-8"), tool)
    assert (res.summary_found, res.errors, res.hazards, res.leaked_bytes) == (True, errors, hazards, leaked)
    assert res.records[0] == record
    assert canary_caught(res, 86)
    assert not canary_caught(res, 0)  # a zero exit is not a catch, whatever the log says
    assert cell_status(res, 86, timed_out=False)[0] == "fail"


@pytest.mark.parametrize(("name", "tool"), [("pack_memcheck_scalar.log", "memcheck"),
                                            ("pack_racecheck_mma.log", "racecheck"),
                                            ("probe_memcheck_leak_via_binding.log", "memcheck")])
def test_clean_cells(name, tool):
    res = parse_sanitizer((FIX / name).read_text(encoding="utf-8"), tool)
    assert res.clean and res.records == ()
    assert cell_status(res, 0, timed_out=False) == (
        "pass", "0 errors, 0 bytes leaked" if tool == "memcheck" else "0 errors, 0 hazards")
    assert cell_status(res, 86, timed_out=False)[0] == "error"  # clean summary, failing exit: not a pass
    assert cell_status(res, 0, timed_out=True) == ("error", "timed out")


def test_leaks_alone_fail_a_memcheck_cell():
    """Under the tool, torch 2.11's custom-op path kept q, k, v and out alive: 8 leaks, no access error."""
    res = parse_sanitizer((FIX / "probe_memcheck_leak_via_custom_op.log").read_text(encoding="utf-8"), "memcheck")
    assert (res.errors, res.leaked_bytes) == (8, 83968)
    assert res.records == ()  # leaks are counted by the LEAK SUMMARY, not listed as records
    status, reason = cell_status(res, 86, timed_out=False)
    assert status == "fail" and "83968 bytes leaked" in reason


def test_host_api_errors_fail_an_initcheck_cell():
    """The 1-byte result of a torch reduction (written by an uninstrumented kernel) copied to the host:
    16 'Host API memory access error's and no kernel record. Not clean, and no canary record."""
    text = (FIX / "probe_initcheck_host_copy_of_torch_result.log").read_text(encoding="utf-8")
    res = parse_sanitizer(text, "initcheck")
    assert res.summary_found and res.errors == 16 and not res.clean
    assert text.count("Host API memory access error") == 16
    assert "Uninitialized __global__ memory read" not in res.records
    assert not canary_caught(res, 86)
    assert cell_status(res, 86, timed_out=False)[0] == "fail"


def test_a_target_that_never_started_is_an_error():
    text = (FIX / "probe_no_summary_target_not_started.log").read_text(encoding="utf-8")
    res = parse_sanitizer(text, "memcheck")
    assert not res.summary_found and not res.clean
    assert cell_status(res, 1, timed_out=False)[0] == "error"
    assert not canary_caught(res, 1)


def test_memcheck_without_a_leak_summary_is_incomplete():
    """A memcheck log cut before its LEAK SUMMARY (e.g. a killed process) must not pass."""
    text = (FIX / "pack_memcheck_scalar.log").read_text(encoding="utf-8")
    cut = "\n".join(ln for ln in text.splitlines() if "LEAK SUMMARY" not in ln)
    res = parse_sanitizer(cut, "memcheck")
    assert not res.summary_found
    assert cell_status(res, 0, timed_out=False)[0] == "error"


def test_unknown_tool_is_rejected():
    with pytest.raises(ValueError, match="unknown sanitizer tool"):
        parse_sanitizer("", "leakcheck")
