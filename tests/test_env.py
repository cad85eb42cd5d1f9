"""env.json v1: exact keys in order, ASCII, and no crash without GPU, nvidia-smi, torch or git."""
from __future__ import annotations

import json
import os
import sys

from conftest import REPO, run_cli

from evpack.envlock import ENV_KEYS

V1_KEYS = ["env_schema_version", "tool_version", "generated_utc", "os", "python_version", "torch_version",
           "cuda_version", "precision", "amp", "gpu_name", "total_vram_bytes", "compute_capability",
           "driver_version", "cuda_driver_reported", "driver_model", "nvidia_smi_query", "nvidia_smi_raw",
           "git_commit", "git_dirty", "git_error", "env_vars", "errors"]


def test_schema_constant_is_v1():
    assert list(ENV_KEYS) == V1_KEYS


def _env_json(tmp_path, env):
    proc = run_cli("env", "--out-dir", str(tmp_path), env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"WROTE env.json: {tmp_path / 'env.json'}"
    raw = (tmp_path / "env.json").read_bytes()
    raw.decode("ascii")  # ASCII only
    return json.loads(raw)


def test_env_json_on_this_machine(tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0", SECRET_TOKEN="x")
    data = _env_json(tmp_path, env)
    assert list(data) == V1_KEYS
    assert data["env_schema_version"] == "v1"
    assert data["env_vars"] == {"CUDA_VISIBLE_DEVICES": "0"}  # allowlist only
    assert isinstance(data["errors"], list)


def test_env_json_without_gpu_smi_torch_or_git(tmp_path):
    hide = tmp_path / "hide"
    (hide / "torch").mkdir(parents=True)
    (hide / "torch" / "__init__.py").write_text("raise ImportError('torch hidden for this test')\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(sys.executable, bindir / "python3")
    env = {"PATH": str(bindir), "PYTHONPATH": os.pathsep.join([str(hide), str(REPO / "python")]),
           "HOME": str(tmp_path)}
    data = _env_json(tmp_path / "out", env)
    assert list(data) == V1_KEYS
    for key in ("torch_version", "gpu_name", "total_vram_bytes", "driver_version", "nvidia_smi_query",
                "nvidia_smi_raw", "git_commit", "git_dirty"):
        assert data[key] is None, key
    errs = " | ".join(data["errors"])
    assert "torch: not importable" in errs and "nvidia-smi: not found" in errs and "git not found" in errs
    assert data["git_error"] == "git not found on PATH"
