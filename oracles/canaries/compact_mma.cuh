// compact_mma: a small, plain flash-attention forward on mma.sync m16n8k16 for canaries whose fault sits in
// the tensor-core path (canary_fp16_accum, canary_input_family). Not tuned: one synchronous K/V tile at a
// time, one 16-row atom per warp. It reuses the mma variant's PTX wrappers and its online-softmax step, so
// with the Exact policy it computes what the mma variant computes (fp32 accumulators, exp2 softmax).
//
// Work split: a CTA owns BLOCK_M = 16 * WARPS query rows of one (batch, head); warp w owns rows
// [16w, 16w + 16). Per K/V tile: S = Q.K^T (mma, fp32 accumulators unless the policy says otherwise),
// softmax_rescale (mask, running max, P = exp2, l, O *= alpha), O += P.V (mma, fp32 accumulators).
// Shared memory (dynamic), row-major, rows padded by 16 bytes (kStride = D + 8 elements: the 8 rows of an
// ldmatrix phase start in 8 different 16-byte bank groups):
//   sQ (BLOCK_M, D)  sK (BLOCK_N, D)  sV (BLOCK_N, D)   T
//
// Policy (what a canary plants):
//   kF16ScoreSteps   the first this many 16-deep k-steps of S = Q.K^T run with fp16 C/D: the 16-term partial
//                    product is summed and rounded in fp16 (mma .f16.f16.f16.f16, SASS HMMA.16816.F16), then
//                    added into the fp32 scores; the other k-steps accumulate in fp32
//   kv(T, raw)       every 16-byte vector of K and V passes through it on its way to shared memory
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "csrc/variants/mma.cuh"
#include "evpack/kernel_common.cuh"
#include "evpack/params.h"
#include "evpack/traits.h"

namespace evpack {
namespace compact_mma {

constexpr int kAtom = 16;  // rows per warp, keys per P.V k-step, head dims per Q.K^T k-step

// The fragment shapes mma::softmax_rescale reads: one row-atom, a whole tile of keys, all of D.
template <class Cfg, int kHeadDim>
struct Frag {
  static constexpr int kAtoms = 1;
  static constexpr int kSAtoms = Cfg::kBlockN / mma::kAtomN;
  static constexpr int kOAtoms = kHeadDim / mma::kAtomN;
};

template <int kHeadDim>
constexpr int row_stride() {  // elements between shared-memory rows
  return kHeadDim + 8;
}

template <class Cfg, class T, int kHeadDim>
struct Smem {
  static constexpr int kStride = row_stride<kHeadDim>();
  static constexpr size_t kQBytes = size_t(Cfg::kBlockM) * kStride * sizeof(T);
  static constexpr size_t kKVBytes = size_t(Cfg::kBlockN) * kStride * sizeof(T);
  static constexpr size_t kBytes = kQBytes + 2 * kKVBytes;
};

struct Exact {
  static constexpr int kF16ScoreSteps = 0;
  template <class T>
  __device__ __forceinline__ static uint4 kv(uint4 raw) { return raw; }
};

// d += A.B for one m16n8k16 atom with fp16 C/D: the product of 16 pairs is summed in fp16, from C = 0.
__device__ __forceinline__ void mma_f16_partial(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  uint32_t c0 = 0, c1 = 0;  // (row g, cols 2t, 2t+1), (row g + 8, cols 2t, 2t+1): two __half2
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%0, %1};\n"
      : "+r"(c0), "+r"(c1)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  __half2 h0, h1;
  memcpy(&h0, &c0, sizeof(h0));
  memcpy(&h1, &c1, sizeof(h1));
  const float2 lo = __half22float2(h0), hi = __half22float2(h1);
  d[0] += lo.x;
  d[1] += lo.y;
  d[2] += hi.x;
  d[3] += hi.y;
}

// Rows [row0, row0 + kRows) of a (seqlen, D) matrix -> sDst (kStride apart); rows past seqlen are zero.
template <class Policy, bool kThroughPolicy, int kThreads, int kRows, int kHeadDim, class T>
__device__ __forceinline__ void load_rows(T* sDst, const T* gSrc, int64_t g_stride, int row0, int seqlen, int tid) {
  constexpr int kVecs = kHeadDim / kVecElems;  // 16-byte vectors per row
#pragma unroll 1
  for (int c = tid; c < kRows * kVecs; c += kThreads) {
    const int r = c / kVecs, col = (c % kVecs) * kVecElems;
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (row0 + r < seqlen) {
      raw = *reinterpret_cast<const uint4*>(gSrc + int64_t(row0 + r) * g_stride + col);
      if (kThroughPolicy) raw = Policy::template kv<T>(raw);
    }
    *reinterpret_cast<uint4*>(sDst + r * row_stride<kHeadDim>() + col) = raw;
  }
}

template <class Policy, class Cfg, class T, int kHeadDim>
__device__ __forceinline__ void fwd_block(const FwdParams& p) {
  using F = Frag<Cfg, kHeadDim>;
  using L = Smem<Cfg, T, kHeadDim>;
  static_assert(kHeadDim % kAtom == 0 && Cfg::kBlockN % kAtom == 0, "compact_mma: D and BLOCK_N in 16s");
  static_assert(Cfg::kBlockM == kAtom * Cfg::kWarps, "compact_mma: one 16-row atom per warp");
  static_assert(Policy::kF16ScoreSteps == 0 || sizeof(T) == 2, "compact_mma: fp16 C/D needs 16-bit inputs");
  constexpr int BM = Cfg::kBlockM, BN = Cfg::kBlockN, D = kHeadDim, kStride = L::kStride;

  extern __shared__ __align__(16) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);                            // (BM, D)
  T* sK = reinterpret_cast<T*>(smem + L::kQBytes);               // (BN, D)
  T* sV = reinterpret_cast<T*>(smem + L::kQBytes + L::kKVBytes);  // (BN, D)

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane >> 2, t = lane & 3;  // fragment coordinates (mma.cuh, "Fragment layouts")
  const int m0 = blockIdx.x * BM;
  const int b = blockIdx.y / p.heads, h = blockIdx.y % p.heads;
  const int S = p.seqlen;
  const HeadTiles<T> gHead = head_tiles<T>(p, b, h);
  const int r0 = warp * kAtom;  // this warp's first row in the tile

  load_rows<Policy, false, Cfg::kThreads, BM, D>(sQ, gHead.q, p.q_row_stride, m0, S, tid);
  __syncthreads();
  uint32_t rQ[D / kAtom][4];  // A fragments of this warp's 16 Q rows, one per 16-dim k-step
#pragma unroll
  for (int ks = 0; ks < D / kAtom; ++ks)
    mma::ldmatrix_x4(rQ[ks], smem_u32(sQ + (r0 + lane % 16) * kStride + ks * kAtom + (lane / 16) * 8));

  float rO[1][F::kOAtoms][4];  // (16, D) unnormalised output, fp32
#pragma unroll
  for (int dn = 0; dn < F::kOAtoms; ++dn)
#pragma unroll
    for (int c = 0; c < 4; ++c) rO[0][dn][c] = 0.0f;
  float m_run[1][2] = {{-INFINITY, -INFINITY}};  // rows g, g + 8 (log2 units)
  float l_run[1][2] = {{0.0f, 0.0f}};
  const float scale_log2 = p.scale * kLog2e;
  const int kv_end = p.causal ? min(S, m0 + BM) : S;

#pragma unroll 1
  for (int n0 = 0; n0 < kv_end; n0 += BN) {
    __syncthreads();  // every warp is done with the previous K/V tile
    load_rows<Policy, true, Cfg::kThreads, BN, D>(sK, gHead.k, p.k_row_stride, n0, S, tid);
    load_rows<Policy, true, Cfg::kThreads, BN, D>(sV, gHead.v, p.v_row_stride, n0, S, tid);
    __syncthreads();

    float rS[1][F::kSAtoms][4];  // (16, BN) scores, then P in place
#pragma unroll
    for (int nn = 0; nn < BN / kAtom; ++nn) {  // keys 16nn .. 16nn + 15 = n-atoms 2nn, 2nn + 1
#pragma unroll
      for (int c = 0; c < 4; ++c) rS[0][2 * nn][c] = rS[0][2 * nn + 1][c] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < D / kAtom; ++ks) {
        uint32_t kb[4];  // b0, b1 of n-atom 2nn; b0, b1 of n-atom 2nn + 1
        mma::ldmatrix_x4(kb, smem_u32(sK + (nn * kAtom + (lane / 16) * 8 + lane % 8) * kStride + ks * kAtom +
                                      ((lane / 8) % 2) * 8));
        if (ks < Policy::kF16ScoreSteps) {  // compile-time after unrolling
          mma_f16_partial(rS[0][2 * nn], rQ[ks], kb[0], kb[1]);
          mma_f16_partial(rS[0][2 * nn + 1], rQ[ks], kb[2], kb[3]);
        } else {
          mma::mma_m16n8k16<T>(rS[0][2 * nn], rQ[ks], kb[0], kb[1]);
          mma::mma_m16n8k16<T>(rS[0][2 * nn + 1], rQ[ks], kb[2], kb[3]);
        }
      }
    }
    mma::softmax_rescale<true, F>(rS, rO, m_run, l_run, lane, m0 + r0, n0, S, p.causal, scale_log2);

#pragma unroll
    for (int kk = 0; kk < BN / kAtom; ++kk) {  // O += P[:, 16kk : 16kk + 16] . V[16kk : 16kk + 16, :]
      const uint32_t a[4] = {pack2<T>(rS[0][2 * kk][0], rS[0][2 * kk][1]),
                             pack2<T>(rS[0][2 * kk][2], rS[0][2 * kk][3]),
                             pack2<T>(rS[0][2 * kk + 1][0], rS[0][2 * kk + 1][1]),
                             pack2<T>(rS[0][2 * kk + 1][2], rS[0][2 * kk + 1][3])};
#pragma unroll
      for (int dd = 0; dd < D / kAtom; ++dd) {  // dims 16dd .. 16dd + 15 = O n-atoms 2dd, 2dd + 1
        uint32_t vb[4];
        mma::ldmatrix_x4_trans(vb, smem_u32(sV + (kk * kAtom + lane % 16) * kStride + dd * kAtom + (lane / 16) * 8));
        mma::mma_m16n8k16<T>(rO[0][2 * dd], a, vb[0], vb[1]);
        mma::mma_m16n8k16<T>(rO[0][2 * dd + 1], a, vb[2], vb[3]);
      }
    }
  }

  // O = rO / l, l summed over the quad that holds the row; rows past seqlen are not stored.
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float l = l_run[0][hr];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int row = m0 + r0 + hr * 8 + g;
    if (row < S) {
      T* gOrow = gHead.o + int64_t(row) * p.o_row_stride;  // (D,)
#pragma unroll
      for (int dn = 0; dn < F::kOAtoms; ++dn)
        *reinterpret_cast<uint32_t*>(gOrow + dn * mma::kAtomN + 2 * t) =
            pack2<T>(rO[0][dn][2 * hr] / l, rO[0][dn][2 * hr + 1] / l);
    }
  }
}

template <class Cfg, class T, int kHeadDim>
constexpr size_t dynamic_smem_bytes() {
  return Smem<Cfg, T, kHeadDim>::kBytes;
}

}  // namespace compact_mma
}  // namespace evpack
