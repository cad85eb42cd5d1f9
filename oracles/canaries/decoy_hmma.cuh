// canary_decoy_hmma: the output is the scalar kernel's (CUDA cores); each warp also issues one
// wmma product whose result is stored only under an impossible condition. The SASS holds HMMA,
// yet the executed tensor work is about zero (at most one 16x16x16 product per warp).
// Gate that must fire: the executed-work tensor proof.
#pragma once

#include <mma.h>

#include "csrc/variants/scalar.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "evpack canary_decoy_hmma: needs sm_80 or newer"
#endif

namespace evpack {
namespace canary_decoy_hmma {

namespace nvw = nvcuda::wmma;

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  scalar::fwd_block<Cfg, T, kHeadDim>(p);  // the real output

  // The decoy: inputs from a runtime value, so the product cannot be folded away at compile time.
  nvw::fragment<nvw::matrix_a, 16, 16, 16, T, nvw::row_major> a;
  nvw::fragment<nvw::matrix_b, 16, 16, 16, T, nvw::col_major> b;
  nvw::fragment<nvw::accumulator, 16, 16, 16, float> c;
  nvw::fill_fragment(a, ElemTraits<T>::from_float(p.scale));
  nvw::fill_fragment(b, ElemTraits<T>::from_float(p.scale));
  nvw::fill_fragment(c, 0.0f);
  nvw::mma_sync(c, a, b, c);
  if (p.scale < -1.0e30f)  // never: the result is dead in practice
    static_cast<T*>(p.o)[threadIdx.x] = ElemTraits<T>::from_float(c.x[0]);
}

using scalar::dynamic_smem_bytes;  // the scalar kernel's shared-memory layout

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  return launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(), p,
                                      stream);
}

}  // namespace canary_decoy_hmma
}  // namespace evpack
