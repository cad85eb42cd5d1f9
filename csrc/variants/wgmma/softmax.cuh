// wgmma: the online softmax of one consumer thread's two rows.
//
// A thread (warp w of its warpgroup, lane = 4 g + t) holds the scores of rows 16 w + g and 16 w + g + 8 of
// its warpgroup's 64, columns 8 a + 2 t, +1 (a = 0 .. BLOCK_N / 8 - 1) of the K/V tile: rS[4 a + 2 r + e] is
// row r's column 8 a + 2 t + e, the wgmma accumulator layout. A row's 4 threads are the lanes of a quad.
//   m' = max(m, rowmax(S)), P = 2^(S scale log2e - m' scale log2e), l = l alpha + rowsum(P),
//   alpha = 2^((m - m') scale log2e), and O = O alpha before P.V accumulates into it.
// scale > 0 is assumed (the Python API enforces it): rowmax(s) * scale == rowmax(s * scale).
#pragma once

#include <cmath>
#include <cstdint>

#include "evpack/traits.h"

namespace evpack {
namespace wgmma {

__device__ __forceinline__ float exp2_sfu(float x) {  // 2^x on the SFU; ex2.approx.ftz(-inf) = +0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

template <int kBlockN>
struct OnlineSoftmax {
  static constexpr int kGroups = kBlockN / 8;  // column groups a of a tile
  float m[2];                                  // running max of rows g, g + 8 (raw score units)
  float l[2];                                  // this thread's partial row sums
  float scale_log2;

  __device__ __forceinline__ explicit OnlineSoftmax(float scale) : scale_log2(scale * kLog2e) {}

  __device__ __forceinline__ void reset() {
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.f;
  }

  // Sets the scores of keys >= seqlen and (causal) keys > row to -inf, on a tile at key n0 that crosses
  // either. Row r keeps key n0 + 2t + c (c = 8a + e, known at compile time) iff c < lim_r: one compare with
  // an immediate and one select per score, no branch.
  __device__ __forceinline__ void mask(float (&rS)[kBlockN / 2], int n0, int row0, int t, int seqlen, bool causal) {
    const int row1 = row0 + 8;
    const int lim0 = (causal ? min(seqlen, row0 + 1) : seqlen) - n0 - 2 * t;
    const int lim1 = (causal ? min(seqlen, row1 + 1) : seqlen) - n0 - 2 * t;
#pragma unroll
    for (int a = 0; a < kGroups; ++a) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        rS[4 * a + e] = 8 * a + e < lim0 ? rS[4 * a + e] : -INFINITY;
        rS[4 * a + 2 + e] = 8 * a + e < lim1 ? rS[4 * a + 2 + e] : -INFINITY;
      }
    }
  }

  // max(m_r, row r's scores of this thread), then over the quad.
  __device__ __forceinline__ float row_max(const float (&rS)[kBlockN / 2], int r) const {
    float mx = m[r];
#pragma unroll
    for (int a = 0; a < kGroups; ++a) mx = fmaxf(mx, fmaxf(rS[4 * a + 2 * r], rS[4 * a + 2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    return fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  }

  // rS (scores of one tile) -> P in fp32, in place; alpha: the rescale of the rows' earlier terms.
  __device__ __forceinline__ void online(float (&rS)[kBlockN / 2], float (&alpha)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float mx = row_max(rS, r);
      const float m_scaled = mx == -INFINITY ? 0.f : mx * scale_log2;  // fully masked row: P = 0, not NaN
      alpha[r] = exp2_sfu(m[r] * scale_log2 - m_scaled);               // m = -inf -> 0
      m[r] = mx;
      float sum = 0.f;
#pragma unroll
      for (int a = 0; a < kGroups; ++a) {
        rS[4 * a + 2 * r] = exp2_sfu(fmaf(rS[4 * a + 2 * r], scale_log2, -m_scaled));
        rS[4 * a + 2 * r + 1] = exp2_sfu(fmaf(rS[4 * a + 2 * r + 1], scale_log2, -m_scaled));
        sum += rS[4 * a + 2 * r] + rS[4 * a + 2 * r + 1];
      }
      l[r] = l[r] * alpha[r] + sum;
    }
  }

  // O *= alpha (rows g, g + 8 of each n8 atom of the accumulator).
  template <int kHeadDim>
  __device__ __forceinline__ static void rescale(float (&rO)[kHeadDim / 2], const float (&alpha)[2]) {
#pragma unroll
    for (int a = 0; a < kHeadDim / 8; ++a) {
      rO[4 * a + 0] *= alpha[0];
      rO[4 * a + 1] *= alpha[0];
      rO[4 * a + 2] *= alpha[1];
      rO[4 * a + 3] *= alpha[1];
    }
  }

  // 1 / l of rows g, g + 8 (over the quad), 0 for a row that saw no key.
  __device__ __forceinline__ void inverse_sums(float (&inv_l)[2]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float s = l[r];
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      inv_l[r] = s > 0.f ? 1.f / s : 0.f;
    }
  }
};

}  // namespace wgmma
}  // namespace evpack
