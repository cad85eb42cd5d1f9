// mma: flash-attention forward in the FlashAttention-2 design, on raw mma.sync.m16n8k16 tensor-core
// instructions (T inputs, fp32 accumulators), ldmatrix fragment loads, a cp.async K/V pipeline and
// the whole online softmax in registers. Needs sm_80+ (cp.async, bf16 mma); no wgmma, so the same
// source builds for sm_80, sm_89 and sm_90.
//
// Work split: a CTA owns BLOCK_M query rows of one (batch, head); warp w owns the ROWS_PER_WARP =
// BLOCK_M / WARPS rows [w * ROWS_PER_WARP, +ROWS_PER_WARP) = kAtoms (1 or 2) row-atoms of 16 rows.
// Registers of one thread (g = lane / 4, t = lane % 4; see "Fragment layouts" below):
//   rQ  (kAtoms, D/16, 4)    u32 (T pairs)  A fragments of its Q rows, loaded once (if kQInRegs)
//   rS  (kAtoms, kSubN/8, 4) fp32           scores of the current key step, then P in place
//   rO  (kAtoms, D/8, 4)     fp32           unnormalised output
//   m, l (kAtoms, 2)         fp32           running max (log2 units) / partial sum of rows g, g + 8
// Shared memory (dynamic), every tile row-major with 16-byte chunks XOR-swizzled (see swz()):
//   ring  STAGES x (K (BLOCK_N, D), V (BLOCK_N, D))  T  K/V tiles in flight and in use
//   sQ    (BLOCK_M, D)                               T  Q tile: in the last ring slot when Q goes to
//                                                       registers (see Layout), else after the ring;
//                                                       each warp stages its O rows here at the end
//
// Per K/V tile j (ring slot j % STAGES; tile j + STAGES - 1 is copied meanwhile by cp.async), in
// steps of kSubN keys (BLOCK_N, or BLOCK_N / 2 where the fragments would not fit in registers):
//   rS = Q.K^T                                    mma, B fragments by ldmatrix from the K tile
//   m' = max(m, rowmax(rS) * scale * log2 e)      quad shuffles (a row lives in 4 lanes)
//   P = exp2(rS * scale * log2 e - m')            one FFMA + ex2 per score
//   l = l * 2^(m - m') + rowsum(P);  rO *= 2^(m - m')
//   rO += P.V                                     P converted to T in registers is the A operand
//                                                 as is; B fragments by ldmatrix.trans from the V tile
// Epilogue: rO / l (l reduced over the quad) -> T -> this warp's rows of sQ -> 16-byte global stores.
//
// Masks: keys >= seqlen (zero-filled in the ring, -inf scores) and, causal (top-left), keys > row.
// Only steps that cross seqlen or the diagonal of a warp's rows pay for the mask (BOOL_SWITCH);
// causal CTAs stop at their last row, warps skip steps entirely above their rows.
// scale > 0 is assumed (the Python API enforces it): rowmax(s) * scale == rowmax(s * scale).
//
// ---- Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16", 16-bit A/B, fp32 C/D) ----
// g = lane >> 2 (group, 0..7), t = lane & 3 (thread in group, 0..3). A register holding two
// 16-bit elements keeps the lower column (A, C) / lower k row (B) in its low half.
//   A (16 x 16, row-major, "row"):  a0: (g,     2t..2t+1)   a1: (g + 8, 2t..2t+1)
//                                   a2: (g,   8+2t..2t+9)   a3: (g + 8, 8+2t..2t+9)
//   B (16 x 8, k x n, "col"):       b0: (k = 2t..2t+1, n = g)   b1: (k = 8+2t..2t+9, n = g)
//   C/D (16 x 8 fp32):              c0, c1: (g, 2t), (g, 2t+1)   c2, c3: (g + 8, 2t), (g + 8, 2t+1)
// ldmatrix.x4: lanes 8i..8i+7 give the 16-byte row addresses of 8x8 matrix i (i = 0..3); register
//   ri of every lane receives matrix i: without .trans the element pair (row g, cols 2t, 2t+1);
//   with .trans the pair (rows 2t, 2t+1; col g) -- i.e. the transposed matrix's (g, 2t..2t+1).
// What the kernel builds from these:
//   Q (A of S = Q.K^T): x4 on matrices (rows 0-7, cols 0-7), (rows 8-15, cols 0-7),
//     (rows 0-7, cols 8-15), (rows 8-15, cols 8-15) of the 16x16 block -> a0, a1, a2, a3.
//     Lane l points at row l % 16, 8-column chunk l / 16.
//   K (B of S = Q.K^T, B[k = dim][n = key] = K[key][dim]): a non-transposed 8x8 load of K rows
//     (key g, dims 2t..2t+1) is exactly b0 (or b1 for dims 8..15). x4 on (keys 0-7, dims 0-7),
//     (keys 0-7, dims 8-15), (keys 8-15, dims 0-7), (keys 8-15, dims 8-15) -> b0, b1 of n-atom 0,
//     b0, b1 of n-atom 1. Lane l points at key (l / 16) * 8 + l % 8, chunk (l / 8) % 2.
//   P (A of O += P.V): C fragments of S n-atoms 2kk and 2kk+1 are the A fragment of k-step kk:
//     a0 = (c0, c1) of atom 2kk, a1 = (c2, c3) of atom 2kk, a2 = (c0, c1) of atom 2kk+1,
//     a3 = (c2, c3) of atom 2kk+1 (rows g / g+8, keys 16kk + 2t / 16kk + 8 + 2t). No smem trip.
//   V (B of O += P.V, B[k = key][n = dim] = V[key][dim]): x4.trans on (keys 0-7, dims 0-7),
//     (keys 8-15, dims 0-7), (keys 0-7, dims 8-15), (keys 8-15, dims 8-15) -> b0, b1 of dim
//     atom 0, b0, b1 of dim atom 1. Lane l points at key l % 16, chunk l / 16.
#pragma once

#include <cstdint>
#include <cstring>

#include <cuda_runtime.h>

#include "evpack/kernel_common.cuh"
#include "evpack/params.h"
#include "evpack/registry.h"
#include "evpack/static_switch.h"
#include "evpack/traits.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "evpack mma variant: needs sm_80 or newer (cp.async, bf16 mma.sync)"
#endif

namespace evpack {
namespace mma {

constexpr int kAtomM = 16;  // rows of one m16n8k16 atom
constexpr int kAtomN = 8;   // columns of one C atom
constexpr int kAtomK = 16;  // reduction depth of one atom
constexpr int kChunkElems = 8;  // one 16-byte chunk of a shared-memory row = 8 elements of T

// ---- PTX wrappers ------------------------------------------------------------------------------
// Four 8x8 matrices of 16-bit elements; lane l gives the row address for matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t s_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s_addr)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t s_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s_addr)
               : "memory");
}

// d += A.B for one m16n8k16 atom, fp32 accumulation.
template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                     uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                            uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x on the SFU whatever the -use_fast_math setting; ex2.approx.ftz(-inf) = +0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
// ---- end of PTX wrappers -----------------------------------------------------------------------

// Byte offset of 16-byte chunk `chunk` of row `row` in a row-major tile of kChunks chunks per row.
// The chunk index is XORed with row % 8: the 8 rows an ldmatrix phase reads at one logical chunk,
// and the 8 chunks a cp.async phase writes in one row, land in 8 different 16-byte bank groups.
template <int kChunks>
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  static_assert(kChunks % 8 == 0, "mma: swizzle needs rows of at least 8 chunks (128 bytes)");
  return uint32_t(row * kChunks + (chunk ^ (row & 7))) * 16u;
}

// The same swizzle for the ldmatrix reads of one lane, split into registers and immediates. A lane reads
// chunk 2i + bit (bit: 0 or 1, fixed per lane) of rows r with r % 8 == x7 (fixed per lane), so
//   (2i + bit) ^ x7 = 2i ^ y = 8 * (i / 4) + ((2i % 8) ^ y),   y = bit ^ x7,
// and 4 per-lane offsets (i % 4) serve every i; the rest is a compile-time immediate. Measured against
// plain swz() addresses (ptxas -v + cuobjdump, sm_90 fp16): m128n64w4s2 D=128 240 fewer SASS
// instructions and 9 fewer registers, m128n64w8s2 D=128 160 and 18, m128n64w4s2 D=64 80 and 0.
struct LaneChunks {
  uint32_t off[4];  // bytes: chunk (2i % 8) ^ y of a row, i = 0..3
  __device__ __forceinline__ LaneChunks(int bit, int x7) {
#pragma unroll
    for (int i = 0; i < 4; ++i) off[i] = uint32_t((2 * i) ^ (bit ^ x7)) * 16u;
  }
  // Byte offset in its row of chunk 2i + bit (i a compile-time constant after unrolling).
  __device__ __forceinline__ uint32_t pair(int i) const { return off[i % 4] + uint32_t(i / 4) * 128u; }
};

template <class Cfg, class T, int kHeadDim>
struct Layout {
  static constexpr int BM = Cfg::kBlockM, BN = Cfg::kBlockN, D = kHeadDim, kStages = Cfg::kStages;
  static constexpr int kRowsPerWarp = BM / Cfg::kWarps;
  static constexpr int kAtoms = kRowsPerWarp / kAtomM;  // row-atoms per warp
  static constexpr int kQKSteps = D / kAtomK;           // k-steps of S = Q.K^T
  static constexpr int kOAtoms = D / kAtomN;            // n-atoms of O
  static constexpr int kChunks = D / kChunkElems;       // 16-byte chunks per tile row

  // Q A-fragments stay in registers when they take at most 32 per thread (D = 64 always; D = 128 with
  // one row-atom). Two row-atoms at D = 128 would need 64 on top of 128 for rO: those kernels re-read
  // Q from sQ (ldmatrix) every k-step, as FlashAttention-2 does.
  static constexpr int kQRegs = kAtoms * kQKSteps * 4;
  static constexpr bool kQInRegs = kQRegs <= 32;

  // Keys per softmax step (kSubN): the whole BLOCK_N tile unless the fragments rO + rS (+ rQ) would
  // pass 160 registers per thread; then the tile is processed in halves. ptxas -v, sm_90, fp16:
  // m128n64w4s2 D=64 (160 fragment registers) uses 240 registers, no spill; m128n64w4s2 D=128 with
  // kSubN = 64 (192) spills 16 bytes at 255 (K/V copy addresses, reloaded every tile), with
  // kSubN = 32 (160) it uses 239 and does not.
  static constexpr int kFixedFragRegs = kAtoms * kOAtoms * 4 + (kQInRegs ? kQRegs : 0);  // rO (+ rQ)
  static constexpr int s_regs(int keys) { return kAtoms * (keys / kAtomN) * 4; }          // rS
  static constexpr int kSubN = kFixedFragRegs + s_regs(BN) <= 160 ? BN : BN / 2;
  static constexpr int kSubTiles = BN / kSubN;
  static constexpr int kSAtoms = kSubN / kAtomN;   // n-atoms of one step's S
  static constexpr int kPVSteps = kSubN / kAtomK;  // k-steps of one step's O += P.V
  static constexpr int kFragRegs = kFixedFragRegs + s_regs(kSubN);

  // CTAs per SM promised to ptxas (__launch_bounds__): as many as fit in 64 K registers at
  // kFragRegs + 48 per thread. Measured (ptxas -v, sm_80/89/90): fragments + 48 is spill-free in every
  // config (1 atom D=64: 80 fragments -> 123-128 used under a 128 cap); fragments + 40 is not (1 atom
  // D=128 under 168: 16 B spilled, the per-thread K/V copy offsets). Without a cap ptxas spends
  // 200-250 registers on prefetch and fits fewer CTAs per SM.
  static constexpr int kRegBudget = (kFragRegs + 48 + 7) / 8 * 8;
  static constexpr int kMinBlocks = 65536 / (Cfg::kThreads * kRegBudget) > 0 ? 65536 / (Cfg::kThreads * kRegBudget) : 1;

  // Shared memory: a ring of kStages (K tile, V tile) pairs. With Q in registers, the Q tile is staged
  // in the last ring slot, which the prologue leaves free (its first K/V copy is issued after the loop's
  // first barrier, by which time every warp holds its Q fragments); otherwise sQ follows the ring.
  static constexpr size_t kQBytes = size_t(BM) * D * sizeof(T);
  static constexpr size_t kTileBytes = size_t(BN) * D * sizeof(T);  // one K or one V tile
  static constexpr size_t kStageBytes = 2 * kTileBytes;              // K tile, then V tile
  static constexpr size_t kRingBytes = kStages * kStageBytes;
  static constexpr size_t kQOffset = kQInRegs ? (kStages - 1) * kStageBytes : kRingBytes;
  static constexpr size_t kBytes = kQOffset + kQBytes > kRingBytes ? kQOffset + kQBytes : kRingBytes;
};

// Rows [row0, row0 + kRows) of a (seqlen, D) global matrix -> swizzled tile at s_dst; rows past
// seqlen are zero-filled (finite: a masked p = 0 must never meet a NaN in V).
// Thread tid copies chunk tid % kChunks of rows tid / kChunks + i * kRowStep: 8 consecutive lanes fill
// 128 contiguous bytes of one row, and since kRowStep % 8 == 0 every row it copies has the same
// swizzle, so its shared addresses differ by immediates and its global ones by one 64-bit step.
template <int kThreads, int kRows, int kChunks, class T>
__device__ __forceinline__ void copy_rows_swizzled(uint32_t s_dst, const T* g_src, int64_t g_stride, int row0,
                                                int seqlen, int tid) {
  constexpr int kRowStep = kThreads / kChunks;  // rows per pass of the CTA
  static_assert(kThreads % kChunks == 0 && kRowStep % 8 == 0 && kRows % kRowStep == 0,
                "mma: a tile copy must split into whole passes of whole swizzle periods");
  const int r = tid / kChunks, ch = tid % kChunks;
  const uint32_t s = s_dst + swz<kChunks>(r, ch);
  const T* g = g_src + int64_t(row0 + r) * g_stride + ch * kChunkElems;
  const int64_t g_step = int64_t(kRowStep) * g_stride;
  const int rows_left = seqlen - row0 - r;  // pass i copies a real row while i * kRowStep < rows_left
#pragma unroll
  for (int i = 0; i < kRows / kRowStep; ++i) {
    const bool valid = i * kRowStep < rows_left;
    cp_async_16(s + i * kRowStep * kChunks * 16, valid ? g : g_src, valid);  // invalid: any mapped address
    g += g_step;
  }
}

// Online-softmax step for one warp's (kAtoms * 16, kSubN) scores (see the header comment).
// kMask: apply the seqlen and causal masks (steps crossing seqlen or this warp's diagonal only).
// row0: query row of (atom 0, group 0); key0: key of (n-atom 0, column 0) -- both of lane 0.
template <bool kMask, class L>
__device__ __forceinline__ void softmax_rescale(float (&rS)[L::kAtoms][L::kSAtoms][4],
                                                float (&rO)[L::kAtoms][L::kOAtoms][4],
                                                float (&m_run)[L::kAtoms][2], float (&l_run)[L::kAtoms][2],
                                                int lane, int row0, int key0, int seqlen, bool causal,
                                                float scale_log2) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int a = 0; a < L::kAtoms; ++a) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {  // hr = 0: row g (c0, c1); hr = 1: row g + 8 (c2, c3)
      if (kMask) {
        const int row = row0 + a * kAtomM + hr * 8 + g;
#pragma unroll
        for (int n = 0; n < L::kSAtoms; ++n)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int key = key0 + n * kAtomN + 2 * t + c;
            if (key >= seqlen || (causal && key > row)) rS[a][n][2 * hr + c] = -INFINITY;
          }
      }
      float mx = -INFINITY;  // raw-score max of the row over this lane's 2 * kSAtoms columns...
#pragma unroll
      for (int n = 0; n < L::kSAtoms; ++n) mx = fmaxf(mx, fmaxf(rS[a][n][2 * hr], rS[a][n][2 * hr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // ...then over the 4 lanes of the quad
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_run[a][hr], mx * scale_log2);  // log2 units
      // A row whose keys are all masked so far keeps m = -inf; subtract 0 instead so p = 0, not NaN.
      // (Top-left causal with seqlen >= 1 never leaves a row without key 0, but stay safe.)
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2_approx(m_run[a][hr] - m_use);  // 0 on the first step (m_run = -inf)
      m_run[a][hr] = m_new;
      float sum = 0.0f;  // this lane's part of the row sum; the quad is reduced once, in the epilogue
#pragma unroll
      for (int n = 0; n < L::kSAtoms; ++n)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float pr = exp2_approx(fmaf(rS[a][n][2 * hr + c], scale_log2, -m_use));  // masked: 0
          rS[a][n][2 * hr + c] = pr;
          sum += pr;
        }
      l_run[a][hr] = l_run[a][hr] * alpha + sum;
#pragma unroll
      for (int dn = 0; dn < L::kOAtoms; ++dn) {
        rO[a][dn][2 * hr] *= alpha;
        rO[a][dn][2 * hr + 1] *= alpha;
      }
    }
  }
}

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, (Layout<Cfg, T, kHeadDim>::kMinBlocks)) fwd_kernel(FwdParams p) {
  using L = Layout<Cfg, T, kHeadDim>;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "mma: head_dim must be 64 or 128");
  static_assert(L::kChunks % 8 == 0, "mma: rows of at least 128 bytes (whole swizzle periods)");
  static_assert(Cfg::kBlockN % (2 * kAtomK) == 0, "mma: BLOCK_N must be a multiple of 32 (halves of 16-key steps)");
  static_assert(Cfg::kBlockM % (kAtomM * Cfg::kWarps) == 0 && L::kAtoms >= 1 && L::kAtoms <= 2,
                "mma: BLOCK_M == WARPS * 16 * row_atoms with 1 or 2 row-atoms per warp");
  static_assert(Cfg::kStages >= 2, "mma: the K/V ring needs at least 2 stages");
  static_assert(L::kFragRegs <= 160, "mma: fragments past 160 registers per thread spill (see Layout)");
  static_assert(L::kBytes <= 99 * 1024, "mma: over sm_89's 99 KB of shared memory per block");
  static_assert(L::kQBytes % 1024 == 0 && L::kTileBytes % 1024 == 0,
                "mma: tiles start 1 KB aligned (whole swizzle periods)");
  static_assert(32 % L::kChunks == 0 && L::kRowsPerWarp % (32 / L::kChunks) == 0,
                "mma: the epilogue stores whole O rows, a lane per 16-byte chunk");

  constexpr int BN = L::BN, kThreads = Cfg::kThreads, kStages = Cfg::kStages;
  constexpr int kAtoms = L::kAtoms, kChunks = L::kChunks, kSubN = L::kSubN;
  constexpr uint32_t kRowBytes = kChunks * 16;

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sRing = smem_u32(smem);              // kStages x (K (BN, D), V (BN, D)), swizzled
  const uint32_t sQ = smem_u32(smem + L::kQOffset);   // (BM, D) swizzled; O staging in the epilogue

  const int tid = threadIdx.x, lane = tid % 32;
  // Broadcast from lane 0: ptxas then knows `warp` (and every branch on it) is warp-uniform and does not
  // wrap each shuffle of a conditional step in a divergence fallback (BRA.DIV + WARPSYNC).
  const int warp = __shfl_sync(0xffffffffu, tid / 32, 0);
  const int g = lane >> 2, t = lane & 3;  // fragment coordinates (see the header comment)
  // Causal CTAs with more query rows have more keys: launch those first (x is scheduled fastest).
  const int m0 = (gridDim.x - 1 - blockIdx.x) * L::BM;  // first query row of this CTA
  const int b = blockIdx.y / p.heads, h = blockIdx.y % p.heads;
  const int S = p.seqlen;
  const HeadTiles<T> gHead = head_tiles<T>(p, b, h);
  const T* gQ = gHead.q;  // (S, D)
  const T* gK = gHead.k;  // (S, D)
  const T* gV = gHead.v;  // (S, D)
  T* gO = gHead.o;        // (S, D)

  const int warp_row_off = warp * L::kRowsPerWarp;  // this warp's first row in the tile
  const int warp_row0 = m0 + warp_row_off;           // ... and in the sequence
  const int warp_row_last = warp_row0 + L::kRowsPerWarp - 1;

  const int kv_end = p.causal ? min(S, m0 + L::BM) : S;  // keys any row of this CTA can see
  const int n_tiles = (kv_end + BN - 1) / BN;            // >= 1 (m0 < S)

  auto copy_kv_tile = [&](int tile, int stage) {  // K and V tile `tile` -> ring slot `stage`
    const uint32_t slot = sRing + stage * L::kStageBytes;
    copy_rows_swizzled<kThreads, BN, kChunks>(slot, gK, p.k_row_stride, tile * BN, S, tid);
    copy_rows_swizzled<kThreads, BN, kChunks>(slot + L::kTileBytes, gV, p.v_row_stride, tile * BN, S, tid);
  };

  // ---- prologue: Q, then K/V tiles 0 .. kStages-2, one cp.async group each -----------------------
  copy_rows_swizzled<kThreads, L::BM, kChunks>(sQ, gQ, p.q_row_stride, m0, S, tid);
  cp_async_commit();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_tiles) copy_kv_tile(s, s);
    cp_async_commit();  // possibly empty: every thread always counts kStages - 1 groups here
  }
  cp_async_wait<kStages - 1>();  // the Q group has landed
  __syncthreads();

  // ldmatrix row addresses of this lane (see "Fragment layouts"); every row it reads has row % 8 == lane % 8.
  //   Q, row-atom a, k-step kk:   row warp_row_off + 16a + l % 16,  chunk 2kk + l / 16
  //   K, key pair np, k-step kk:  row 16np + (l / 16) * 8 + l % 8,  chunk 2kk + (l / 8) % 2
  //   V, k-step kk, dim pair dp:  row 16kk + l % 16,                chunk 2dp + l / 16
  const LaneChunks qv_chunks(lane >> 4, lane & 7), k_chunks((lane >> 3) & 1, lane & 7);
  const uint32_t q_lane = sQ + (warp_row_off + (lane & 15)) * kRowBytes;
  const uint32_t k_lane_row = (((lane >> 4) << 3) + (lane & 7)) * kRowBytes;
  const uint32_t v_lane_row = (lane & 15) * kRowBytes;
  auto q_frag_addr = [&](int a, int kk) { return q_lane + a * kAtomM * kRowBytes + qv_chunks.pair(kk); };

  uint32_t rQ[L::kQInRegs ? kAtoms : 1][L::kQInRegs ? L::kQKSteps : 1][4];  // (kAtoms, D/16, 4)
  if constexpr (L::kQInRegs) {
#pragma unroll
    for (int a = 0; a < kAtoms; ++a)
#pragma unroll
      for (int kk = 0; kk < L::kQKSteps; ++kk) ldmatrix_x4(rQ[a][kk], q_frag_addr(a, kk));
  }

  float rO[kAtoms][L::kOAtoms][4];  // (kAtoms * 16, D) per warp, unnormalised
#pragma unroll
  for (int a = 0; a < kAtoms; ++a)
#pragma unroll
    for (int dn = 0; dn < L::kOAtoms; ++dn)
#pragma unroll
      for (int i = 0; i < 4; ++i) rO[a][dn][i] = 0.0f;
  float m_run[kAtoms][2], l_run[kAtoms][2];  // rows (a, g) and (a, g + 8)
#pragma unroll
  for (int a = 0; a < kAtoms; ++a)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      m_run[a][hr] = -INFINITY;
      l_run[a][hr] = 0.0f;
    }
  const float scale_log2 = p.scale * kLog2e;  // exp(scale * s) = exp2(scale_log2 * s)

#pragma unroll 1
  for (int j = 0; j < n_tiles; ++j) {
    cp_async_wait<kStages - 2>();  // this thread's copies of tile j have landed...
    __syncthreads();               // ...everyone's have, and every warp is done with tile j - 1 (and sQ)
    {
      const int jn = j + kStages - 1;  // refill the slot tile j - 1 used
      if (jn < n_tiles) copy_kv_tile(jn, jn % kStages);
      cp_async_commit();  // possibly empty: keeps the group count uniform
    }
    const uint32_t sKj = sRing + (j % kStages) * L::kStageBytes;  // (BN, D)
    const uint32_t sVj = sKj + L::kTileBytes;                      // (BN, D)

#pragma unroll
    for (int sub = 0; sub < L::kSubTiles; ++sub) {  // kSubN keys per step
      const int key0 = j * BN + sub * kSubN;          // first key of the step
      // Warp-uniform: does any row of this warp exist and see any key of this step?
      if (warp_row0 >= S || key0 >= S || (p.causal && key0 > warp_row_last)) continue;
      const uint32_t sKs = sKj + sub * kSubN * kRowBytes, sVs = sVj + sub * kSubN * kRowBytes;

      // ---- rS = Q.K^T -------------------------------------------------------------------------------
      float rS[kAtoms][L::kSAtoms][4];  // (kAtoms * 16, kSubN) per warp
#pragma unroll
      for (int a = 0; a < kAtoms; ++a)
#pragma unroll
        for (int n = 0; n < L::kSAtoms; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) rS[a][n][i] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < L::kQKSteps; ++kk) {
        uint32_t aQ[kAtoms][4];  // Q fragments of k-step kk (dims 16kk .. 16kk + 15)
#pragma unroll
        for (int a = 0; a < kAtoms; ++a) {
          if constexpr (L::kQInRegs) {
#pragma unroll
            for (int i = 0; i < 4; ++i) aQ[a][i] = rQ[a][kk][i];
          } else {
            ldmatrix_x4(aQ[a], q_frag_addr(a, kk));
          }
        }
#pragma unroll
        for (int np = 0; np < L::kSAtoms / 2; ++np) {  // keys 16np .. 16np + 15: n-atoms 2np, 2np + 1
          uint32_t bK[4];  // b0, b1 of n-atom 2np; b0, b1 of n-atom 2np + 1
          ldmatrix_x4(bK, sKs + k_lane_row + 16 * np * kRowBytes + k_chunks.pair(kk));
#pragma unroll
          for (int a = 0; a < kAtoms; ++a) {
            mma_m16n8k16<T>(rS[a][2 * np], aQ[a], bK[0], bK[1]);
            mma_m16n8k16<T>(rS[a][2 * np + 1], aQ[a], bK[2], bK[3]);
          }
        }
      }

      // ---- online softmax; rO rescaled ------------------------------------------------------------
      const bool need_mask = key0 + kSubN > S || (p.causal && key0 + kSubN - 1 > warp_row0);
      BOOL_SWITCH(need_mask, kMask, [&] {
        softmax_rescale<kMask, L>(rS, rO, m_run, l_run, lane, warp_row0, key0, S, p.causal, scale_log2);
      });

      // ---- rO += P.V --------------------------------------------------------------------------------
#pragma unroll
      for (int kk = 0; kk < L::kPVSteps; ++kk) {  // keys key0 + 16kk .. + 15
        uint32_t aP[kAtoms][4];  // A fragment = C fragments of S n-atoms 2kk, 2kk + 1, as T
#pragma unroll
        for (int a = 0; a < kAtoms; ++a) {
          aP[a][0] = pack2<T>(rS[a][2 * kk][0], rS[a][2 * kk][1]);          // (g,     16kk + 2t)
          aP[a][1] = pack2<T>(rS[a][2 * kk][2], rS[a][2 * kk][3]);          // (g + 8, 16kk + 2t)
          aP[a][2] = pack2<T>(rS[a][2 * kk + 1][0], rS[a][2 * kk + 1][1]);  // (g,     16kk + 8 + 2t)
          aP[a][3] = pack2<T>(rS[a][2 * kk + 1][2], rS[a][2 * kk + 1][3]);  // (g + 8, 16kk + 8 + 2t)
        }
#pragma unroll
        for (int dp = 0; dp < L::kOAtoms / 2; ++dp) {  // dims 16dp .. 16dp + 15: n-atoms 2dp, 2dp + 1
          uint32_t bV[4];  // b0, b1 of dim atom 2dp; b0, b1 of dim atom 2dp + 1
          ldmatrix_x4_trans(bV, sVs + v_lane_row + 16 * kk * kRowBytes + qv_chunks.pair(dp));
#pragma unroll
          for (int a = 0; a < kAtoms; ++a) {
            mma_m16n8k16<T>(rO[a][2 * dp], aP[a], bV[0], bV[1]);
            mma_m16n8k16<T>(rO[a][2 * dp + 1], aP[a], bV[2], bV[3]);
          }
        }
      }
    }
  }

  // ---- epilogue: rO / l -> T -> this warp's rows of sQ -> 16-byte stores ---------------------------
  // sQ may be a ring slot that other warps still read in their last step: wait for all of them. No
  // cp.async is in flight (every issued group was waited for in the loop; the rest are empty).
  __syncthreads();
  if (warp_row0 >= S) return;  // no row of this warp exists (no barrier follows)
#pragma unroll
  for (int a = 0; a < kAtoms; ++a)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float l = l_run[a][hr];  // the quad's 4 partial sums -> the row sum
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
      const int r = warp_row_off + a * kAtomM + hr * 8 + g;  // row in the tile
#pragma unroll
      for (int dn = 0; dn < L::kOAtoms; ++dn) {  // (r, 8dn + 2t .. +1): word t of chunk dn
        const uint32_t o2 = pack2<T>(rO[a][dn][2 * hr] * inv_l, rO[a][dn][2 * hr + 1] * inv_l);
        *reinterpret_cast<uint32_t*>(smem + L::kQOffset + swz<kChunks>(r, dn) + 4 * t) = o2;
      }
    }
  __syncwarp();  // the warp's O rows are staged
  constexpr int kRowsPerPass = 32 / kChunks;  // a lane per 16-byte chunk
#pragma unroll
  for (int i = 0; i < L::kRowsPerWarp / kRowsPerPass; ++i) {
    const int r = warp_row_off + i * kRowsPerPass + lane / kChunks, ch = lane % kChunks;
    const int row = m0 + r;
    const uint4 v = *reinterpret_cast<const uint4*>(smem + L::kQOffset + swz<kChunks>(r, ch));
    if (row < S) *reinterpret_cast<uint4*>(gO + int64_t(row) * p.o_row_stride + ch * kChunkElems) = v;
  }
}

template <class Cfg, class T, int kHeadDim>
constexpr size_t dynamic_smem_bytes() {
  return Layout<Cfg, T, kHeadDim>::kBytes;
}

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  return launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(), p,
                                      stream);
}

}  // namespace mma
}  // namespace evpack
