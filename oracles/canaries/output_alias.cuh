// canary_output_alias: the scalar kernel, which keeps the output buffer of its previous call as a buffer of
// its own: after computing a call's output into o, it also writes it into the previous call's o (a result
// ring that assumes the caller has consumed the last result). Every output is right when it is made, and
// repeated calls on the same inputs write the same bits there; a caller that keeps call 1's output finds it
// overwritten by call 2's. A caller that freed it may see the write land in whatever reused that memory (it
// skips the case where that is one of the new call's own operands). Contiguous outputs only (what every
// caller in this repository passes).
// Gate that must fire: stability (outputs of earlier calls kept alive and rechecked after later calls).
#pragma once

#include <cstddef>

#include "csrc/variants/scalar.cuh"

namespace evpack {
namespace canary_output_alias {

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  scalar::fwd_block<Cfg, T, kHeadDim>(p);
}

using scalar::dynamic_smem_bytes;  // the scalar kernel's shared-memory layout

struct PreviousOutput {
  void* ptr = nullptr;
  size_t bytes = 0;
};

inline PreviousOutput& previous() {
  static PreviousOutput last;
  return last;
}

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  cudaError_t err = launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(),
                                                 p, stream);
  if (err != cudaSuccess) return err;
  const size_t bytes = size_t(p.batch) * p.heads * p.seqlen * p.head_dim * sizeof(T);
  PreviousOutput& last = previous();
  // planted fault: call 2 overwrites call 1's output (unless that memory is now one of this call's operands)
  const bool operand = last.ptr == p.o || last.ptr == p.q || last.ptr == p.k || last.ptr == p.v;
  if (last.ptr != nullptr && !operand && last.bytes == bytes)
    err = cudaMemcpyAsync(last.ptr, p.o, bytes, cudaMemcpyDeviceToDevice, stream);
  last = {p.o, bytes};
  return err;
}

}  // namespace canary_output_alias
}  // namespace evpack
