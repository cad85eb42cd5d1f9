"""env.json: exactly the v1 environment-lock schema (key order is part of the schema).

Anything that cannot be read is null plus an entry in `errors`; this never raises.
Output is ASCII-only. What bounds the GPU's speed besides its name (power limits, clocks, clock event
reasons, SKU: gpu_limits) is kept under nvidia_smi_query["limits"], so the v1 keys stay as they are.
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .gitinfo import git_info
from .parsers import nvsmi
from .version import __version__

ENV_SCHEMA_VERSION = "v1"
ENV_KEYS = (
    "env_schema_version", "tool_version", "generated_utc", "os", "python_version", "torch_version",
    "cuda_version", "precision", "amp", "gpu_name", "total_vram_bytes", "compute_capability",
    "driver_version", "cuda_driver_reported", "driver_model", "nvidia_smi_query", "nvidia_smi_raw",
    "git_commit", "git_dirty", "git_error", "env_vars", "errors",
)
ENV_VAR_ALLOWLIST = ("CUDA_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
SMI_FIELDS = ("name", "driver_version", "memory.total", "compute_cap", "driver_model.current")


def _ascii(obj: Any) -> Any:
    if isinstance(obj, str):
        return obj.encode("ascii", "replace").decode("ascii")
    if isinstance(obj, dict):
        return {_ascii(k): _ascii(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_ascii(v) for v in obj]
    return obj


def _smi(args: list[str]) -> str:
    out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError(f"nvidia-smi exited {out.returncode}: {(out.stderr or out.stdout).strip()[:200]}")
    return out.stdout


def gpu_limits(run=None, max_retries: int = 8) -> dict[str, Any]:
    """Power limits, SM and memory clocks (current, max), clock event reasons and SKU of every GPU, read with
    nvidia-smi now: {"source", "fields", "gpus": [parse_query_csv entries, each with "sku"], "dropped":
    fields this driver refused, "errors"}. Never raises; a field a driver does not know is dropped and
    recorded, a value it cannot report is recorded as missing. `run`: the nvidia-smi runner (tests)."""
    run = run or _smi
    fields = list(nvsmi.LIMIT_FIELDS)
    gpus: list[dict[str, Any]] = []
    dropped: list[str] = []
    errors: list[str] = []

    def result() -> dict[str, Any]:
        return _ascii({"source": "nvidia-smi", "fields": fields, "gpus": gpus, "dropped": dropped, "errors": errors})

    text = None
    for _ in range(max_retries):
        try:
            text = run([f"--query-gpu={','.join(fields)}", "--format=csv"])
            break
        except FileNotFoundError:
            errors.append("nvidia-smi: not found on PATH")
            return result()
        except Exception as exc:  # noqa: BLE001 - recorded, never raised
            bad = nvsmi.invalid_field(str(exc))
            if bad is None or bad not in fields:
                errors.append(f"nvidia-smi --query-gpu: {type(exc).__name__}: {str(exc)[:200]}")
                break
            fields.remove(bad)
            dropped.append(bad)
    parsed = nvsmi.parse_query_csv(text, fields) if text is not None else []
    try:
        skus = nvsmi.parse_sku(run(["-q"]))
    except Exception as exc:  # noqa: BLE001
        errors.append(f"nvidia-smi -q: {type(exc).__name__}: {str(exc)[:200]}")
        skus = []
    gpus += [{**g, "sku": skus[i] if i < len(skus) else {k: None for k in nvsmi.SKU_KEYS}} for i, g in enumerate(parsed)]
    return result()


@dataclass(frozen=True)
class TorchFacts:
    """What torch says of itself and of GPU 0 (None where it cannot say)."""

    torch_version: str | None = None
    cuda_version: str | None = None
    gpu_name: str | None = None
    total_vram_bytes: int | None = None
    compute_capability: str | None = None


def _torch_facts(errors: list[str]) -> TorchFacts:
    try:
        import torch  # noqa: PLC0415 (optional dependency)
    except Exception as exc:  # ImportError or a broken install
        errors.append(f"torch: not importable ({type(exc).__name__}: {exc})")
        return TorchFacts()
    versions = {"torch_version": str(torch.__version__), "cuda_version": torch.version.cuda}
    if torch.version.cuda is None:
        errors.append("torch: CPU-only build (torch.version.cuda is None)")
    try:
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            return TorchFacts(**versions, gpu_name=props.name, total_vram_bytes=int(props.total_memory),
                              compute_capability=f"{props.major}.{props.minor}")
        errors.append("torch: no CUDA device available")
    except Exception as exc:
        errors.append(f"torch: device query failed ({type(exc).__name__}: {exc})")
    return TorchFacts(**versions)


def collect_env(repo: Path) -> dict[str, Any]:
    errors: list[str] = []
    tf = _torch_facts(errors)
    smi_query: dict[str, Any] | None = None
    smi_raw: str | None = None
    driver_version = cuda_driver = driver_model = None
    try:
        line = _smi([f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader"]).strip().splitlines()[0]
        smi_query = dict(zip(SMI_FIELDS, [c.strip() for c in line.split(",")], strict=False))
        driver_version = smi_query.get("driver_version")
        dm = smi_query.get("driver_model.current")
        driver_model = None if dm in (None, "[N/A]", "N/A") else dm
        smi_query["limits"] = gpu_limits()
        smi_raw = _smi([])
        for ln in smi_raw.splitlines():
            if "CUDA Version:" in ln:
                cuda_driver = ln.split("CUDA Version:")[1].strip(" |")
    except FileNotFoundError:
        errors.append("nvidia-smi: not found on PATH")
    except Exception as exc:
        errors.append(f"nvidia-smi: {type(exc).__name__}: {exc}")
    gpu_name = smi_query.get("name") if tf.gpu_name is None and smi_query else tf.gpu_name
    git = git_info(repo)
    if git.error:
        errors.append(git.error)
    env = {
        "env_schema_version": ENV_SCHEMA_VERSION,
        "tool_version": f"evpack {__version__}",
        "generated_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "os": platform.platform(),
        "python_version": platform.python_version(),
        "torch_version": tf.torch_version,
        "cuda_version": tf.cuda_version,
        "precision": "fp16,bf16",
        "amp": False,
        "gpu_name": gpu_name,
        "total_vram_bytes": tf.total_vram_bytes,
        "compute_capability": tf.compute_capability,
        "driver_version": driver_version,
        "cuda_driver_reported": cuda_driver,
        "driver_model": driver_model,
        "nvidia_smi_query": smi_query,
        "nvidia_smi_raw": smi_raw,
        "git_commit": git.commit,
        "git_dirty": git.dirty,
        "git_error": git.error,
        "env_vars": {k: os.environ[k] for k in ENV_VAR_ALLOWLIST if k in os.environ},
        "errors": errors,
    }
    assert tuple(env) == ENV_KEYS
    return _ascii(env)


def python_pin_warning() -> str | None:
    """EVPACK_EXPECT_PYTHON names the expected interpreter (a path or a version prefix like 3.12)."""
    want = os.environ.get("EVPACK_EXPECT_PYTHON")
    if not want:
        return None
    have_exe = os.path.realpath(sys.executable)
    have_ver = platform.python_version()
    if os.sep in want:
        if os.path.realpath(want) != have_exe:
            return f"interpreter pin: EVPACK_EXPECT_PYTHON={want} but running {have_exe} (Python {have_ver})"
    elif not (have_ver == want or have_ver.startswith(want + ".")):
        return f"interpreter pin: EVPACK_EXPECT_PYTHON={want} but running Python {have_ver} ({have_exe})"
    return None
