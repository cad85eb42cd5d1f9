// canary_divergent_sync: the scalar kernel with a __syncthreads() that only the odd threads of
// each warp reach. Gate that must fire: compute-sanitizer synccheck.
//
// It sits in the epilogue, after the key loop's last barrier and before the stores, so the even
// threads are still alive (not exited) when their odd neighbours reach it, and the output is the
// scalar kernel's. It does not hang on sm_70+: every warp arrives through its odd lanes, and a
// bar.sync arrival counts the whole warp (PTX ISA: "incremented by the warp size").
#pragma once

#include "csrc/variants/scalar.cuh"

namespace evpack {
namespace canary_divergent_sync {

struct DivergentSyncEpilogue {
  __device__ __forceinline__ static float row_factor(const scalar::EpilogueArgs& a) {
    if (a.tid & 1) __syncthreads();  // planted fault: a barrier in divergent code
    return 1.0f;
  }
};

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  scalar::fwd_block<Cfg, T, kHeadDim, DivergentSyncEpilogue>(p);
}

using scalar::dynamic_smem_bytes;  // the scalar kernel's shared-memory layout

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  return launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(), p,
                                      stream);
}

}  // namespace canary_divergent_sync
}  // namespace evpack
