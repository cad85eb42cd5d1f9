"""SM clock before and after the benchmark, and the throttle flag. Reads only; never sets clocks.

Source: pynvml (nvidia-ml-py) when importable, else
`nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv,noheader,nounits`.
Readings are taken while the GPU is busy (the caller enqueues work first): an idle GPU
drops its clock, which says nothing about throttling.

Throttled = the SM clock read under load after the run is < 0.9 x the max SM clock, or an
active clock-event reason in THROTTLE_REASONS (thermal slowdown, HW slowdown, power brake).
The SW power cap is recorded among the reasons but flags only through the clock rule: an
H200 under sustained load sits at its power limit as a matter of course (seen during
development with the SM clock within 1% of max), and what matters is how far the clock
fell. GPU idle, application-clock setting and sync boost are not throttling.
"""
from __future__ import annotations

import logging
import subprocess

from ..records.bench import ClockReading

log = logging.getLogger(__name__)

SCHEMA = 1
THROTTLE_FRACTION = 0.9
# NVML clocks-event reason bits (nvml.h nvmlClocksEventReason*) that mean "slowed down".
CLOCK_EVENT_REASONS = {
    0x0000000000000004: "sw_power_cap",
    0x0000000000000008: "hw_slowdown",
    0x0000000000000020: "sw_thermal_slowdown",
    0x0000000000000040: "hw_thermal_slowdown",
    0x0000000000000080: "hw_power_brake_slowdown",
}
THROTTLE_REASONS = {bit: name for bit, name in CLOCK_EVENT_REASONS.items() if name != "sw_power_cap"}
SMI_QUERY = ["--query-gpu=clocks.sm,clocks.max.sm", "--format=csv,noheader,nounits"]
SMI_REASONS_QUERIES = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")


def decode_reasons(mask: int | None) -> list[str]:
    if mask is None:
        return []
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]


def parse_smi_clocks(text: str) -> tuple[int, int]:
    """'1980, 1980' -> (sm MHz, max sm MHz); first line = first listed GPU."""
    line = text.strip().splitlines()[0]
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 2:
        raise ValueError(f"nvidia-smi clocks: expected 2 fields, got {line!r}")
    return int(float(parts[0])), int(float(parts[1]))


def parse_smi_reasons(text: str) -> int | None:
    """'0x0000000000000004' -> 4; anything unparsable -> None."""
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    try:
        return int(token, 16)
    except ValueError:
        return None


def _nvml_reading(index: int, uuid: str | None) -> dict:
    import pynvml

    pynvml.nvmlInit()
    try:
        h = None
        if uuid:
            try:
                h = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
            except pynvml.NVMLError:
                h = None
        if h is None:
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
        sm = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
        sm_max = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
        getter = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        try:
            mask = int(getter(h))
        except pynvml.NVMLError:
            mask = None
        return {"source": "pynvml", "sm_mhz": int(sm), "max_sm_mhz": int(sm_max), "reasons_mask": mask}
    finally:
        pynvml.nvmlShutdown()


def _smi_reading(index: int, uuid: str | None) -> dict:
    ident = (uuid if uuid.startswith("GPU-") else f"GPU-{uuid}") if uuid else str(index)

    def run(query: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(["nvidia-smi", f"--id={ident}", *query], capture_output=True, text=True, timeout=20)

    res = run(SMI_QUERY)
    if res.returncode != 0:
        raise RuntimeError(f"nvidia-smi exited {res.returncode}: {res.stderr.strip()[:200]}")
    sm, sm_max = parse_smi_clocks(res.stdout)
    mask = None
    for q in SMI_REASONS_QUERIES:
        r = run([f"--query-gpu={q}", "--format=csv,noheader,nounits"])
        if r.returncode == 0:
            mask = parse_smi_reasons(r.stdout)
            break
    return {"source": "nvidia-smi", "sm_mhz": sm, "max_sm_mhz": sm_max, "reasons_mask": mask, "raw": res.stdout.strip()}


def read(index: int = 0, uuid: str | None = None) -> dict:
    """One reading; {'source': 'none', 'error': ...} when neither source works."""
    errors = []
    try:
        return _nvml_reading(index, uuid)
    except Exception as exc:  # noqa: BLE001 - any failure falls through to nvidia-smi
        errors.append(f"pynvml: {exc}")
    try:
        return _smi_reading(index, uuid)
    except Exception as exc:  # noqa: BLE001
        errors.append(f"nvidia-smi: {exc}")
    return {"source": "none", "error": "; ".join(errors)}


def highest_sm_mhz(clk: dict) -> float | None:
    """The highest SM clock clocks.json records (the readings under load and the device's max SM clock): the
    exp floor's clock, so that it holds at any clock the GPU ran at between the readings. None if unreadable."""
    values = [r.get(k) for r in (clk.get("before") or {}, clk.get("after") or {}) for k in ("sm_mhz", "max_sm_mhz")]
    values = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0]
    return max(values) if values else None


def judge(before: dict, after: dict) -> dict:
    """The clocks.json object: both readings, the throttle flag and why."""
    out = {"schema": SCHEMA, "before": before, "after": after, "throttled": False, "reasons": [], "reason": ""}
    first, last = ClockReading.from_json(before), ClockReading.from_json(after)
    if "source" not in last.raw or last.source == "none":
        return dict(out, reason="clocks not readable: " + (last.error if "error" in last.raw else ""))
    why = []
    frac = last.sm_mhz / last.max_sm_mhz if last.max_sm_mhz else 1.0
    if frac < THROTTLE_FRACTION:
        why.append(f"SM clock under load {last.sm_mhz} MHz < {THROTTLE_FRACTION:.0%} of max {last.max_sm_mhz} MHz")
    names = sorted(set(decode_reasons(first.reasons_mask) + decode_reasons(last.reasons_mask)))
    hard = [n for n in names if n in THROTTLE_REASONS.values()]
    if hard:
        why.append("active clock-event reasons: " + ", ".join(hard))
    out.update(throttled=bool(why), reasons=names, reason="; ".join(why) or (
        f"not throttled (active: {', '.join(names)})" if names else ""))
    return out
