// canary_second_launch: the scalar kernel, correct on its first launch in a process; from the
// second launch on, o[0, 0, 0, 0] comes out 1.0 too large. Gate that must fire: the bitwise
// stability check (repeated launches on the same inputs).
#pragma once

#include "csrc/variants/scalar.cuh"

namespace evpack {
namespace canary_second_launch {

static __device__ unsigned int g_launches = 0;  // launches so far (per loaded module)

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  scalar::fwd_block<Cfg, T, kHeadDim>(p);  // thread 0 of CTA (0, 0) has just stored o[0, 0, 0, :]

  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    const unsigned int before = atomicAdd(&g_launches, 1u);
    if (before > 0) {  // planted fault, second launch on
      T* o = static_cast<T*>(p.o);
      o[0] = ElemTraits<T>::from_float(ElemTraits<T>::to_float(o[0]) + 1.0f);
    }
  }
}

using scalar::dynamic_smem_bytes;  // the scalar kernel's shared-memory layout

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  return launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(), p,
                                      stream);
}

}  // namespace canary_second_launch
}  // namespace evpack
