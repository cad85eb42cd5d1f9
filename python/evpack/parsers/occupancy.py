"""Per-arch limits and a static occupancy estimate (pure).

The estimate follows the CUDA occupancy calculator (cuda_occupancy.h,
cudaOccMaxActiveBlocksPerMultiprocessor) for the default launch: registers are
allocated per warp in units of 256 and per SM sub-partition (4 per SM), shared memory in
units of 128 B with 1 KB reserved by the driver per block (sm_80 and later), and the
driver may use the largest shared-memory carveout. Barriers limit blocks as in
cudaOccMaxBlocksPerSMBlockBarrierLimit (sm_90 and later). It is an upper bound: the runtime may pick a
smaller carveout.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ArchLimits:
    arch: str  # sm_XX (an 'a'/'f' suffix maps to the base arch)
    smem_per_block_optin: int  # cudaDevAttrMaxSharedMemoryPerBlockOptin
    smem_per_sm: int  # largest carveout, cudaDevAttrMaxSharedMemoryPerMultiprocessor
    reserved_smem_per_block: int  # cudaDevAttrReservedSharedMemoryPerBlock
    max_threads_per_sm: int
    max_blocks_per_sm: int
    barriers_per_block_slot: int  # named barriers available = this x max blocks per SM
    regs_per_sm: int = 65536
    regs_per_block: int = 65536
    max_regs_per_thread: int = 255
    max_threads_per_block: int = 1024
    reg_alloc_unit: int = 256  # registers, per warp
    sub_partitions: int = 4
    smem_alloc_unit: int = 128  # bytes

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // 32


KB = 1024
# The one table of per-arch limits (CUDA C++ Programming Guide, "Technical Specifications
# per Compute Capability"; cuda_occupancy.h for units, block and barrier limits).
ARCH_LIMITS: dict[str, ArchLimits] = {a.arch: a for a in (
    ArchLimits("sm_75", 64 * KB, 64 * KB, 0, 1024, 16, 2),
    ArchLimits("sm_80", 163 * KB, 164 * KB, 1 * KB, 2048, 32, 2),
    ArchLimits("sm_86", 99 * KB, 100 * KB, 1 * KB, 1536, 16, 1),
    ArchLimits("sm_87", 163 * KB, 164 * KB, 1 * KB, 1536, 16, 1),
    ArchLimits("sm_89", 99 * KB, 100 * KB, 1 * KB, 1536, 24, 1),
    ArchLimits("sm_90", 227 * KB, 228 * KB, 1 * KB, 2048, 32, 2),
    ArchLimits("sm_100", 227 * KB, 228 * KB, 1 * KB, 2048, 32, 2),
    ArchLimits("sm_120", 99 * KB, 100 * KB, 1 * KB, 1536, 24, 1),
)}


def base_arch(arch: str) -> str:
    """sm_90a / sm_100f -> sm_90 / sm_100."""
    m = re.match(r"^(sm_\d+)", arch)
    return m.group(1) if m else arch


def limits_for(arch: str) -> ArchLimits | None:
    return ARCH_LIMITS.get(base_arch(arch))


@dataclass(frozen=True)
class Occupancy:
    arch: str
    blocks_per_sm: int
    warps_per_sm: int
    occupancy: float  # active warps / max warps per SM
    limiter: str  # the limit that sets blocks_per_sm (first of equal ones): warps, registers, smem, blocks, barriers
    limits: dict[str, int]  # blocks per SM allowed by each resource
    smem_per_block_bytes: int  # allocated: static + dynamic + reserved, rounded up


def _major(arch: str) -> int:
    return int(base_arch(arch)[3:]) // 10


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def estimate(arch: str, *, registers: int, threads: int, static_smem: int, dynamic_smem: int = 0,
             barriers: int | None = None) -> Occupancy | None:
    """Blocks per SM for one kernel on one arch; None when the arch is not in ARCH_LIMITS."""
    lim = limits_for(arch)
    if lim is None:
        return None
    big = 1 << 30
    warps_per_block = -(-threads // 32)
    limits: dict[str, int] = {}
    # warps / threads
    limits["warps"] = 0 if threads > lim.max_threads_per_block or threads <= 0 else lim.max_warps_per_sm // warps_per_block
    # registers (cudaOccMaxBlocksPerSMRegsLimit, partitioned global caching off)
    regs_per_warp = _round_up(registers * 32, lim.reg_alloc_unit)
    regs_per_block = regs_per_warp * warps_per_block
    regs_assumed = regs_per_warp * _round_up(warps_per_block, lim.sub_partitions)
    if registers > lim.max_regs_per_thread or regs_per_block > lim.regs_per_block or regs_assumed > lim.regs_per_block:
        limits["registers"] = 0
    elif regs_per_warp == 0:
        limits["registers"] = big
    else:
        warps_per_sub = (lim.regs_per_sm // lim.sub_partitions) // regs_per_warp
        limits["registers"] = warps_per_sub * lim.sub_partitions // warps_per_block
    # shared memory
    smem_alloc = _round_up(static_smem + dynamic_smem + lim.reserved_smem_per_block, lim.smem_alloc_unit)
    if static_smem + dynamic_smem > lim.smem_per_block_optin:
        limits["smem"] = 0
    else:
        limits["smem"] = lim.smem_per_sm // smem_alloc if smem_alloc else big
    limits["blocks"] = lim.max_blocks_per_sm
    if barriers and _major(arch) >= 9:  # the calculator applies block barriers from Hopper on
        limits["barriers"] = lim.barriers_per_block_slot * lim.max_blocks_per_sm // barriers
    limiter = min(limits, key=lambda k: limits[k])
    blocks = max(0, limits[limiter])
    warps = blocks * warps_per_block
    return Occupancy(arch=arch, blocks_per_sm=blocks, warps_per_sm=warps,
                     occupancy=round(warps / lim.max_warps_per_sm, 4), limiter=limiter,
                     limits={k: min(v, big) for k, v in limits.items()}, smem_per_block_bytes=smem_alloc)
