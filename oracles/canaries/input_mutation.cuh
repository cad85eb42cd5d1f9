// canary_input_mutation: the scalar kernel, whose CTAs double their own Q rows in global memory
// once they have read them. This call's output is right; the caller's q is not q any more.
// Gate that must fire: correctness (q, k, v compared bit for bit before and after every checked call).
#pragma once

#include "csrc/variants/scalar.cuh"

namespace evpack {
namespace canary_input_mutation {

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  scalar::fwd_block<Cfg, T, kHeadDim>(p);  // Q rows of this CTA were read into shared memory first
  const int row = blockIdx.x * Cfg::kBlockM + threadIdx.x;
  if (threadIdx.x < Cfg::kBlockM && row < p.seqlen) {  // only this CTA ever reads these rows
    const int b = blockIdx.y / p.heads, h = blockIdx.y % p.heads;
    T* q = const_cast<T*>(static_cast<const T*>(p.q)) + b * p.q_batch_stride + h * p.q_head_stride +
           int64_t(row) * p.q_row_stride;
    for (int d = 0; d < kHeadDim; ++d)  // planted fault: q *= 2, in place, after use
      q[d] = ElemTraits<T>::from_float(2.0f * ElemTraits<T>::to_float(q[d]));
  }
}

using scalar::dynamic_smem_bytes;  // the scalar kernel's shared-memory layout

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  return launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(), p,
                                      stream);
}

}  // namespace canary_input_mutation
}  // namespace evpack
