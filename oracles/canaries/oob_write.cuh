// canary_oob_write: the scalar kernel plus one store far past the end of `o`.
// Gate that must fire: compute-sanitizer memcheck (invalid __global__ write).
//
// The offset is 2^25 elements (64 MiB for fp16) past the last element of `o`: beyond the 2 MiB
// and 20 MiB segments of PyTorch's caching allocator as well as beyond a lone cudaMalloc, so
// memcheck sees an address outside every allocation either way. Run it only under memcheck.
#pragma once

#include "csrc/variants/scalar.cuh"

namespace evpack {
namespace canary_oob_write {

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  scalar::fwd_block<Cfg, T, kHeadDim>(p);  // a correct output

  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    // Planted fault: one element well past the end of o.
    const int64_t last = int64_t(p.batch - 1) * p.o_batch_stride + int64_t(p.heads - 1) * p.o_head_stride +
                         int64_t(p.seqlen - 1) * p.o_row_stride + kHeadDim;  // one past o's last element
    static_cast<T*>(p.o)[last + (int64_t(1) << 25)] = ElemTraits<T>::from_float(0.0f);
  }
}

using scalar::dynamic_smem_bytes;  // the scalar kernel's shared-memory layout

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  return launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(), p,
                                      stream);
}

}  // namespace canary_oob_write
}  // namespace evpack
