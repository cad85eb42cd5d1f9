// canary_capture_aware: the scalar kernel, registered under two configs (m64n64w2s1, m32n64w1s1) whose
// outputs are bitwise equal (one thread per query row, the same 64-key tiles and 16-key chunks). Eager calls
// run the kernel they ask for; under CUDA-graph capture (cudaStreamIsCapturing) the launch hands the call to
// the other config's launcher, so the graph holds a kernel the call did not ask for. Its output is right and
// bitwise the eager one, refilled inputs are honoured, and every replay writes the poisoned output: only an
// inspection of the captured graph's kernel nodes sees it (what a graph timing would then measure is another
// kernel than the row it is reported under).
// Gate that must fire: stability (a captured graph must hold the call's own kernel, and only that one).
#pragma once

#include <cstring>

#include "csrc/variants/scalar.cuh"

namespace evpack {
namespace canary_capture_aware {

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  scalar::fwd_block<Cfg, T, kHeadDim>(p);
}

using scalar::dynamic_smem_bytes;  // the scalar kernel's shared-memory layout

inline bool& handing_over() {  // set while a capture-time call runs another config's launcher
  static thread_local bool on = false;
  return on;
}

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(stream, &capture);
  if (err != cudaSuccess) return err;
  if (capture == cudaStreamCaptureStatusActive && !handing_over()) {
    for (const KernelEntry& e : registered_kernels()) {  // planted fault: another config's kernel under capture
      if (std::strcmp(e.variant, "canary_capture_aware") == 0 && std::strcmp(e.dtype, ElemTraits<T>::kName) == 0 &&
          e.head_dim == kHeadDim && e.launch != &launch<Cfg, T, kHeadDim>) {
        handing_over() = true;
        err = e.launch(p, stream);
        handing_over() = false;
        return err;
      }
    }
  }
  return launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(), p,
                                      stream);
}

}  // namespace canary_capture_aware
}  // namespace evpack
