"""What bounds a GPU's speed besides its name, from nvidia-smi output (pure: text in, values out).

Two sources, both documented nvidia-smi formats:
- `nvidia-smi --query-gpu=<LIMIT_FIELDS> --format=csv`: a header line naming the fields (with units, e.g.
  `power.limit [W]`), then one line per GPU, values comma separated (`700.00 W`, `1980 MHz`, `0x0000...`,
  `Not Active`); a field the GPU or driver cannot report reads `[N/A]` or `[Not Supported]`.
- `nvidia-smi -q`: `Key : value` lines; the SKU facts (SKU_KEYS) that --query-gpu does not offer.

Nothing here raises on odd input: a missing, unsupported or unparsable field is recorded as missing.
"""
from __future__ import annotations

import re

# nvidia-smi --help-query-gpu names: the power limit (current, default, enforced, max), memory and SM clocks
# (current and max) and the clock event (throttle) reasons.
LIMIT_FIELDS = (
    "name", "pci.bus_id", "uuid", "power.limit", "power.default_limit", "enforced.power.limit", "power.max_limit",
    "clocks.sm", "clocks.max.sm", "clocks.mem", "clocks.max.mem", "pstate", "temperature.gpu", "power.draw",
    "clocks_event_reasons.active", "clocks_event_reasons.gpu_idle", "clocks_event_reasons.sw_power_cap",
    "clocks_event_reasons.hw_slowdown", "clocks_event_reasons.hw_thermal_slowdown",
    "clocks_event_reasons.hw_power_brake_slowdown", "clocks_event_reasons.sw_thermal_slowdown",
    "clocks_event_reasons.sync_boost",
)
SKU_KEYS = ("Product Name", "Product Brand", "Product Architecture", "Board Part Number", "Max Power Limit")
MISSING_VALUES = ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", "")
_UNIT = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(W|MHz|C|%|MiB)?\s*$")
_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query', re.I)


def _split(line: str) -> list[str]:
    return [c.strip() for c in line.split(",")]


def value_of(raw: str | None) -> float | str | None:
    """A number for `700.00 W` / `1980 MHz` / `45`, the text for anything else, None for a missing value."""
    if raw is None or raw.strip() in MISSING_VALUES:
        return None
    m = _UNIT.match(raw)
    return float(m.group(1)) if m else raw.strip()


# The header names nvidia-smi prints for the short names LIMIT_FIELDS asks for (580.159.04 on an H200:
# tests/fixtures/nvidia-smi/): a pack made before `fields=` was passed keyed its values by these.
HEADER_NAMES = {"clocks.sm": "clocks.current.sm", "clocks.mem": "clocks.current.memory",
                "clocks.max.mem": "clocks.max.memory"}


def parse_query_csv(text: str, fields: list[str] | None = None) -> list[dict]:
    """One dict per GPU line of `--format=csv` output: {"values": {field: number, text or None}, "raw":
    {field: str}, "missing": [fields]}. Field names are the queried `fields` (nvidia-smi prints its own long
    name for some: `clocks.sm` reads `clocks.current.sm [MHz]`), by position when the header has as many;
    else the header's names (units dropped). [] when the text holds no header and data line."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2:
        return []
    header = [re.sub(r"\s*\[[^\]]*\]\s*$", "", h) for h in _split(lines[0])]
    fields = list(fields) if fields is not None and len(fields) == len(header) else header
    gpus = []
    for ln in lines[1:]:
        cells = _split(ln)
        if len(cells) != len(fields):  # a value holding a comma, or a cut line: recorded, not guessed
            gpus.append({"values": {}, "raw": {"line": ln}, "missing": list(fields),
                         "error": f"{len(cells)} values for {len(fields)} fields"})
            continue
        raw = dict(zip(fields, cells, strict=True))
        values = {f: value_of(v) for f, v in raw.items()}
        gpus.append({"values": values, "raw": raw, "missing": [f for f, v in values.items() if v is None]})
    return gpus


def limit_value(values: dict, field: str):
    """values[field], or the value under nvidia-smi's own header name for it (packs keyed by the header)."""
    v = values.get(field)
    return values.get(HEADER_NAMES[field]) if v is None and field in HEADER_NAMES else v


def invalid_field(stderr_or_stdout: str) -> str | None:
    """The field nvidia-smi refused as not valid to query (older drivers lack clocks_event_reasons.*)."""
    m = _INVALID_FIELD.search(stderr_or_stdout)
    return m.group(1) if m else None


def parse_sku(text: str) -> list[dict]:
    """SKU_KEYS of each GPU section of `nvidia-smi -q` (a section starts at a `GPU 00000000:...` line); a key
    the output does not hold is None. The first occurrence in a section counts (`Max Power Limit` is in the
    power readings)."""
    sections: list[dict] = []
    for ln in text.splitlines():
        if re.match(r"^GPU [0-9A-Fa-f]{4,8}:", ln):
            sections.append({k: None for k in SKU_KEYS})
            continue
        if not sections or ":" not in ln:
            continue
        key, _, val = ln.partition(":")
        key = key.strip()
        if key in SKU_KEYS and sections[-1][key] is None:
            sections[-1][key] = None if val.strip() in MISSING_VALUES else val.strip()
    return sections
