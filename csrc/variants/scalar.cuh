// scalar: the CUDA-core control. Flash-attention forward with fp32 FMAs only (no tensor cores).
//
// Work split: one thread per query row. A CTA owns BLOCK_M rows of one (batch, head):
//   sQ  (BLOCK_M, D + 4) fp32  its Q tile, pre-multiplied by scale * log2(e)
//   sK  (BLOCK_N, D)     T     the current K tile
//   sV  (BLOCK_N, D)     T     the current V tile
//   sP  (16, BLOCK_M)    fp32  one chunk of probabilities, a column per thread (thread-private)
// Each thread walks the K/V tile in chunks of 16 keys: 16 scores in registers, an online-softmax
// update, then O += P.V into its (D,) fp32 accumulator row in registers. All threads of a CTA
// read the same K/V element at the same time, so those shared loads are broadcasts.
//
// The canaries (oracles/canaries/*.cuh) reuse fwd_block() with their own Epilogue.
#pragma once

#include <cuda_runtime.h>

#include "evpack/params.h"
#include "evpack/registry.h"
#include "evpack/traits.h"

namespace evpack {
namespace scalar {

constexpr int kChunk = 16;  // keys per online-softmax step (the scores live in registers)

template <class Cfg, class T, int kHeadDim>
struct Smem {
  static constexpr int kQStride = kHeadDim + 4;  // floats; +4: the per-row LDS.128 of 8 lanes hit 8 bank groups
  static constexpr size_t kQBytes = size_t(Cfg::kBlockM) * kQStride * sizeof(float);
  static constexpr size_t kKVBytes = size_t(Cfg::kBlockN) * kHeadDim * sizeof(T);
  static constexpr size_t kPBytes = size_t(kChunk) * Cfg::kBlockM * sizeof(float);
  static constexpr size_t kBytes = kQBytes + 2 * kKVBytes + kPBytes;
  static_assert(kQBytes % 16 == 0, "scalar: sK must start 16-byte aligned");
};

// What a row goes through between the softmax and its store. The canaries plant faults here.
struct EpilogueArgs {
  const FwdParams& p;
  float* sQ;     // (BLOCK_M, kQStride) fp32 Q tile; row `tid` is read only by thread `tid`
  int q_stride;  // floats between rows of sQ
  int tid;
  int row;       // query row of this thread (valid only when < seqlen)
  bool valid;    // row < seqlen: the row is stored
  void* o_row;   // &o[b, h, row, 0] (dereference only when valid)
};

struct PlainEpilogue {
  __device__ __forceinline__ static float row_factor(const EpilogueArgs&) { return 1.0f; }  // O row *= factor / l
};

template <class T>
__device__ __forceinline__ void load4_to_float(const T* src, float (&dst)[4]) {  // 4 elements (8 bytes) of T
  const uint2 raw = *reinterpret_cast<const uint2*>(src);
  unpack_to_float<T>(&raw, dst);
}

// One CTA: BLOCK_M query rows of one (batch, head) against all visible keys.
template <class Cfg, class T, int kHeadDim, class Epilogue = PlainEpilogue>
__device__ __forceinline__ void fwd_block(const FwdParams& p) {
  static_assert(kHeadDim == 64 || kHeadDim == 128, "scalar: head_dim must be 64 or 128");
  static_assert(Cfg::kBlockM == Cfg::kThreads, "scalar: one thread per query row (BLOCK_M == 32 * WARPS)");
  static_assert(Cfg::kBlockN % kChunk == 0, "scalar: BLOCK_N must be a multiple of the 16-key chunk");
  static_assert(Cfg::kStages == 1, "scalar: K/V are single-buffered (STAGES == 1)");
  static_assert(kHeadDim % kVecElems == 0, "scalar: rows are copied in 16-byte vectors");
  static_assert(Cfg::kBlockN * kHeadDim / kVecElems % Cfg::kThreads == 0, "scalar: K/V tile copy evenly split");

  constexpr int BM = Cfg::kBlockM, BN = Cfg::kBlockN, D = kHeadDim;
  constexpr int kVecsPerRow = D / kVecElems;
  using L = Smem<Cfg, T, kHeadDim>;

  extern __shared__ __align__(16) unsigned char smem[];
  float* sQ = reinterpret_cast<float*>(smem);         // (BM, D + 4) fp32, q * scale * log2(e)
  T* sK = reinterpret_cast<T*>(smem + L::kQBytes);    // (BN, D)
  T* sV = sK + BN * D;                                // (BN, D)
  float* sP = reinterpret_cast<float*>(smem + L::kQBytes + 2 * L::kKVBytes);  // (16, BM) fp32, column per thread

  const int tid = threadIdx.x;
  const int m0 = blockIdx.x * BM;  // first query row of this CTA
  const int b = blockIdx.y / p.heads, h = blockIdx.y % p.heads;
  const int S = p.seqlen;
  // Pointers computed in place rather than through head_tiles(): that form reorders this kernel's
  // prologue (same instruction count, different SASS), and the control's binary stays as measured.
  const T* gQ = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride;  // (S, D)
  const T* gK = static_cast<const T*>(p.k) + b * p.k_batch_stride + h * p.k_head_stride;  // (S, D)
  const T* gV = static_cast<const T*>(p.v) + b * p.v_batch_stride + h * p.v_head_stride;  // (S, D)
  T* gO = static_cast<T*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride;              // (S, D)

  // Q tile -> sQ, scaled so that exp(scale * q.k) = exp2(sQ.k); rows past seqlen are zero.
  const float q_scale = p.scale * kLog2e;
#pragma unroll 1  // rolled copy loops keep addresses out of the register budget
  for (int i = 0; i < BM * kVecsPerRow / Cfg::kThreads; ++i) {
    const int c = tid + i * Cfg::kThreads;  // 16-byte vector index in the tile
    const int r = c / kVecsPerRow, col = (c % kVecsPerRow) * kVecElems;
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (m0 + r < S) raw = *reinterpret_cast<const uint4*>(gQ + int64_t(m0 + r) * p.q_row_stride + col);
    float f[kVecElems];
    unpack_to_float<T>(&raw, f);
    float4* dst = reinterpret_cast<float4*>(sQ + r * L::kQStride + col);
    dst[0] = make_float4(f[0] * q_scale, f[1] * q_scale, f[2] * q_scale, f[3] * q_scale);
    dst[1] = make_float4(f[4] * q_scale, f[5] * q_scale, f[6] * q_scale, f[7] * q_scale);
  }

  const int row = m0 + tid;  // this thread's query row
  const float* sQrow = sQ + tid * L::kQStride;  // (D,)
  float* sPcol = sP + tid;                        // (16,) with stride BM: this thread's probabilities

  float rO[D];  // (D,) unnormalised output row, fp32
#pragma unroll
  for (int d = 0; d < D; ++d) rO[d] = 0.0f;
  float m_run = -INFINITY;  // running max of the row's scores (log2 units)
  float l_run = 0.0f;       // running sum of exp2(score - m_run)

  const int kv_end = p.causal ? min(S, m0 + BM) : S;  // keys any row of this CTA can see
  const int n_tiles = (kv_end + BN - 1) / BN;

  for (int j = 0; j < n_tiles; ++j) {
    const int n0 = j * BN;  // first key of the tile
    __syncthreads();        // every thread is done with the previous K/V tile
    // K/V tile -> sK, sV; keys past seqlen are zero (never NaN: masked p = 0 must meet finite v).
#pragma unroll 1
    for (int i = 0; i < BN * kVecsPerRow / Cfg::kThreads; ++i) {
      const int c = tid + i * Cfg::kThreads;  // 16-byte vector index in the tile
      const int r = c / kVecsPerRow, col = (c % kVecsPerRow) * kVecElems;
      uint4 k_raw = make_uint4(0, 0, 0, 0), v_raw = make_uint4(0, 0, 0, 0);
      if (n0 + r < S) {
        k_raw = *reinterpret_cast<const uint4*>(gK + int64_t(n0 + r) * p.k_row_stride + col);
        v_raw = *reinterpret_cast<const uint4*>(gV + int64_t(n0 + r) * p.v_row_stride + col);
      }
      *reinterpret_cast<uint4*>(sK + r * D + col) = k_raw;
      *reinterpret_cast<uint4*>(sV + r * D + col) = v_raw;
    }
    __syncthreads();  // the K/V tile (and, at j == 0, the Q tile) is visible to every thread

#pragma unroll 1
    for (int c0 = 0; c0 < BN; c0 += kChunk) {
      const int key0 = n0 + c0;  // first key of the chunk
      // Keys only grow: once key0 is past seqlen or (causal) past the row, the rest is masked too.
      // Otherwise key0 itself is visible, so the chunk max below is finite.
      if (key0 >= S || (p.causal && key0 > row)) break;

      // rS = sQrow . K[key0 + jj]  (log2 units)
      float rS[kChunk];  // (16,)
#pragma unroll
      for (int jj = 0; jj < kChunk; ++jj) rS[jj] = 0.0f;
#pragma unroll 1  // rolled: a fully unrolled d loop hoists hundreds of loads and spills
      for (int d = 0; d < D; d += 4) {
        const float4 q4 = *reinterpret_cast<const float4*>(sQrow + d);
#pragma unroll
        for (int jj = 0; jj < kChunk; ++jj) {
          float k4[4];
          load4_to_float(sK + (c0 + jj) * D + d, k4);
          rS[jj] = fmaf(q4.x, k4[0], rS[jj]);
          rS[jj] = fmaf(q4.y, k4[1], rS[jj]);
          rS[jj] = fmaf(q4.z, k4[2], rS[jj]);
          rS[jj] = fmaf(q4.w, k4[3], rS[jj]);
        }
      }

      // Mask keys past seqlen and (causal) keys after the row.
#pragma unroll
      for (int jj = 0; jj < kChunk; ++jj) {
        const int key = key0 + jj;
        if (key >= S || (p.causal && key > row)) rS[jj] = -INFINITY;
      }

      // Online softmax: m' = max(m, max_j s_j); O, l *= 2^(m - m'); p_j = 2^(s_j - m').
      float m_chunk = rS[0];
#pragma unroll
      for (int jj = 1; jj < kChunk; ++jj) m_chunk = fmaxf(m_chunk, rS[jj]);
      const float m_new = fmaxf(m_run, m_chunk);  // finite: key0 is visible
      const float alpha = exp2f(m_run - m_new);   // 0 on the first chunk (m_run = -inf)
      float l_chunk = 0.0f;
#pragma unroll
      for (int jj = 0; jj < kChunk; ++jj) {
        rS[jj] = exp2f(rS[jj] - m_new);  // masked: exp2(-inf) = 0
        l_chunk += rS[jj];
      }
      l_run = l_run * alpha + l_chunk;
      m_run = m_new;

      // rO = alpha * rO + P . V[key0 : key0 + 16]; P goes through this thread's column of sP so the
      // key loop can stay rolled (a rolled loop over a register array would put it in local memory).
#pragma unroll
      for (int jj = 0; jj < kChunk; ++jj) sPcol[jj * BM] = rS[jj];
#pragma unroll
      for (int d = 0; d < D; ++d) rO[d] *= alpha;
#pragma unroll 1
      for (int jj = 0; jj < kChunk; ++jj) {
        const float p_j = sPcol[jj * BM];
        const T* sVrow = sV + (c0 + jj) * D;  // (D,) broadcast to every thread
#pragma unroll
        for (int d = 0; d < D; d += 4) {
          float v4[4];
          load4_to_float(sVrow + d, v4);
          rO[d + 0] = fmaf(p_j, v4[0], rO[d + 0]);
          rO[d + 1] = fmaf(p_j, v4[1], rO[d + 1]);
          rO[d + 2] = fmaf(p_j, v4[2], rO[d + 2]);
          rO[d + 3] = fmaf(p_j, v4[3], rO[d + 3]);
        }
      }
    }
  }

  // O row = rO / l (l >= 1: key 0 is visible to every row), stored as 16-byte vectors.
  const bool valid = row < S;
  T* gOrow = gO + int64_t(row) * p.o_row_stride;  // (D,), dereferenced only when valid
  const EpilogueArgs args{p, sQ, L::kQStride, tid, row, valid, gOrow};
  const float factor = Epilogue::row_factor(args) / l_run;
  if (valid) {
#pragma unroll
    for (int d = 0; d < D; d += kVecElems) {
      float f[kVecElems];
#pragma unroll
      for (int e = 0; e < kVecElems; ++e) f[e] = rO[d + e] * factor;
      uint4 raw;
      pack_from_float<T>(f, &raw);
      *reinterpret_cast<uint4*>(gOrow + d) = raw;
    }
  }
}

// minBlocks = 1 lets ptxas use up to 255 registers; without it, sm_90 ptxas held the D = 64 kernel
// at 128 registers and spilled 4 bytes (measured, CUDA 13.0).
template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  fwd_block<Cfg, T, kHeadDim>(p);
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

}  // namespace scalar
}  // namespace evpack
