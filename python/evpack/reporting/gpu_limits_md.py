"""The report's lines on what bounds the GPU's speed besides its name: SKU, power limit (current and default),
SM and memory clocks (current and max) and the clock event reasons, from env.json (when the run started) and
bench/gpu_limits.json (before and after the timed shapes). Packs without them get no line."""
from __future__ import annotations

from pathlib import Path

from ..jsonio import read_json
from ..markdown import text
from ..parsers.nvsmi import limit_value
from ..records.env import EnvJson, GpuLimits, GpuLimitsFile

_REASONS = "clocks_event_reasons."


def _num(v, unit: str) -> str:
    return "missing" if v is None else (f"{v:g} {unit}" if isinstance(v, (int, float)) else text(v))


def _state(g: GpuLimits) -> str:
    v = g.values
    active = [k[len(_REASONS):] for k, x in v.items() if k.startswith(_REASONS) and k != f"{_REASONS}active"
              and isinstance(x, str) and x.lower() == "active"]
    return (f"power limit {_num(v.get('power.limit'), 'W')} (default {_num(v.get('power.default_limit'), 'W')}, "
            f"enforced {_num(v.get('enforced.power.limit'), 'W')}, max {_num(v.get('power.max_limit'), 'W')}); "
            f"SM clock {_num(limit_value(v, 'clocks.sm'), 'MHz')} of {_num(v.get('clocks.max.sm'), 'MHz')}; "
            f"memory clock {_num(limit_value(v, 'clocks.mem'), 'MHz')} of "
            f"{_num(limit_value(v, 'clocks.max.mem'), 'MHz')}; clock event reasons: "
            + (text(", ".join(active)) if active else f"none active ({_num(v.get(f'{_REASONS}active'), '')})"))


def limit_lines(env: dict, pack_dir: Path) -> list[str]:
    lines = []
    g = EnvJson.from_json(env).nvidia_smi_query.limits.first
    if g:
        lines.append("- GPU SKU: " + "; ".join(f"{text(k)} {text(g.sku.get(k)) if g.sku.get(k) else 'missing'}"
                                               for k in ("Product Name", "Product Brand", "Board Part Number",
                                                         "Max Power Limit")))
        lines.append(f"- at the start of the run: {_state(g)}")
    try:
        bench = GpuLimitsFile.from_json(read_json(pack_dir / "bench" / "gpu_limits.json"))
    except (OSError, ValueError):
        return lines
    for when, limits in (("before", bench.before), ("after", bench.after)):
        g = limits.first
        if g:
            lines.append(f"- {when} the timed shapes: {_state(g)}")
    return lines
