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


# ---- a log that disagrees with itself ---------------------------------------------------------------------
# Real logs (fixtures/README.md): a clean cell's log of reference pack 20261121T142018Z-b40b5c2fd4c6 (or a
# clean probe log) with the `=========` lines of a canary's log of that pack (or of the fault probe) spliced
# in: problem records above the clean summary, or the canary's summary after it. The tool prints one summary
# of each kind and lists its records above it; a log holding both cannot be clean.


def _tool_lines(name: str, summaries: bool) -> str:
    """The `=========` lines of a fixture log (records with their stacks; its summaries if asked), no banner."""
    text = (FIX / name).read_text(encoding="utf-8")
    return "".join(ln for ln in text.splitlines(True) if ln.startswith("=========") and "COMPUTE-SANITIZER" not in ln
                   and ("SUMMARY" not in ln or summaries))


def _above_the_summaries(clean: str, lines: str) -> str:
    head, *rest = (FIX / clean).read_text(encoding="utf-8").splitlines(True)
    return head + lines + "".join(rest)


@pytest.mark.parametrize(("clean", "canary", "tool", "record"), [
    ("pack_memcheck_scalar.log", "pack_memcheck_canary_oob_write.log", "memcheck", "Invalid __global__ write"),
    ("pack_racecheck_mma.log", "pack_racecheck_canary_smem_race.log", "racecheck", "Race reported"),
    ("san_initcheck_clean.txt", "pack_initcheck_canary_uninit_read.log", "initcheck",
     "Uninitialized __global__ memory read"),
    ("san_synccheck_clean.txt", "san_synccheck_divsync.txt", "synccheck", "Barrier error detected"),
])
def test_records_under_a_zero_summary_are_not_clean(clean, canary, tool, record):
    text = _above_the_summaries(clean, _tool_lines(canary, summaries=False))
    assert record in text and text.count("SUMMARY") == (2 if tool == "memcheck" else 1)
    res = parse_sanitizer(text, tool)
    assert res.summary_found and (res.errors, res.hazards or 0, res.leaked_bytes or 0) == (0, 0, 0)
    assert res.records[0] == record and res.conflicts == () and not res.clean
    status, reason = cell_status(res, 0, timed_out=False)
    assert status == "fail"
    assert reason.endswith(f": {record}; the log holds problem records ({record}) under a summary of 0")


@pytest.mark.parametrize("dirty_first", [False, True])
def test_two_racecheck_summaries_that_disagree_take_the_worst(dirty_first):
    """Whichever comes first: the 4-hazard summary counts, and the reason says the log disagrees."""
    clean = (FIX / "pack_racecheck_mma.log").read_text(encoding="utf-8")
    race = _tool_lines("pack_racecheck_canary_smem_race.log", summaries=True)
    text = race + clean if dirty_first else clean + race
    res = parse_sanitizer(text, "racecheck")
    assert (res.errors, res.hazards, res.warnings) == (4, 4, 0) and not res.clean
    order = ("4 hazards (4 errors, 0 warnings); 0 hazards (0 errors, 0 warnings)" if dirty_first else
             "0 hazards (0 errors, 0 warnings); 4 hazards (4 errors, 0 warnings)")
    assert res.conflicts == (f"2 RACECHECK SUMMARY lines disagree ({order}): the worst is counted",)
    assert res.to_json()["summary_conflicts"] == list(res.conflicts)
    assert cell_status(res, 0, timed_out=False) == (
        "fail", f"4 errors, 4 hazards: Race reported; {res.conflicts[0]}")


def test_summaries_alone_that_disagree_are_not_clean():
    """Only summary lines (no record): the clean memcheck cell with the canary's LEAK / ERROR SUMMARY appended,
    and the clean synccheck probe with the divergent-sync probe's ERROR SUMMARY: the worst count of each kind."""
    text = (FIX / "pack_memcheck_scalar.log").read_text(encoding="utf-8") + "".join(
        ln for ln in _tool_lines("pack_memcheck_canary_oob_write.log", summaries=True).splitlines(True)
        if "SUMMARY" in ln)
    res = parse_sanitizer(text, "memcheck")
    assert (res.errors, res.leaked_bytes, res.records) == (5, 17408, ()) and not res.clean
    assert res.conflicts == (
        "2 LEAK SUMMARY lines disagree (0 bytes leaked in 0 allocations; 17408 bytes leaked in 4 allocations): "
        "the worst is counted",
        "2 ERROR SUMMARY lines disagree (0 errors; 5 errors): the worst is counted")
    assert cell_status(res, 0, timed_out=False) == ("fail", "5 errors, 17408 bytes leaked; " + "; ".join(res.conflicts))
    sync, _ = _probe("synccheck", "clean")
    res = parse_sanitizer(sync + "========= ERROR SUMMARY: 64 errors\n", "synccheck")
    assert res.errors == 64 and not res.clean and "(0 errors; 64 errors)" in cell_status(res, 0, False)[1]


def test_a_summary_printed_twice_alike_is_still_clean():
    """Agreeing summaries are not a conflict (nothing to hide): the clean cells stay clean, and their JSON has
    no `summary_conflicts` key (the sanitize data of every committed pack is unchanged)."""
    for name, tool in (("pack_memcheck_scalar.log", "memcheck"), ("pack_racecheck_mma.log", "racecheck")):
        text = (FIX / name).read_text(encoding="utf-8")
        summaries = "".join(ln for ln in text.splitlines(True) if "SUMMARY" in ln)
        res = parse_sanitizer(text + summaries, tool)
        assert res.clean and res.conflicts == () and "summary_conflicts" not in res.to_json()
        assert res.to_json() == parse_sanitizer(text, tool).to_json()


def test_racecheck_warnings_under_zero_hazards_are_not_clean():
    """The clean racecheck cell's summary edited to report warnings while displaying 0 hazards."""
    text = (FIX / "pack_racecheck_mma.log").read_text(encoding="utf-8").replace("0 warnings)", "2 warnings)")
    res = parse_sanitizer(text, "racecheck")
    assert (res.hazards, res.warnings) == (0, 2) and not res.clean
    assert cell_status(res, 0, timed_out=False) == ("fail", "0 errors, 2 warnings")
