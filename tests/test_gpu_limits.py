"""nvidia-smi's power limits, clocks, clock event reasons and SKU (parsers/nvsmi, envlock.gpu_limits).

The SYNTHETIC texts below are written in this test after the documented `--format=csv` and `-q` layouts
(header with units, `[N/A]` for a value the GPU cannot report, `Key : value` lines), for the odd cases; the
real output of both commands on an H200 is in tests/fixtures/nvidia-smi/ (its README says how it was made)."""
from __future__ import annotations

from pathlib import Path

from evpack.envlock import gpu_limits
from evpack.parsers import nvsmi
from evpack.reporting.gpu_limits_md import limit_lines

REAL = Path(__file__).parent / "fixtures" / "nvidia-smi"
REAL_CSV = (REAL / "query-gpu-limits-h200.csv").read_text()
REAL_Q = (REAL / "q-h200.txt").read_text()
SYNTHETIC_CSV = (
    "name, power.limit [W], power.default_limit [W], clocks.sm [MHz], clocks.max.mem [MHz], "
    "clocks_event_reasons.active, clocks_event_reasons.sw_power_cap, pstate\n"
    "NVIDIA H200, 700.00 W, 700.00 W, 1980 MHz, [N/A], 0x0000000000000004, Active, P0\n")
SYNTHETIC_Q = ("==============NVSMI LOG==============\n\nGPU 00000000:19:00.0\n"
               "    Product Name                          : NVIDIA H200\n"
               "    Product Brand                         : NVIDIA\n"
               "    Board Part Number                     : N/A\n")


def test_csv_values_units_and_missing_fields():
    (g,) = nvsmi.parse_query_csv(SYNTHETIC_CSV)
    v = g["values"]
    assert v["power.limit"] == 700.0 and v["clocks.sm"] == 1980.0 and v["pstate"] == "P0"
    assert v["clocks_event_reasons.active"] == "0x0000000000000004"
    assert v["clocks.max.mem"] is None and g["missing"] == ["clocks.max.mem"]


def test_odd_input_never_raises():
    assert nvsmi.parse_query_csv("") == [] and nvsmi.parse_query_csv("name\n") == []
    (g,) = nvsmi.parse_query_csv("name, power.limit [W]\nNVIDIA H200, 700 W, extra\n")
    assert g["values"] == {} and "error" in g and g["missing"] == ["name", "power.limit"]
    assert nvsmi.parse_sku("no sections here") == []


def test_sku_from_q_output():
    (s,) = nvsmi.parse_sku(SYNTHETIC_Q)
    assert s["Product Name"] == "NVIDIA H200" and s["Product Brand"] == "NVIDIA"
    assert s["Board Part Number"] is None and s["Max Power Limit"] is None


def test_a_field_the_driver_refuses_is_dropped_and_recorded():
    calls = []

    def fake(args):  # SYNTHETIC nvidia-smi: an older driver that knows no clocks_event_reasons.sync_boost
        calls.append(args)
        if args == ["-q"]:
            return SYNTHETIC_Q
        fields = args[0].split("=", 1)[1].split(",")
        if "clocks_event_reasons.sync_boost" in fields:
            raise RuntimeError('nvidia-smi exited 2: Field "clocks_event_reasons.sync_boost" is not a valid field '
                               'to query.')
        return ", ".join(fields) + "\n" + ", ".join("[N/A]" for _ in fields) + "\n"

    out = gpu_limits(run=fake)
    assert out["dropped"] == ["clocks_event_reasons.sync_boost"] and not out["errors"]
    (g,) = out["gpus"]
    assert set(g["missing"]) == set(out["fields"]) and g["sku"]["Product Name"] == "NVIDIA H200"
    assert len(calls) == 3


def test_no_nvidia_smi_is_recorded_not_raised():
    def missing(args):
        raise FileNotFoundError("nvidia-smi")

    out = gpu_limits(run=missing)
    assert out["gpus"] == [] and out["errors"] == ["nvidia-smi: not found on PATH"]


def test_report_lines(tmp_path):
    (g,) = nvsmi.parse_query_csv(SYNTHETIC_CSV)
    g["sku"] = nvsmi.parse_sku(SYNTHETIC_Q)[0]
    lines = limit_lines({"nvidia_smi_query": {"limits": {"gpus": [g]}}}, tmp_path)
    assert lines[0].startswith("- GPU SKU: Product Name NVIDIA H200") and "Board Part Number missing" in lines[0]
    assert "power limit 700 W (default 700 W" in lines[1] and "memory clock missing of missing" in lines[1]
    assert "clock event reasons: sw_power_cap" in lines[1]
    assert limit_lines({}, tmp_path) == []  # older packs: no line


def _real_smi(args):
    """nvidia-smi as it answered on the H200 (the fixture), for the two commands gpu_limits runs."""
    if args == ["-q"]:
        return REAL_Q
    assert args == [f"--query-gpu={','.join(nvsmi.LIMIT_FIELDS)}", "--format=csv"], args
    return REAL_CSV


def test_the_real_h200_answer_is_named_by_the_queried_fields(tmp_path):
    out = gpu_limits(run=_real_smi)
    (g,) = out["gpus"]
    assert out["errors"] == [] and out["dropped"] == [] and g["missing"] == []
    assert list(g["values"]) == list(nvsmi.LIMIT_FIELDS)  # the header says clocks.current.sm for clocks.sm
    v = g["values"]
    assert v["name"] == "NVIDIA H200" and v["power.limit"] == 700.0 and v["clocks.max.sm"] == 1980.0
    assert isinstance(v["clocks.sm"], float) and v["clocks.max.mem"] == 3201.0
    assert g["sku"]["Product Architecture"] == "Hopper" and g["sku"]["Max Power Limit"] == "700.00 W"
    line = limit_lines({"nvidia_smi_query": {"limits": out}}, tmp_path)[1]
    assert "SM clock missing" not in line and "memory clock 3201 MHz of 3201 MHz" in line


def test_a_pack_keyed_by_the_header_names_still_shows_its_clocks(tmp_path):
    """Packs made before the values were named by the queried fields (20261124T211154Z) hold the header's."""
    (g,) = nvsmi.parse_query_csv(REAL_CSV)
    assert "clocks.sm" not in g["values"] and g["values"]["clocks.current.sm"] is not None
    line = limit_lines({"nvidia_smi_query": {"limits": {"gpus": [g]}}}, tmp_path)[1]
    assert "SM clock missing" not in line and "memory clock 3201 MHz of 3201 MHz" in line


def test_a_header_of_another_length_keeps_its_own_names():
    (g,) = nvsmi.parse_query_csv(REAL_CSV, ["name", "uuid"])
    assert g["values"]["clocks.current.sm"] is not None
