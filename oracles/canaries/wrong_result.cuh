// canary_wrong_result: the scalar kernel with the softmax scale off by 5%.
// Gate that must fire: the correctness oracle.
#pragma once

#include "csrc/variants/scalar.cuh"

namespace evpack {
namespace canary_wrong_result {

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  p.scale *= 1.05f;  // planted fault
  scalar::fwd_block<Cfg, T, kHeadDim>(p);
}

using scalar::dynamic_smem_bytes;  // the scalar kernel's shared-memory layout

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  return launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(), p,
                                      stream);
}

}  // namespace canary_wrong_result
}  // namespace evpack
