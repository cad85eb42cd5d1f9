"""Which GPUs a run uses: discovery (nvidia-smi, no CUDA context in the driver process) and `--gpus`.

A run's `options["gpus"]` is None (the default where one GPU is visible: every cell runs on the
process's default device, as before sharding existed) or a list of GPU records
{"index", "uuid", "name"} (several visible, or `--gpus` given): the GPU stages then run their
cells on a pool with one worker per GPU, each cell's process pinned with CUDA_VISIBLE_DEVICES=<uuid>
(stages/procs.py), and the benchmark splits its shapes over the GPUs (stages/bench_shards.py).

Indices are nvidia-smi's. Where CUDA_VISIBLE_DEVICES is already set, only the GPUs it names (by
index or UUID, in its order) are visible, and `--gpus` counts positions in that list, as CUDA does.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import asdict, dataclass

QUERY = ["--query-gpu=index,uuid,name", "--format=csv,noheader"]


class GpuSelectionError(ValueError):
    """--gpus names a GPU that is not there, or is malformed."""


@dataclass(frozen=True)
class Gpu:
    index: int  # position among the visible GPUs (what CUDA calls device <index>)
    uuid: str  # GPU-xxxxxxxx-...; what a cell's CUDA_VISIBLE_DEVICES is set to
    name: str

    def to_json(self) -> dict:
        return asdict(self)


def parse_smi(text: str) -> list[Gpu]:
    """nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader -> GPUs (physical indices)."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not parts[0].isdigit() or not parts[1].startswith(("GPU-", "MIG-")):
            continue
        out.append(Gpu(int(parts[0]), parts[1], ",".join(parts[2:]).strip()))
    return out


def apply_visible(gpus: list[Gpu], visible: str | None) -> list[Gpu]:
    """The GPUs CUDA_VISIBLE_DEVICES leaves visible, renumbered 0.. in its order (None or unset: all).
    An entry CUDA cannot match ends the list, as the CUDA runtime does."""
    if visible is None:
        return list(gpus)
    out = []
    for tok in (t.strip() for t in visible.split(",")):
        match = [g for g in gpus if (tok.isdigit() and g.index == int(tok)) or (tok and g.uuid.startswith(tok))]
        if len(match) != 1 or match[0] in out:
            break
        out.append(match[0])
    return [Gpu(i, g.uuid, g.name) for i, g in enumerate(out)]


def discover() -> list[Gpu]:
    """The GPUs this process may use ([] without nvidia-smi or a driver)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        res = subprocess.run([smi, *QUERY], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if res.returncode != 0:
        return []
    return apply_visible(parse_smi(res.stdout), os.environ.get("CUDA_VISIBLE_DEVICES"))


def describe(gpus: list[Gpu]) -> str:
    return ", ".join(f"{g.index} ({g.name}, {g.uuid})" for g in gpus) or "none"


def select(spec: str | None, visible: list[Gpu]) -> list[dict] | None:
    """options["gpus"] from --gpus (None: every visible GPU when there are several, else None).

    spec: "all" or a comma list of visible indices ("0,1"). Raises GpuSelectionError naming the
    GPUs that are there when spec names one that is not.
    """
    if spec is None:
        return [g.to_json() for g in visible] if len(visible) > 1 else None
    text = spec.strip()
    if not visible:
        raise GpuSelectionError(f"--gpus {spec}: no GPU is visible (nvidia-smi lists none)")
    if text == "all":
        return [g.to_json() for g in visible]
    chosen: list[Gpu] = []
    for tok in (t.strip() for t in text.split(",")):
        if not tok.isdigit():
            raise GpuSelectionError(f"--gpus: {tok!r} is not a GPU index (give 'all' or indices such as 0,1)")
        match = [g for g in visible if g.index == int(tok)]
        if not match:
            raise GpuSelectionError(f"--gpus: GPU {tok} is not there (visible: {describe(visible)})")
        if match[0] in chosen:
            raise GpuSelectionError(f"--gpus: GPU {tok} is named twice")
        chosen.append(match[0])
    return [g.to_json() for g in chosen]
