// canary_divergent_sync: a __syncthreads() that only the odd threads of each warp reach, at the
// start of the scalar kernel. Gate that must fire: compute-sanitizer synccheck.
//
// This is the construct synccheck flagged on an H200 ("Barrier error detected. Divergent
// thread(s) in warp", tests/fixtures/sanitizer/san_synccheck_divsync.txt). A first version put
// the barrier in the epilogue, before the stores; under synccheck that kernel hung until the
// cell's timeout, with nothing reported (an H200 pack from commit 89abbe3); this one is flagged
// in 5.4 s (reference pack 20261121T142018Z-b40b5c2fd4c6, sanitize/procs.json). Without the
// tool the kernel completes: every arrival at barrier 0 counts, odd threads meet their even
// neighbours' first barrier of the body, and exited threads release the last one.
#pragma once

#include "csrc/variants/scalar.cuh"

namespace evpack {
namespace canary_divergent_sync {

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  if (threadIdx.x & 1) __syncthreads();  // planted fault: a barrier in divergent code
  scalar::fwd_block<Cfg, T, kHeadDim>(p);
}

using scalar::dynamic_smem_bytes;  // the scalar kernel's shared-memory layout

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  return launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(), p,
                                      stream);
}

}  // namespace canary_divergent_sync
}  // namespace evpack
