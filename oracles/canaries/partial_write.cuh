// canary_partial_write: a plain one-thread-per-row attention kernel (two passes over the keys,
// fp32) that stores every row of its tile except the last one. A reused output buffer still
// holds a plausible row there; a NaN-poisoned one does not.
// Gate that must fire: correctness (outputs NaN-poisoned before every checked call).
#pragma once

#include <cuda_runtime.h>

#include "evpack/params.h"
#include "evpack/registry.h"
#include "evpack/traits.h"

namespace evpack {
namespace canary_partial_write {

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  static_assert(Cfg::kThreads >= Cfg::kBlockM, "one thread per query row");
  const int row = blockIdx.x * Cfg::kBlockM + threadIdx.x;
  if (threadIdx.x >= Cfg::kBlockM || row >= p.seqlen) return;
  if (threadIdx.x == Cfg::kBlockM - 1) return;  // planted fault: the tile's last row is never stored
  const int b = blockIdx.y / p.heads, h = blockIdx.y % p.heads;
  const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride + int64_t(row) * p.q_row_stride;
  const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + h * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + h * p.v_head_stride;
  T* o = static_cast<T*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride + int64_t(row) * p.o_row_stride;
  const int n_keys = p.causal ? row + 1 : p.seqlen;
  float m = -INFINITY;
  for (int j = 0; j < n_keys; ++j) {
    float s = 0.0f;
    for (int d = 0; d < kHeadDim; ++d)
      s = fmaf(ElemTraits<T>::to_float(q[d]), ElemTraits<T>::to_float(k[int64_t(j) * p.k_row_stride + d]), s);
    m = fmaxf(m, s * p.scale);
  }
  float acc[kHeadDim];
  for (int d = 0; d < kHeadDim; ++d) acc[d] = 0.0f;
  float l = 0.0f;
  for (int j = 0; j < n_keys; ++j) {
    float s = 0.0f;
    for (int d = 0; d < kHeadDim; ++d)
      s = fmaf(ElemTraits<T>::to_float(q[d]), ElemTraits<T>::to_float(k[int64_t(j) * p.k_row_stride + d]), s);
    const float e = __expf(s * p.scale - m);
    l += e;
#pragma unroll
    for (int d = 0; d < kHeadDim; ++d) acc[d] = fmaf(e, ElemTraits<T>::to_float(v[int64_t(j) * p.v_row_stride + d]), acc[d]);
  }
#pragma unroll
  for (int d = 0; d < kHeadDim; ++d) o[d] = ElemTraits<T>::from_float(acc[d] / l);
}

template <class Cfg, class T, int kHeadDim>
constexpr size_t dynamic_smem_bytes() {
  return 0;
}

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  return launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, 0, p, stream);
}

}  // namespace canary_partial_write
}  // namespace evpack
