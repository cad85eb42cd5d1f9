// wgmma: the end of a split work item's piece (scheduler.cuh, tail_split). A consumer warpgroup that ran a
// piece of an item's K/V tiles leaves what it has, per thread, in the launch's `partials`:
//   rO (D / 2)  its unnormalised output;  m (2)  the running max of its rows;  l (2)  its partial row sums
// stored field-major (field f of thread t at f * 128 + t, so a warp's stores and loads are coalesced), then
// counts itself in `arrivals` (one counter per split item and consumer warpgroup). The piece that arrives last
// merges every piece of the item, its own included, in piece order from `partials`, so the result does not
// depend on which piece finished last, and goes on to the epilogue; the others store nothing.
// Ordering: each thread's stores, then __threadfence, then the warpgroup's barrier, then one thread's atomicAdd;
// the last piece's threads pass the barrier after that atomicAdd and fence before they load.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "evpack/hopper.cuh"
#include "evpack/params.h"
#include "config.cuh"
#include "scheduler.cuh"
#include "softmax.cuh"

namespace evpack {
namespace wgmma {

template <class S, int kHeadDim>
struct SplitPiece {
  static constexpr int kFields = kHeadDim / 2 + 4;  // rO, m[2], l[2]
  static constexpr int kFloatsPerConsumer = kFields * 128;

  const TmaMaps& tma;
  int* last_piece;  // shared: this warpgroup's arrival verdict
  int consumer, tid;

  __device__ __forceinline__ SplitPiece(const TmaMaps& maps, const SharedStorage<S>& sm, int c)
      : tma(maps), last_piece(sm.last_piece + c), consumer(c), tid(threadIdx.x % 128) {}

  __device__ __forceinline__ float* slot(int piece) const {
    return tma.partials + (static_cast<size_t>(piece) * S::kConsumers + consumer) * kFloatsPerConsumer + tid;
  }

  // Leaves this piece's state in `partials` and counts it. True for the piece that arrived last: rO, softmax.m and
  // softmax.l then hold the merge of every piece of the item, ready for the epilogue.
  template <int kBlockN>
  __device__ __forceinline__ bool finish(float (&rO)[kHeadDim / 2], OnlineSoftmax<kBlockN>& softmax, int piece,
                                         int item, int splits) const {
    float* mine = slot(piece);
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) mine[i * 128] = rO[i];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mine[(kHeadDim / 2 + r) * 128] = softmax.m[r];
      mine[(kHeadDim / 2 + 2 + r) * 128] = softmax.l[r];
    }
    __threadfence();
    hopper::named_barrier_sync(1 + consumer, 128);
    if (tid == 0) *last_piece = atomicAdd(tma.arrivals + item * S::kConsumers + consumer, 1) == splits - 1;
    hopper::named_barrier_sync(1 + consumer, 128);
    // From shared memory but the same for the whole warpgroup: broadcast, so the compiler knows it is warp-uniform.
    const int last = __shfl_sync(0xffffffffu, *last_piece, 0);
    if (!last) return false;
    __threadfence();
    const int first = piece - piece % splits;
    softmax.reset();
#pragma unroll 1
    for (int s = 0; s < splits; ++s) merge(rO, softmax, slot(first + s), s == 0);
    return true;
  }

  // rO, m, l (the merge of the pieces before) and the piece at `other`: O = O 2^((m - m') c) + O_p 2^((m_p - m') c),
  // l likewise, m' = max(m, m_p), c = scale log2 e (softmax.h's units). A row that saw no key keeps m = -inf, l = 0.
  template <int kBlockN>
  __device__ __forceinline__ static void merge(float (&rO)[kHeadDim / 2], OnlineSoftmax<kBlockN>& softmax,
                                               const float* other, bool first) {
    float a[2], b[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_p = __ldcg(other + (kHeadDim / 2 + r) * 128);
      const float l_p = __ldcg(other + (kHeadDim / 2 + 2 + r) * 128);
      const float mx = fmaxf(softmax.m[r], m_p);
      const float mx_scaled = mx == -INFINITY ? 0.f : mx * softmax.scale_log2;
      a[r] = first ? 0.f : exp2_sfu(softmax.m[r] * softmax.scale_log2 - mx_scaled);  // m = -inf -> 0
      b[r] = exp2_sfu(m_p * softmax.scale_log2 - mx_scaled);
      softmax.m[r] = mx;
      softmax.l[r] = softmax.l[r] * a[r] + l_p * b[r];
    }
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) {
      const float o_p = __ldcg(other + i * 128);
      const float alpha = a[(i / 2) % 2], beta = b[(i / 2) % 2];  // rO[4 x + e]: row 0 for e < 2, row 1 after
      rO[i] = first ? o_p * beta : fmaf(rO[i], alpha, o_p * beta);
    }
  }
};

namespace detail {

// Host: the scratch memory of a launch that splits items (the arrivals, then the partials) from the binding's
// allocator, the arrivals zeroed on the launch's stream. Without an allocator, or without memory from it, the
// launch splits nothing.
template <class S, int kHeadDim>
inline cudaError_t split_scratch(TmaMaps* maps, TailSplit* split, long long items, const FwdParams& p,
                                 cudaStream_t stream) {
  const long long split_items = split->split_items(items);
  const size_t arrival_bytes = (static_cast<size_t>(split_items) * S::kConsumers * sizeof(int) + 255) / 256 * 256;
  const size_t partial_bytes = static_cast<size_t>(split_items) * split->splits * S::kConsumers *
                               SplitPiece<S, kHeadDim>::kFloatsPerConsumer * sizeof(float);
  void* scratch = split->splits > 1 && p.scratch != nullptr ? p.scratch(p.scratch_ctx, arrival_bytes + partial_bytes)
                                                             : nullptr;
  if (scratch == nullptr) *split = TailSplit{items, 1};
  maps->whole_items = static_cast<int>(split->whole_items);
  maps->splits = split->splits;
  maps->arrivals = static_cast<int*>(scratch);
  maps->partials = scratch == nullptr ? nullptr : reinterpret_cast<float*>(static_cast<char*>(scratch) + arrival_bytes);
  return scratch == nullptr ? cudaSuccess : cudaMemsetAsync(scratch, 0, arrival_bytes, stream);
}

}  // namespace detail
}  // namespace wgmma
}  // namespace evpack
