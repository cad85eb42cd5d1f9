// Launcher of the Triton variants' ahead-of-time cubins (python/evpack/triton_aot.py builds them).
//
// Each Triton kernel is embedded in the extension as one fat binary (the cubins of every arch it was
// built for, verbatim) in the .nv_fatbin section, where cuobjdump finds it beside the nvcc kernels: the
// SASS the pack proves is read from this very shared object, whose SHA-256 every stage records. The
// launcher loads that image with the CUDA driver API (cuModuleLoadData, once per device), looks up the
// entry by its symbol and launches it with cuLaunchKernel on the caller's stream. It can load nothing
// else: the image is a constant of the binary.
//
// Kernel parameters, in order (the PTX .param list, checked by the build): q, k, v, o pointers; the 12
// batch/head/row strides of q, k, v, o divided by 8 (int32); heads, seqlen (int32); scale (float);
// causal (int32); then Triton's global and profile scratch pointers (null: the build refuses kernels
// that need scratch).
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

#include "evpack/params.h"

namespace evpack {

struct TritonImage {
  int cc;                     // compute capability of the cubin's device, 10 * major + minor (sm_90a: 90)
  unsigned int shared_bytes;  // its dynamic shared memory (Triton's metadata); > 48 KB is opted into
};

constexpr int kMaxTritonImages = 4;

struct TritonKernel {
  const char* symbol;           // the entry's mangled name (the CUDA variants' scheme)
  const unsigned char* fatbin;  // the embedded fat binary
  TritonImage images[kMaxTritonImages];  // the cubins the fat binary holds, one per device generation
  int n_images;
  int warps;    // num_warps: 32 * warps threads per CTA
  int block_m;  // query rows per CTA: grid (cdiv(seqlen, block_m), batch * heads)
};

// Launches `k` for `p` on `stream`; never synchronizes. Errors: cudaErrorNoKernelImageForDevice when the
// image holds no cubin for this device, cudaErrorInvalidValue for strides the kernel cannot address in
// 32 bits, else the driver's error mapped to the runtime's (cudaErrorLaunchFailure when it has no twin).
cudaError_t triton_launch(const TritonKernel& k, const FwdParams& p, cudaStream_t stream);

}  // namespace evpack
