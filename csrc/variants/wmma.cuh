// wmma: flash-attention forward on tensor cores through nvcuda::wmma 16x16x16 fragments
// (T inputs, fp32 accumulators). S = Q.K^T and O += P.V are tensor-core products; the online
// softmax runs on CUDA cores through shared memory.
//
// Work split: a CTA owns BLOCK_M = 16 * WARPS query rows of one (batch, head); warp w owns rows
// [16w, 16w + 16) and keeps them in registers for the whole key loop:
//   rQ  D/16 matrix_a fragments     (16, D)  its Q rows
//   rO  D/16 accumulator fragments  (16, D)  unnormalised output, fp32
// Shared memory (dynamic):
//   sK      (BLOCK_N, D + 8)  T     current K tile
//   sV      (BLOCK_N, D + 8)  T     current V tile
//   sS      WARPS x (16, BLOCK_N + 4) fp32  per-warp score tile; P (in T) overwrites it in place
//                                   (each lane writes P over its own S columns: see p_offset)
//   sAlpha  WARPS x (16,)     fp32  per-row factor handed from the softmax lanes to the fragments
//   (the Q tile is staged through sS before the loop; the output is staged through sS after it)
//
// Per K/V tile (cp.async copies; the V copy overlaps S = Q.K^T, the next K copy overlaps the softmax):
//   S = Q.K^T -> sS;  lane (r, half) owns row r, columns [half * BLOCK_N / 2, +BLOCK_N / 2):
//   m' = max(m, rowmax(S * scale * log2 e)); P = exp2(S' - m'); l = l * 2^(m - m') + rowsum(P)
//   P -> sP (T);  rO *= 2^(m - m') per row;  rO += P.V
//
// Fragment element -> row: wmma leaves the fragment layout unspecified. We recover it once by
// loading a (16, 16) tile whose element (r, c) holds r into an accumulator fragment: its element i
// holds the row of element i of every accumulator fragment (one type, one layout). The 8 row ids
// are packed 4 bits each into `row_of`, and per-row factors are applied as
// rO[f].x[i] *= sAlpha[row_of[i]].
#pragma once

#include <cuda_runtime.h>
#include <mma.h>

#include "evpack/kernel_common.cuh"
#include "evpack/params.h"
#include "evpack/registry.h"
#include "evpack/static_switch.h"
#include "evpack/traits.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "evpack wmma variant: needs sm_80 or newer (cp.async, bf16 wmma)"
#endif

namespace evpack {
namespace wmma {

namespace nvw = nvcuda::wmma;

constexpr int kFrag = 16;  // wmma m16n16k16: every fragment is 16 x 16

template <class T>
using FragA = nvw::fragment<nvw::matrix_a, kFrag, kFrag, kFrag, T, nvw::row_major>;
template <class T>
using FragBRow = nvw::fragment<nvw::matrix_b, kFrag, kFrag, kFrag, T, nvw::row_major>;
template <class T>
using FragBCol = nvw::fragment<nvw::matrix_b, kFrag, kFrag, kFrag, T, nvw::col_major>;
using FragAcc = nvw::fragment<nvw::accumulator, kFrag, kFrag, kFrag, float>;

template <class Cfg, class T, int kHeadDim>
struct Smem {
  static constexpr int kKVStride = kHeadDim + 8;      // elements: rows 16 B off a 128 B period -> ldmatrix conflict-free
  static constexpr int kQStride = kHeadDim + 8;       // elements: Q staging (aliases sS)
  static constexpr int kSStride = Cfg::kBlockN + 4;   // floats: per-warp S tile rows
  static constexpr int kPStride = 2 * kSStride;       // elements of T: P row r lies inside S row r
  static constexpr size_t kKVBytes = size_t(Cfg::kBlockN) * kKVStride * sizeof(T);
  static constexpr size_t kSWarpFloats = size_t(kFrag) * kSStride;
  static constexpr size_t kSBytes = Cfg::kWarps * kSWarpFloats * sizeof(float);
  static constexpr size_t kAlphaBytes = Cfg::kWarps * kFrag * sizeof(float);

  static constexpr size_t kKOffset = 0;
  static constexpr size_t kVOffset = kKOffset + kKVBytes;
  static constexpr size_t kSOffset = kVOffset + kKVBytes;
  static constexpr size_t kAlphaOffset = kSOffset + kSBytes;
  static constexpr size_t kBytes = kAlphaOffset + kAlphaBytes;

  static_assert(kKVBytes % 128 == 0 && kSBytes % 128 == 0, "wmma: shared regions stay 128-byte aligned");
  static_assert(size_t(Cfg::kBlockM) * kQStride * sizeof(T) <= kSBytes, "wmma: the Q tile is staged in sS");
  static_assert(kBytes <= 99 * 1024, "wmma: over sm_89's 99 KB of shared memory per block");
};

// ---- fragment loads from shared memory ------------------------------------------------------
// nvcc emits `wmma.load ... .shared.f16` (-> LDSM) for __half pointers into shared memory, but the
// generic-space form for __nv_bfloat16 (-> eight 32-bit generic LD per fragment). The bf16
// overloads below state the shared space themselves; the fragment is the same 4 x b32 registers.
template <class Frag, class T>
__device__ __forceinline__ void load_frag(Frag& frag, const T* smem_ptr, unsigned ldm) {
  nvw::load_matrix_sync(frag, smem_ptr, ldm);
}

#define EVPACK_WMMA_LOAD_BF16_SHARED(FRAG, PTX_OP)                                                      \
  __device__ __forceinline__ void load_frag(FRAG& frag, const __nv_bfloat16* smem_ptr, unsigned ldm) { \
    static_assert(sizeof(frag.x) == 4 * sizeof(unsigned), "wmma: bf16 16x16x16 fragment is 4 x b32");  \
    unsigned* r = reinterpret_cast<unsigned*>(&frag.x[0]);                                              \
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_ptr));                    \
    asm volatile(PTX_OP " {%0, %1, %2, %3}, [%4], %5;\n"                                              \
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])                                      \
                 : "r"(addr), "r"(ldm)                                                                  \
                 : "memory");                                                                           \
  }
EVPACK_WMMA_LOAD_BF16_SHARED(FragA<__nv_bfloat16>, "wmma.load.a.sync.aligned.row.m16n16k16.shared.bf16")
EVPACK_WMMA_LOAD_BF16_SHARED(FragBRow<__nv_bfloat16>, "wmma.load.b.sync.aligned.row.m16n16k16.shared.bf16")
EVPACK_WMMA_LOAD_BF16_SHARED(FragBCol<__nv_bfloat16>, "wmma.load.b.sync.aligned.col.m16n16k16.shared.bf16")
#undef EVPACK_WMMA_LOAD_BF16_SHARED

// Rows [row0, row0 + kRows) of a (seqlen, D) matrix -> sDst (kRows, s_stride); rows past seqlen are zero.
template <int kThreads, int kRows, int kHeadDim, class T>
__device__ __forceinline__ void copy_rows_padded(T* sDst, int s_stride, const T* gSrc, int64_t g_stride, int row0,
                                                int seqlen, int tid) {
  constexpr int kVecsPerRow = kHeadDim / kVecElems;
  static_assert(kRows * kVecsPerRow % kThreads == 0, "wmma: tile copy must split evenly over the threads");
#pragma unroll 1  // rolled: unrolled copies keep every address live (measured: +70 registers at 64 threads)
  for (int i = 0; i < kRows * kVecsPerRow / kThreads; ++i) {
    const int c = tid + i * kThreads;  // 16-byte vector index in the tile
    const int r = c / kVecsPerRow, col = (c % kVecsPerRow) * kVecElems;
    const bool valid = row0 + r < seqlen;
    const T* src = valid ? gSrc + int64_t(row0 + r) * g_stride + col : gSrc;  // any mapped address when invalid
    cp_async_16(smem_u32(sDst + r * s_stride + col), src, valid);
  }
}

// Online-softmax step of one warp on its (16, BLOCK_N) score tile; see the header comment.
// Lane (r = lane % 16, half = lane / 16) owns row r, columns [half * kCols, (half + 1) * kCols) with
// kCols = BLOCK_N / 2. Two passes over shared memory (max, then exp/sum/store) keep the working set
// at one float4. P is written inside the lane's own S columns (see p_offset), so no lane overwrites
// scores another lane has yet to read, and column c of P lands at or below the bytes of S column c.
// kMask: apply the seqlen and causal masks (only tiles that cross the sequence end or the diagonal).
template <int kBlockN>
__host__ __device__ constexpr int p_offset(int c) {  // column c of a P row -> element offset in the row
  return (c / (kBlockN / 2)) * kBlockN + c % (kBlockN / 2);
}

template <bool kMask, int kBlockN, int kSStride, class T>
__device__ __forceinline__ void softmax_tile(float* sS, float* sAlpha, int lane, int row, int key_begin, int seqlen,
                                             bool causal, float scale_log2, float& m_run, float& l_run) {
  constexpr int kCols = kBlockN / 2;  // columns per lane
  const int r = lane % 16, half = lane / 16;
  const float* src = sS + r * kSStride + half * kCols;                  // (kCols,) scores, fp32
  T* dst = reinterpret_cast<T*>(sS + r * kSStride + half * kCols);      // (kCols,) probabilities, T
  // Keys [key_begin + half * kCols, + kCols) of this lane; the first n_visible of them are unmasked.
  const int key_end = causal ? min(seqlen, row + 1) : seqlen;  // row sees keys [0, key_end)
  const int n_visible = key_end - (key_begin + half * kCols);

  // x = S * scale * log2(e), masked keys -> -inf
  auto load4 = [&](int c, float (&x)[4]) {
    const float4 v = *reinterpret_cast<const float4*>(src + c);
    x[0] = v.x * scale_log2;
    x[1] = v.y * scale_log2;
    x[2] = v.z * scale_log2;
    x[3] = v.w * scale_log2;
    if (kMask) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (c + e >= n_visible) x[e] = -INFINITY;
    }
  };

  float mx = -INFINITY;  // pass 1: row max over both halves
#pragma unroll
  for (int c = 0; c < kCols; c += 4) {
    float x[4];
    load4(c, x);
    mx = fmaxf(mx, fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3])));
  }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
  const float m_new = fmaxf(m_run, mx);
  // Every row has seen key 0 by its first tile, so m_new is finite; the guard keeps a row that
  // has seen no key yet at p = 0 instead of NaN.
  const float m_use = m_new == -INFINITY ? 0.0f : m_new;
  const float alpha = exp2f(m_run - m_use);  // 0 on the first tile (m_run = -inf)

  float sum = 0.0f;  // pass 2: P = exp2(x - m'), row sum, P -> T in place
#pragma unroll
  for (int c = 0; c < kCols; c += 4) {
    float x[4];
    load4(c, x);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      x[e] = exp2f(x[e] - m_use);  // masked: exp2(-inf) = 0
      sum += x[e];
    }
    uint2 raw;
    pack_from_float<T>(x, &raw);
    *reinterpret_cast<uint2*>(dst + c) = raw;  // bytes [2c, 2c + 8): S columns < c + 4, already read
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 16);
  l_run = l_run * alpha + sum;
  m_run = m_new;
  if (half == 0) sAlpha[r] = alpha;
  __syncwarp();  // P and alpha visible to the whole warp
}

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  static_assert(kHeadDim == 64 || kHeadDim == 128, "wmma: head_dim must be 64 or 128");
  static_assert(Cfg::kBlockM == kFrag * Cfg::kWarps, "wmma: each warp owns 16 query rows (BLOCK_M == 16 * WARPS)");
  static_assert(Cfg::kBlockN % 32 == 0 && Cfg::kBlockN <= 128, "wmma: BLOCK_N in {32, 64, 96, 128}");
  static_assert(kHeadDim % Cfg::kBlockN == 0, "wmma: the output is staged through sS in BLOCK_N-column chunks");
  static_assert(Cfg::kStages == 1, "wmma: K and V are single-buffered (STAGES == 1)");

  constexpr int BM = Cfg::kBlockM, BN = Cfg::kBlockN, D = kHeadDim;
  constexpr int kThreads = Cfg::kThreads;
  constexpr int kDFrags = D / kFrag;   // fragments along head_dim
  constexpr int kNFrags = BN / kFrag;  // fragments along the key tile
  using L = Smem<Cfg, T, kHeadDim>;

  extern __shared__ __align__(128) unsigned char smem[];
  T* sK = reinterpret_cast<T*>(smem + L::kKOffset);  // (BN, D + 8)
  T* sV = reinterpret_cast<T*>(smem + L::kVOffset);  // (BN, D + 8)
  T* sQ = reinterpret_cast<T*>(smem + L::kSOffset);  // (BM, D + 8) Q staging, before the loop only

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int m0 = blockIdx.x * BM;  // first query row of this CTA
  const int b = blockIdx.y / p.heads, h = blockIdx.y % p.heads;
  const int S = p.seqlen;
  const HeadTiles<T> gHead = head_tiles<T>(p, b, h);
  const T* gQ = gHead.q;  // (S, D)
  const T* gK = gHead.k;  // (S, D)
  const T* gV = gHead.v;  // (S, D)
  T* gO = gHead.o;        // (S, D)

  float* sS = reinterpret_cast<float*>(smem + L::kSOffset) + warp * L::kSWarpFloats;  // (16, BN + 4) this warp's
  T* sP = reinterpret_cast<T*>(sS);                                                   // (16, 2 * (BN + 4)) in place
  float* sAlpha = reinterpret_cast<float*>(smem + L::kAlphaOffset) + warp * kFrag;    // (16,)
  const int warp_row0 = m0 + warp * kFrag;  // first query row of this warp

  // ---- prologue: Q tile and K tile 0 in flight -------------------------------------------------
  copy_rows_padded<kThreads, BM, D>(sQ, L::kQStride, gQ, p.q_row_stride, m0, S, tid);
  cp_async_commit();
  copy_rows_padded<kThreads, BN, D>(sK, L::kKVStride, gK, p.k_row_stride, 0, S, tid);
  cp_async_commit();
  cp_async_wait<1>();  // Q has landed (K0 may still be in flight)
  __syncthreads();

  FragA<T> rQ[kDFrags];  // (16, D) this warp's Q rows, kept for the whole loop
#pragma unroll
  for (int kk = 0; kk < kDFrags; ++kk)
    load_frag(rQ[kk], sQ + (warp * kFrag) * L::kQStride + kk * kFrag, L::kQStride);
  __syncthreads();  // every warp holds its Q: the staging area becomes the S tiles

  // Row (0..15) of element i of any accumulator fragment, 4 bits per element (see the header comment).
  static_assert(FragAcc::num_elements <= 8, "wmma: row ids of one fragment are packed into 32 bits");
  uint32_t row_of = 0;
  {
    for (int i = lane; i < kFrag * kFrag; i += 32) sS[(i / kFrag) * L::kSStride + i % kFrag] = float(i / kFrag);
    __syncwarp();
    FragAcc row_ids;
    nvw::load_matrix_sync(row_ids, sS, L::kSStride, nvw::mem_row_major);
#pragma unroll
    for (int i = 0; i < FragAcc::num_elements; ++i) row_of |= uint32_t(row_ids.x[i]) << (4 * i);
    __syncwarp();
  }

  FragAcc rO[kDFrags];  // (16, D) unnormalised output, fp32
#pragma unroll
  for (int f = 0; f < kDFrags; ++f) nvw::fill_fragment(rO[f], 0.0f);
  float m_run = -INFINITY;  // row (warp_row0 + lane % 16): running max in log2 units
  float l_run = 0.0f;       // and running sum; lanes l and l ^ 16 hold the same row
  const float scale_log2 = p.scale * kLog2e;

  const int kv_end = p.causal ? min(S, m0 + BM) : S;  // keys any row of this CTA can see
  const int n_tiles = (kv_end + BN - 1) / BN;

  for (int j = 0; j < n_tiles; ++j) {
    const int n0 = j * BN;  // first key of the tile
    copy_rows_padded<kThreads, BN, D>(sV, L::kKVStride, gV, p.v_row_stride, n0, S, tid);
    cp_async_commit();
    cp_async_wait<1>();  // K_j has landed (V_j may still be in flight)
    __syncthreads();

    // Warp-uniform: does any row of this warp exist and see any key of this tile?
    const bool warp_active = warp_row0 < S && !(p.causal && n0 > warp_row0 + kFrag - 1);

    // S = Q . K^T  (16, BN) -> sS
    if (warp_active) {
#pragma unroll 1  // rolled: unrolled, ptxas hoists every K fragment of the tile (+100 registers at D = 128)
      for (int n = 0; n < kNFrags; ++n) {
        FragAcc rS;
        nvw::fill_fragment(rS, 0.0f);
#pragma unroll
        for (int kk = 0; kk < kDFrags; ++kk) {
          FragBCol<T> bK;  // (16 dims, 16 keys): K^T read column-major from row-major sK
          load_frag(bK, sK + (n * kFrag) * L::kKVStride + kk * kFrag, L::kKVStride);
          nvw::mma_sync(rS, rQ[kk], bK, rS);
        }
        nvw::store_matrix_sync(sS + n * kFrag, rS, L::kSStride, nvw::mem_row_major);
      }
    }
    __syncthreads();  // every warp is done with sK

    if (j + 1 < n_tiles)
      copy_rows_padded<kThreads, BN, D>(sK, L::kKVStride, gK, p.k_row_stride, n0 + BN, S, tid);
    cp_async_commit();  // possibly empty: keeps the group count uniform

    if (warp_active) {
      __syncwarp();  // the S tile stored by the other lanes is visible
      const int row = warp_row0 + lane % 16;
      const bool need_mask = n0 + BN > S || (p.causal && n0 + BN - 1 > warp_row0);
      BOOL_SWITCH(need_mask, kMask, [&] {
        softmax_tile<kMask, BN, L::kSStride, T>(sS, sAlpha, lane, row, n0, S, p.causal, scale_log2, m_run, l_run);
      });
      // rO *= alpha per row
      float alpha[FragAcc::num_elements];
#pragma unroll
      for (int i = 0; i < FragAcc::num_elements; ++i) alpha[i] = sAlpha[(row_of >> (4 * i)) & 15];
#pragma unroll
      for (int f = 0; f < kDFrags; ++f)
#pragma unroll
        for (int i = 0; i < FragAcc::num_elements; ++i) rO[f].x[i] *= alpha[i];
    }

    cp_async_wait<1>();  // V_j has landed (K_{j+1} may still be in flight)
    __syncthreads();

    // O += P . V  (16, BN) x (BN, D)
    if (warp_active) {
#pragma unroll 1  // rolled for the same reason (V fragments)
      for (int kk = 0; kk < kNFrags; ++kk) {
        FragA<T> aP;  // (16 rows, 16 keys)
        load_frag(aP, sP + p_offset<BN>(kk * kFrag), L::kPStride);
#pragma unroll
        for (int f = 0; f < kDFrags; ++f) {
          FragBRow<T> bV;  // (16 keys, 16 dims)
          load_frag(bV, sV + (kk * kFrag) * L::kKVStride + f * kFrag, L::kKVStride);
          nvw::mma_sync(rO[f], aP, bV, rO[f]);
        }
      }
    }
    __syncthreads();  // every warp is done with sV (the next iteration refills it)
  }

  // ---- epilogue: O / l, staged through sS in BN-column chunks, stored as 16-byte vectors -------
  if (warp_row0 >= S) return;  // no row of this warp exists (no barrier follows)
  if (lane < 16) sAlpha[lane] = l_run > 0.0f ? 1.0f / l_run : 0.0f;  // row lane: 1 / l
  constexpr int kVecsPerRow = BN / kVecElems;  // 16-byte vectors per staged row
  static_assert(32 % kVecsPerRow == 0, "wmma: a staged row is covered by a whole number of lanes");
  constexpr int kRowsPerPass = 32 / kVecsPerRow;
#pragma unroll
  for (int chunk = 0; chunk < D / BN; ++chunk) {
    __syncwarp();  // sS is free (previous chunk read out) and 1 / l is visible
#pragma unroll
    for (int f = 0; f < kNFrags; ++f)
      nvw::store_matrix_sync(sS + f * kFrag, rO[chunk * kNFrags + f], L::kSStride, nvw::mem_row_major);
    __syncwarp();
#pragma unroll
    for (int r0 = 0; r0 < kFrag; r0 += kRowsPerPass) {
      const int r = r0 + lane / kVecsPerRow, col = (lane % kVecsPerRow) * kVecElems;
      const int row = warp_row0 + r;
      const float inv_l = sAlpha[r];
      const float4 lo = *reinterpret_cast<const float4*>(sS + r * L::kSStride + col);
      const float4 hi = *reinterpret_cast<const float4*>(sS + r * L::kSStride + col + 4);
      const float f[kVecElems] = {lo.x * inv_l, lo.y * inv_l, lo.z * inv_l, lo.w * inv_l,
                                  hi.x * inv_l, hi.y * inv_l, hi.z * inv_l, hi.w * inv_l};
      uint4 raw;
      pack_from_float<T>(f, &raw);
      if (row < S) *reinterpret_cast<uint4*>(gO + int64_t(row) * p.o_row_stride + chunk * BN + col) = raw;
    }
  }
}

template <class Cfg, class T, int kHeadDim>
constexpr size_t dynamic_smem_bytes() {
  return Smem<Cfg, T, kHeadDim>::kBytes;
}

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  return launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(), p,
                                      stream);
}

}  // namespace wmma
}  // namespace evpack
