// canary_input_family: a tensor-core kernel (compact_mma.cuh, fp32 accumulators) with a fast path that
// assumes no outlier channels: K and V are held in a saturating +-512 range on their way to shared memory
// (what a fixed-scale 8-bit layout, or fp16 pre-scaled by 128 for precision, does to larger values). Right on
// the normal grid, on sharpened softmaxes and on Student-t inputs (|x| > 512 has probability ~1.6e-8 per
// element there), wrong on the outlier-channel family, whose few head dims hold +-750..1000.
// Gate that must fire: correctness (the seeded structured input families).
#pragma once

#include "oracles/canaries/compact_mma.cuh"

namespace evpack {
namespace canary_input_family {

constexpr float kSaturation = 512.0f;  // |k|, |v| beyond this are clipped

struct Saturating : compact_mma::Exact {
  template <class T>
  __device__ __forceinline__ static uint4 kv(uint4 raw) {  // planted fault: outliers clipped
    float f[kVecElems];
    unpack_to_float<T>(&raw, f);
#pragma unroll
    for (int i = 0; i < kVecElems; ++i) f[i] = fminf(fmaxf(f[i], -kSaturation), kSaturation);
    uint4 out;
    pack_from_float<T>(f, &out);
    return out;
  }
};

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads) fwd_kernel(FwdParams p) {
  compact_mma::fwd_block<Saturating, Cfg, T, kHeadDim>(p);
}

using compact_mma::dynamic_smem_bytes;

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  return launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(), p,
                                      stream);
}

}  // namespace canary_input_family
}  // namespace evpack
