"""Nsight Compute CSV parsing and the executed-tensor-work arithmetic, on real ncu output.

Fixtures (tests/fixtures/README.md): `ncu_metrics_*.csv` from the probe program
(tests/fixtures/probe/probe.cu) and `pack_*.log` + manifests from the tensor_proof stage of
reference pack 20261121T142018Z-b40b5c2fd4c6, all captured on an H200.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evpack.parsers.ncu import COVERAGE_MIN, HFMA2_INST, HMMA_INST, parse_ncu_csv, required_flops, tile_padded_flops

FIX = Path(__file__).parent / "fixtures" / "ncu"


def _probe(name: str):
    (k,) = parse_ncu_csv((FIX / f"ncu_metrics_{name}.csv").read_text(encoding="utf-8"))
    return k


def _pack(name: str):
    kernels = parse_ncu_csv((FIX / f"pack_{name}.log").read_text(encoding="utf-8"))
    calls = json.loads((FIX / f"pack_{name}.manifest.json").read_text(encoding="utf-8"))["calls"]
    assert len(kernels) == len(calls)
    return list(zip(kernels, calls, strict=True))


def test_probe_wmma_gemm_counts_its_flops():
    k = _probe("wmma")
    assert k.kernel.startswith("wmma_gemm(")
    assert k.tensor_flops == 2 * 64 * 64 * 64 * 4  # a 64^3 GEMM repeated 4 times, FMA = 2 operations
    assert k.tensor_math_inst == 512


def test_probe_scalar_gemm_has_tensor_pipe_moves_but_no_tensor_math():
    """The trap: HFMA2.MMA register moves show up on the tensor pipe of a CUDA-core kernel."""
    k = _probe("scalar")
    assert k.values[HMMA_INST] == 128 and k.values[HFMA2_INST] == 128
    assert k.tensor_flops == 0 and k.tensor_math_inst == 0


def test_probe_decoy_executes_one_mma_per_warp_only():
    k = _probe("decoy")
    assert k.tensor_flops == 4 * 2 * 16 * 16 * 16  # 4 warps x one 16x16x16 mma_sync
    assert k.tensor_flops / (2 * 64**3 * 4) < 0.02  # against the GEMM it pretends to do


def test_required_and_padded_flops_arithmetic():
    assert required_flops(2, 8, 512, 64, False) == 4 * 2 * 8 * 512 * 512 * 64
    assert required_flops(1, 1, 3, 1, True) == 4 * 6  # pairs (i, j <= i) of 3 rows: 1 + 2 + 3
    assert tile_padded_flops(2, 8, 512, 64, False, 64, 64) == required_flops(2, 8, 512, 64, False)
    # causal, one 64x64 tile per step up to the diagonal: 8 query tiles see 1..8 key tiles = 36 tiles
    assert tile_padded_flops(2, 8, 512, 64, True, 64, 64) == 4 * 2 * 8 * 36 * 64 * 64 * 64
    assert tile_padded_flops(1, 1, 65, 64, False, 64, 64) == 4 * (2 * 64) * (2 * 64) * 64  # tails padded


def test_pack_mma_calls_cover_their_required_flops():
    rows = _pack("mma")
    assert len(rows) == 24
    for k, call in rows:
        assert call["required_flops"] == required_flops(call["B"], call["H"], call["S"], call["D"], call["causal"])
        assert k.tensor_flops >= COVERAGE_MIN * call["required_flops"], (call, k.tensor_flops)
        assert k.tensor_flops <= call["tile_padded_flops"], (call, k.tensor_flops)
        if not call["causal"]:
            assert k.tensor_flops == call["required_flops"]  # S=512 is a whole number of tiles


def test_pack_scalar_calls_execute_no_tensor_math():
    rows = _pack("scalar")
    assert len(rows) == 8
    for k, _ in rows:
        assert k.tensor_flops == 0 and k.tensor_math_inst == 0
        assert k.values[HMMA_INST] == k.values[HFMA2_INST] > 0  # only HFMA2.MMA moves on the tensor pipe


def test_pack_decoy_is_far_below_coverage():
    rows = _pack("canary_decoy_hmma")
    for k, call in rows:
        assert k.tensor_math_inst > 0  # its HMMA really executes...
        assert k.tensor_flops / call["required_flops"] < 0.01  # ...but does not do the attention's math


def test_no_csv_header_is_an_error():
    with pytest.raises(ValueError, match="no ncu CSV header"):
        parse_ncu_csv("==ERROR== the application returned an error\n")


# ---- the wgmma path (Hopper) ------------------------------------------------------------------

def _queried_metric_names() -> set[str]:
    """Base names listed by `ncu --query-metrics` on the H200 (fixture, filtered to tensor metrics)."""
    text = (FIX / "query_tensor_metrics.txt").read_text(encoding="utf-8")
    return {ln.split()[0] for ln in text.splitlines() if ln.strip()}


def test_every_collected_metric_exists_on_the_h200():
    from evpack.parsers.ncu import METRICS

    names = _queried_metric_names()
    missing = [m for m in METRICS if m.rsplit(".", 1)[0] not in names]
    assert not missing, missing


def test_executed_flops_cover_the_wgmma_path():
    from evpack.parsers.ncu import GENERIC_TENSOR_OPS_METRICS, HGMMA_OPS_METRICS, TENSOR_OPS_METRICS

    names = _queried_metric_names()
    hgmma = {m.rsplit(".", 1)[0] for m in HGMMA_OPS_METRICS}
    # every HGMMA counter of an fp16/bf16 source that ncu offers (without its dst/sparsity splits) is summed
    offered = {n for n in names if n.startswith("sm__ops_path_tensor_op_hgmma_src_") and "sparsity" not in n
               and ("fp16" in n or "bf16" in n)}
    assert offered == hgmma
    assert set(HGMMA_OPS_METRICS) <= set(TENSOR_OPS_METRICS)
    assert {m.rsplit(".", 1)[0] for m in GENERIC_TENSOR_OPS_METRICS} <= names


def test_hmma_kernels_unchanged_and_old_profiles_have_no_generic_total():
    for k, _ in _pack("mma"):
        assert k.hgmma_flops == 0 and k.tensor_flops > 0
        assert k.generic_tensor_flops is None  # recorded only by profiles that asked for it
    k = _probe("wmma")
    assert k.tensor_flops == 2 * 64 * 64 * 64 * 4
