// canary_side_stream: the scalar kernel launched on a private non-blocking stream that the caller's
// stream never waits for. Timing events on the caller's stream bracket nothing, so the call looks
// faster than the hardware allows; the output is written whenever the private stream gets to it.
// Gate that must fire: bench (a row faster than the same-run speed-of-light floor is an error;
// the timed-output re-check and the device-drain check fire too).
#pragma once

#include "csrc/variants/scalar.cuh"

namespace evpack {
namespace canary_side_stream {

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  scalar::fwd_block<Cfg, T, kHeadDim>(p);
}

using scalar::dynamic_smem_bytes;  // the scalar kernel's shared-memory layout

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t /*stream*/) {
  static cudaStream_t hidden = nullptr;  // planted fault: the work goes where the caller cannot see it
  if (hidden == nullptr) {
    const cudaError_t err = cudaStreamCreateWithFlags(&hidden, cudaStreamNonBlocking);
    if (err != cudaSuccess) return err;
  }
  return launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(), p,
                                      hidden);
}

}  // namespace canary_side_stream
}  // namespace evpack
