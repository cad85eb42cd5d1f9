"""The one registry of kernel variants and their tile configs.

Everything in the pipeline iterates this table: the build generates one
instantiation file per (variant, dtype, head dim), the PTXAS and SASS gates
apply per kernel, and the oracles and the benchmark run every variant x config.

Adding a variant = one kernel body `csrc/variants/<name>.cuh` implementing the
interface documented in docs/adding-a-variant.md + one entry here; a Triton variant
is one file `csrc/triton/<name>.py` (docs/adding-a-triton-variant.md) + one entry
with language="triton".
Canaries (kernels with planted faults) live in CANARIES: built into a separate
extension for the evidence run, never exported through `evpack.flash_attention`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

DTYPES = ("fp16", "bf16")
HEAD_DIMS = (64, 128)
KINDS = ("scalar", "tensor")


@dataclass(frozen=True)
class TileConfig:
    """Compile-time tile shape of one config: rows of Q per CTA, keys per step, warps, K/V stages."""

    name: str
    block_m: int
    block_n: int
    warps: int
    stages: int = 1
    # The head dims this config is built for, of its variant's; empty: every one of them (a config whose
    # registers fit one head dim only, e.g. three consumer warpgroups of wgmma at D=64).
    head_dims: tuple[int, ...] = ()
    # The last round of a launch may be split across the grid (wgmma: scheduler.cuh tail_split): a kernel of
    # its own (TileConfig<..., TAIL_SPLIT> in C++), so the configs without it keep the code they had.
    tail_split: bool = False

    @property
    def threads(self) -> int:
        return 32 * self.warps

    def serves(self, head_dim: int) -> bool:
        return not self.head_dims or head_dim in self.head_dims


@dataclass(frozen=True)
class ResourceBudget:
    """Declared exceptions to the PTXAS gate (0 spill bytes, 0 stack frame by default)."""

    spill_bytes: int = 0
    stack_bytes: int = 0


@dataclass(frozen=True)
class Variant:
    name: str  # C++ namespace evpack::<name>, body in <source>
    kind: str  # "scalar" (CUDA cores only) or "tensor" (must use tensor cores)
    source: str  # path of the kernel body, relative to the repo root
    configs: tuple[TileConfig, ...]
    description: str = ""
    budget: ResourceBudget = field(default_factory=ResourceBudget)
    # Canaries only: which gate must fire on this kernel.
    expect_caught_by: str = ""
    dtypes: tuple[str, ...] = DTYPES
    head_dims: tuple[int, ...] = HEAD_DIMS
    # Targets the variant can only be built for, as EVPACK_CUDA_ARCHS spells them (e.g. ("90a",):
    # wgmma/setmaxnreg exist on the arch-specific sm_90a target alone). Empty: every plain arch of
    # the build. The build compiles such a variant for these archs only, in objects of its own.
    archs: tuple[str, ...] = ()
    # The output is stored by the TMA engine (cp.async.bulk.tensor). compute-sanitizer's initcheck does
    # not record those stores as writes (seen on the H200, 2026-11-22: 7872 "uninitialized" host reads of
    # an output the oracles prove fully written), so this variant's initcheck cells run with
    # --check-api-memory-access no: device-side reads are still checked; "every element written" is the
    # correctness and stability stages' NaN poison.
    tma_output: bool = False
    # "cuda": a .cuh body instantiated by buildgen and compiled by nvcc; "triton": a Python file whose
    # @triton.jit fwd_kernel the build compiles ahead of time with Triton (python/evpack/triton_aot.py) for
    # `archs`, and the extension embeds and launches (csrc/triton_launch.cpp). Configs: BLOCK_M, BLOCK_N,
    # num_warps, num_stages, registered here like the CUDA ones (no autotuning).
    language: str = "cuda"

    @property
    def arch_specific(self) -> bool:
        return bool(self.archs)

    def runs_on(self, capability: tuple[int, int]) -> bool:
        """Whether a device of this compute capability can run the variant's archs (any, if none)."""
        if not self.archs:
            return True
        return any(arch_capability(a) == tuple(capability) for a in self.archs)

    def targets(self, arch: str) -> bool:
        """Whether `arch` (as ptxas/cuobjdump name it: "sm_90a") is one this variant is built for."""
        return not self.archs or arch.removeprefix("sm_") in self.archs

    def head_dims_for(self, cfg: TileConfig) -> tuple[int, ...]:
        """The head dims `cfg` is built at (the variant's, less those the config does not serve)."""
        return tuple(d for d in self.head_dims if cfg.serves(d))

    def configs_for(self, head_dim: int) -> tuple[TileConfig, ...]:
        """The configs built at this head dim (none if the variant is not built for it)."""
        return tuple(c for c in self.configs if c.serves(head_dim)) if head_dim in self.head_dims else ()

    def config(self, name: str | None) -> TileConfig:
        if name is None:
            return self.configs[0]
        for cfg in self.configs:
            if cfg.name == name:
                return cfg
        known = ", ".join(c.name for c in self.configs)
        raise ValueError(f"config: unknown config {name!r} for variant {self.name!r} (known: {known})")


def arch_capability(arch: str) -> tuple[int, int]:
    """'90a' -> (9, 0): the one device generation an arch-specific target runs on."""
    digits = arch.rstrip("af")
    return int(digits[:-1]), int(digits[-1])


def _canary(name: str, source: str, kind: str, description: str, caught_by: str) -> Variant:
    """A canary: one small instantiation (fp16, D=64) is enough to show its gate fires."""
    return Variant(name, kind, source, (_cfg(64, 64, 2),), description, expect_caught_by=caught_by,
                   dtypes=("fp16",), head_dims=(64,))


def _cfg(block_m: int, block_n: int, warps: int, stages: int = 1, head_dims: tuple[int, ...] = (),
         tail_split: bool = False) -> TileConfig:
    name = f"m{block_m}n{block_n}w{warps}s{stages}" + ("t" if tail_split else "")
    return TileConfig(name, block_m, block_n, warps, stages, head_dims, tail_split)


VARIANTS: tuple[Variant, ...] = (
    Variant(
        name="scalar",
        kind="scalar",
        source="csrc/variants/scalar.cuh",
        configs=(_cfg(64, 64, 2),),
        description="CUDA-core control: fp32 FMA for Q.K^T and P.V, online softmax",
    ),
    Variant(
        name="wmma",
        kind="tensor",
        source="csrc/variants/wmma.cuh",
        configs=(_cfg(64, 64, 4), _cfg(32, 64, 2), _cfg(128, 64, 8)),
        description="nvcuda::wmma 16x16x16 fragments, fp32 accumulation, online softmax in shared memory",
    ),
    Variant(
        name="mma",
        kind="tensor",
        source="csrc/variants/mma.cuh",
        # m128n64w4s2: 32 rows (2 row-atoms) per warp, each K/V fragment feeds 2 mma: half the ldmatrix
        #   traffic per mma, 2 CTAs (8 warps) per SM; m64n64w4s2: small tiles, 2x the CTAs for few
        #   (batch, head) pairs, 4 CTAs per SM at D=64; m128n64w8s2: 16 rows per warp, 16 warps per SM at D=64.
        configs=(_cfg(128, 64, 4, 2), _cfg(64, 64, 4, 2), _cfg(128, 64, 8, 2)),
        description="FlashAttention-2 design on mma.sync m16n8k16 + ldmatrix: Q and P in registers, "
        "online exp2 softmax in registers, cp.async K/V ring, XOR-swizzled shared memory",
    ),
    Variant(
        name="wgmma",
        kind="tensor",
        source="csrc/variants/wgmma.cuh",
        # m128n128w12s2: 12 warps = 1 producer warpgroup + 2 consumer warpgroups of 64 rows: 128-row Q tiles
        #   divide S=512; 128-key tiles, 4 per head at S=512; a 2-deep K/V ring (the most that fits at D=128
        #   beside two Q tiles and the O tile). 64-key tiles with a 4-deep ring lost (bench/NOTES.md).
        # m192n128w16s2: 3 consumer warpgroups (setmaxnreg 32/160: head dim 64 only): faster at D=64 without
        #   the causal mask, slower with it (bench/NOTES.md, wgmma section 6); the dispatch table picks per shape.
        # m192n128w16s2t: the same, and a non-causal launch whose last round would leave half the grid idle
        #   splits that round's items into pieces of their K/V tiles (bench/NOTES.md, wgmma sections 9 and 11):
        #   faster at S >= 2048, slower where no split is taken, so it is a config of its own. Causal, each of its
        #   consumer warpgroups stops at its own last row's key tile (wgmma section 13; in the others it cost the
        #   rows without the mask, section 12).
        # m64n128w8s2: one consumer warpgroup of 64 rows: twice the work items of m128, for launches whose 128-row
        #   items would leave SMs idle (B2 H8 S512: 64 items of 128 rows, 128 of 64; bench/NOTES.md, wgmma section 13).
        configs=(_cfg(128, 128, 12, 2), _cfg(192, 128, 16, 2, head_dims=(64,)),
                 _cfg(192, 128, 16, 2, head_dims=(64,), tail_split=True), _cfg(64, 128, 8, 2, head_dims=(64,))),
        description="FlashAttention-3 design for sm_90a: a TMA producer warp, K/V ring on mbarriers, "
        "two consumer warpgroups on wgmma (Q.K^T from shared memory, P.V with P in registers), "
        "setmaxnreg 24/240, exp2 softmax overlapped with the previous tile's P.V",
        archs=("90a",),
        tma_output=True,
    ),
    Variant(
        name="triton",
        kind="tensor",
        source="csrc/triton/flash_fwd.py",
        # Chosen by a same-run sweep on an H200 (2026-11-24, Triton 3.6.0; bench/NOTES.md "Triton variant"):
        # m128n64w8s3 (128-row Q tiles, 64-key tiles, 3-deep K/V pipeline, 8 warps) is the fastest at D=64
        # non-causal; m64n64w4s3 (64-row tiles, 4 warps) at D=64 causal and at D=128. The 128-key configs
        # were slower at every shape and left. sm_90a metadata (Triton 3.7.1): no spills.
        configs=(_cfg(128, 64, 8, 3), _cfg(64, 64, 4, 3)),
        description="FlashAttention-2 design in Triton: Q tile in registers, tl.dot (fp32 accumulation) for "
        "Q.K^T and P.V, online exp2 softmax in fp32, unmasked full tiles then masked boundary tiles; "
        "compiled ahead of time, the cubins embedded in the extension",
        # sm_90a only: on sm_80/sm_89 the 128-row config spills at D=128 (ptxas via Triton 3.7.1, 255
        # registers, 96/64 B spill stores+loads) and the PTXAS gate would fail it; those archs need configs
        # of their own, not registered yet.
        archs=("90a",),
        language="triton",
    ),
)

CANARIES: tuple[Variant, ...] = (
    _canary("canary_oob_write", "oracles/canaries/oob_write.cuh", "scalar",
            "writes one element 2^25 elements past the end of the output", "memcheck"),
    _canary("canary_smem_race", "oracles/canaries/smem_race.cuh", "scalar",
            "reads a neighbour's shared-memory slot with no barrier", "racecheck"),
    _canary("canary_uninit_read", "oracles/canaries/uninit_read.cuh", "scalar",
            "reads the output buffer before anything wrote it", "initcheck"),
    _canary("canary_divergent_sync", "oracles/canaries/divergent_sync.cuh", "scalar",
            "__syncthreads() reached by half of the block", "synccheck"),
    _canary("canary_wrong_result", "oracles/canaries/wrong_result.cuh", "scalar",
            "softmax scale off by 5%", "correctness"),
    _canary("canary_second_launch", "oracles/canaries/second_launch.cuh", "scalar",
            "correct on the first launch, corrupts one element from the second on", "stability"),
    _canary("canary_decoy_hmma", "oracles/canaries/decoy_hmma.cuh", "tensor",
            "contains an HMMA whose result is never used; the math runs on CUDA cores", "tensor_proof"),
    _canary("canary_memo", "oracles/canaries/memo.cuh", "scalar",
            "stale results: a host-side memo keyed by pointers, shape, causal and scale skips the launch on a "
            "repeat", "stability"),
    _canary("canary_wrong_stream", "oracles/canaries/wrong_stream.cuh", "scalar",
            "wrong stream: launches on the legacy default stream whatever stream the caller passed", "stability"),
    _canary("canary_partial_write", "oracles/canaries/partial_write.cuh", "scalar",
            "partial write: never stores the last row of each 64-row query tile", "correctness"),
    _canary("canary_input_mutation", "oracles/canaries/input_mutation.cuh", "scalar",
            "input mutation: doubles q in place after reading it", "correctness"),
    _canary("canary_side_stream", "oracles/canaries/side_stream.cuh", "scalar",
            "impossible speed: the work runs on a private stream the timing events never see", "bench"),
    _canary("canary_foreign_work", "oracles/canaries/foreign_work.cuh", "tensor",
            "foreign work: both matrix products by cuBLAS, only the softmax by a kernel of this binary",
            "tensor_proof"),
    Variant("canary_serialized_wgmma", "tensor", "oracles/canaries/serialized_wgmma.cuh", (_cfg(64, 64, 4),),
            "writes the key mask into wgmma accumulators still in flight: ptxas serialises its wgmma",
            expect_caught_by="ptxas", dtypes=("fp16",), head_dims=(64,), archs=("90a",)),
    # Two configs whose outputs are bitwise equal: under capture each hands its call to the other's kernel.
    Variant("canary_capture_aware", "scalar", "oracles/canaries/capture_aware.cuh", (_cfg(64, 64, 2), _cfg(32, 64, 1)),
            "capture-aware: under CUDA-graph capture the launch hands the call to another config's kernel "
            "(same bits, another kernel in the graph)", expect_caught_by="stability", dtypes=("fp16",),
            head_dims=(64,)),
    _canary("canary_output_alias", "oracles/canaries/output_alias.cuh", "scalar",
            "output aliasing: keeps the previous call's output as its own buffer; call 2 overwrites call 1's output",
            "stability"),
    Variant("canary_fp16_accum", "tensor", "oracles/canaries/fp16_accum.cuh", (_cfg(64, 64, 4),),
            "precision downgrade: part of Q.K^T on mma.sync with fp16 accumulators (HMMA.16816.F16), within the "
            "bound on normal inputs", expect_caught_by="sass", dtypes=("fp16",), head_dims=(64,)),
    Variant("canary_input_family", "tensor", "oracles/canaries/input_family.cuh", (_cfg(64, 64, 4),),
            "structured-input fast path: K and V saturate at +-512; right on normal, Student-t and sharp inputs, "
            "wrong on outlier channels", expect_caught_by="correctness", dtypes=("fp16",), head_dims=(64,)),
    _canary("canary_content_cache", "oracles/canaries/content_cache.cuh", "scalar",
            "content-keyed cache: a per-CTA copy of each output tile, keyed on a sample of the input content, "
            "returned instead of computing when that sample repeats", "bench"),
    Variant("canary_triton_decoy", "tensor", "oracles/canaries/triton_decoy.py", (_cfg(64, 16, 4, 1),),
            "Triton decoy: the math runs on CUDA cores one key at a time; one tl.dot per CTA (HGMMA/HMMA in the "
            "SASS) feeds the output only through a product with zero", expect_caught_by="tensor_proof",
            dtypes=("fp16",), head_dims=(64,), archs=("80", "89", "90a"), language="triton"),
    _canary("canary_timing_aware", "oracles/canaries/timing_aware.cuh", "scalar",
            "timing-aware: a call within 2 ms of the previous one (a timed or warm-up loop) copies the last "
            "computed output instead of computing", "bench"),
)


LANGUAGES = ("cuda", "triton")


def variants(include_canaries: bool = False) -> tuple[Variant, ...]:
    return VARIANTS + CANARIES if include_canaries else VARIANTS


def get(name: str, include_canaries: bool = False) -> Variant:
    for v in variants(include_canaries):
        if v.name == name:
            return v
    known = ", ".join(v.name for v in VARIANTS)
    raise ValueError(f"variant: unknown variant {name!r} (known: {known})")


def kernel_grid(include_canaries: bool = False):
    """Every (variant, config, dtype, head_dim) the build instantiates."""
    for v in variants(include_canaries):
        for cfg in v.configs:
            for dtype in v.dtypes:
                for d in v.head_dims_for(cfg):
                    yield v, cfg, dtype, d
