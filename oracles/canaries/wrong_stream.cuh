// canary_wrong_stream: the scalar kernel launched on the legacy default stream whatever stream the
// caller passed. On the legacy stream of a single-stream program it looks right; after a pending
// producer on the caller's (non-blocking) stream it reads its inputs before they are written, and a
// consumer on that stream may read the output before it is written. Under global-mode graph capture
// the launch is refused. Gate that must fire: stability (side-stream ordering, graph capture).
#pragma once

#include "csrc/variants/scalar.cuh"

namespace evpack {
namespace canary_wrong_stream {

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  scalar::fwd_block<Cfg, T, kHeadDim>(p);
}

using scalar::dynamic_smem_bytes;  // the scalar kernel's shared-memory layout

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t /*stream*/) {
  return launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(), p,
                                      cudaStreamLegacy);  // planted fault: not the caller's stream
}

}  // namespace canary_wrong_stream
}  // namespace evpack
