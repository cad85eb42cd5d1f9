// canary_smem_race: the scalar kernel whose epilogue writes a shared-memory slot and reads the
// slot of a thread in the other warp with no barrier in between.
// Gate that must fire: compute-sanitizer racecheck (shared-memory hazard).
//
// The slot is column 0 of the thread's own row of sQ (the fp32 Q tile; each row is read only by
// its own thread in the main loop). Whichever order the race resolves in, the value read is
// finite (the neighbour's scaled q or its 1.0f), so the output stays correct; the comparison
// below can never hold for fp16 inputs and only keeps the read alive.
#pragma once

#include "csrc/variants/scalar.cuh"

namespace evpack {
namespace canary_smem_race {

struct RaceEpilogue {
  __device__ __forceinline__ static float row_factor(const scalar::EpilogueArgs& a) {
    volatile float* sQ = a.sQ;
    sQ[a.tid * a.q_stride] = 1.0f;                          // write my slot ...
    const int neighbour = (a.tid + 32) % int(blockDim.x);  // ... a thread of the other warp
    const float seen = sQ[neighbour * a.q_stride];          // ... read its slot: no __syncthreads()
    return seen > 3.0e38f ? 2.0f : 1.0f;                    // never true (|seen| <= 65504 * scale * log2 e)
  }
};

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  static_assert(Cfg::kThreads == 64, "canary_smem_race: the neighbour is 32 threads away in a 2-warp CTA");
  scalar::fwd_block<Cfg, T, kHeadDim, RaceEpilogue>(p);
}

using scalar::dynamic_smem_bytes;  // the scalar kernel's shared-memory layout

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  return launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(), p,
                                      stream);
}

}  // namespace canary_smem_race
}  // namespace evpack
