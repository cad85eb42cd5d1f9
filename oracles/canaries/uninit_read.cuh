// canary_uninit_read: the scalar kernel whose epilogue reads each output row before writing it.
// Gate that must fire: compute-sanitizer initcheck (uninitialized __global__ read), given an
// output buffer nothing has written yet (torch.empty on a fresh allocation).
//
// The read is volatile, so it happens; the value only matters together with an impossible
// scale, so the output is exactly the scalar kernel's.
#pragma once

#include "csrc/variants/scalar.cuh"

namespace evpack {
namespace canary_uninit_read {

struct UninitEpilogue {
  __device__ __forceinline__ static float row_factor(const scalar::EpilogueArgs& a) {
    if (!a.valid) return 1.0f;
    const unsigned short old = *static_cast<const volatile unsigned short*>(a.o_row);  // o[b, h, row, 0], unwritten
    return (old == 0x7c01u) & (a.p.scale < -1.0e30f) ? 2.0f : 1.0f;
  }
};

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  scalar::fwd_block<Cfg, T, kHeadDim, UninitEpilogue>(p);
}

using scalar::dynamic_smem_bytes;  // the scalar kernel's shared-memory layout

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  return launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(), p,
                                      stream);
}

}  // namespace canary_uninit_read
}  // namespace evpack
