"""Occupancy estimate and per-arch limits; cross-checked against NVIDIA's own calculator
(cuda_occupancy.h, header-only host code) when a C++ compiler and the CUDA headers are present."""
from __future__ import annotations

import itertools
import shutil
import subprocess
from pathlib import Path

import pytest

from evpack import tools
from evpack.parsers import occupancy


def test_opt_in_limits_per_arch():
    lim = {a: occupancy.limits_for(a).smem_per_block_optin for a in ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")}
    assert lim == {"sm_80": 166912, "sm_86": 101376, "sm_89": 101376, "sm_90": 232448, "sm_90a": 232448}
    assert occupancy.limits_for("sm_70") is None
    assert occupancy.base_arch("sm_100f") == "sm_100"


@pytest.mark.parametrize("arch,regs,threads,smem,dyn,blocks,limiter", [
    ("sm_90", 32, 128, 4096, 0, 16, "warps"),  # 64 warps / 4 per block
    ("sm_80", 128, 256, 0, 0, 2, "registers"),  # 4096 regs per warp: 4 warps per sub-partition
    ("sm_90", 33, 128, 0, 0, 12, "registers"),  # 33*32 = 1056 -> 1280 per warp (unit 256)
    ("sm_86", 96, 128, 0, 0, 5, "registers"),
    ("sm_89", 16, 32, 0, 0, 24, "blocks"),  # 24 blocks per SM on Ada
    ("sm_90", 64, 128, 0, 100 * 1024, 2, "smem"),  # 102400 + 1 KB reserved per block
    ("sm_80", 64, 128, 48 * 1024, 32 * 1024, 2, "smem"),
    ("sm_90", 255, 1024, 0, 0, 0, "registers"),  # cannot launch
    ("sm_89", 32, 128, 0, 101377, 0, "warps"),  # over the opt-in limit: 0 (smem also 0, warps listed first)
])
def test_estimate(arch, regs, threads, smem, dyn, blocks, limiter):
    occ = occupancy.estimate(arch, registers=regs, threads=threads, static_smem=smem, dynamic_smem=dyn)
    assert occ.blocks_per_sm == blocks
    if blocks:
        assert occ.limiter == limiter
        assert occ.warps_per_sm == blocks * ((threads + 31) // 32)
    else:
        assert occ.occupancy == 0.0 and occ.limits[limiter if limiter != "warps" else "smem"] == 0


def test_reserved_and_granularity():
    occ = occupancy.estimate("sm_90", registers=32, threads=128, static_smem=1, dynamic_smem=0)
    assert occ.smem_per_block_bytes == 1024 + 128
    assert occupancy.estimate("sm_75", registers=32, threads=128, static_smem=0).smem_per_block_bytes == 0
    assert occupancy.estimate("sm_70", registers=32, threads=128, static_smem=0) is None


def test_barriers_limit_blocks():
    occ = occupancy.estimate("sm_90", registers=16, threads=32, static_smem=0, barriers=3)
    assert occ.limits["barriers"] == 21 and occ.blocks_per_sm == 21 and occ.limiter == "barriers"
    # before Hopper the calculator does not apply the barrier limit
    assert "barriers" not in occupancy.estimate("sm_89", registers=16, threads=32, static_smem=0, barriers=3).limits


# ---- cross-check against cuda_occupancy.h -------------------------------------------------

_CHECK_CPP = r"""
#include <cstdio>
#include <cuda_occupancy.h>
int main() {
  int major, minor, threads_sm, blocks_unused, regs, threads, barriers;
  size_t smem_sm, optin, reserved, smem, dyn;
  while (std::scanf("%d %d %d %zu %zu %zu %d %d %zu %zu %d", &major, &minor, &threads_sm, &smem_sm, &optin,
                    &reserved, &regs, &threads, &smem, &dyn, &barriers) == 11) {
    cudaOccDeviceProp p;
    p.computeMajor = major; p.computeMinor = minor; p.maxThreadsPerBlock = 1024;
    p.maxThreadsPerMultiprocessor = threads_sm; p.regsPerBlock = 65536; p.regsPerMultiprocessor = 65536;
    p.warpSize = 32; p.sharedMemPerBlock = 48 * 1024; p.sharedMemPerMultiprocessor = smem_sm; p.numSms = 1;
    p.sharedMemPerBlockOptin = optin; p.reservedSharedMemPerBlock = reserved;
    cudaOccFuncAttributes a;
    a.maxThreadsPerBlock = 1024; a.numRegs = regs; a.sharedSizeBytes = smem;
    a.partitionedGCConfig = PARTITIONED_GC_OFF; a.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
    a.maxDynamicSharedSizeBytes = optin - smem; a.numBlockBarriers = barriers;
    cudaOccDeviceState s;
    cudaOccResult r;
    cudaOccError e = cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &s, threads, dyn);
    std::printf("%d %d\n", (int)e, r.activeBlocksPerMultiprocessor);
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def nvidia_calculator(tmp_path_factory):
    cxx = shutil.which("g++") or shutil.which("c++")
    home = tools.cuda_home()
    if cxx is None or home is None or not (home / "include" / "cuda_occupancy.h").exists():
        pytest.skip("needs a C++ compiler and CUDA's include/cuda_occupancy.h")
    d = tmp_path_factory.mktemp("occ")
    (d / "check.cpp").write_text(_CHECK_CPP)
    subprocess.run([cxx, "-O1", "-std=c++17", f"-I{home / 'include'}", "check.cpp", "-o", "check"], cwd=d, check=True)
    return d / "check"


def test_matches_cuda_occupancy_h(nvidia_calculator: Path):
    cases = []
    archs = ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]
    for arch, regs, threads, smem, dyn, bar in itertools.product(
            archs, (16, 32, 40, 64, 96, 128, 168, 255), (32, 64, 96, 128, 256, 384, 1024),
            (0, 4096, 40000), (0, 16384, 90000), (0, 1, 2)):
        cases.append((arch, regs, threads, smem, dyn, bar))
    lines = []
    for arch, regs, threads, smem, dyn, bar in cases:
        lim = occupancy.limits_for(arch)
        major, minor = divmod(int(arch[3:]), 10)
        lines.append(f"{major} {minor} {lim.max_threads_per_sm} {lim.smem_per_sm} {lim.smem_per_block_optin} "
                     f"{lim.reserved_smem_per_block} {regs} {threads} {smem} {dyn} {bar}")
    out = subprocess.run([str(nvidia_calculator)], input="\n".join(lines) + "\n", capture_output=True, text=True,
                         check=True).stdout.splitlines()
    mismatches = []
    for case, line in zip(cases, out, strict=True):
        err, blocks = map(int, line.split())
        arch, regs, threads, smem, dyn, bar = case
        ours = occupancy.estimate(arch, registers=regs, threads=threads, static_smem=smem, dynamic_smem=dyn,
                                  barriers=bar)
        theirs = blocks if err == 0 else 0  # the calculator rejects launches that cannot fit
        if ours.blocks_per_sm != theirs:
            mismatches.append((case, ours.blocks_per_sm, theirs, err))
    assert len(cases) > 3000
    assert not mismatches, mismatches[:10]
