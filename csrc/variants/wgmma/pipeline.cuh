// wgmma: the rings of shared-memory buffers between the producer and the consumers (the K/V ring of
// STAGES slots, the two Q buffers) and a position in one.
//
// Every buffer has a "full" mbarrier (one arrival with the expected bytes, completed by the copy engine)
// and an "empty" one (one arrival per consumer warp once nothing reads the buffer any more). The producer
// and every consumer pass the buffers in the same order, so each keeps its own count of buffers passed:
// buffer number n lives in slot n % SLOTS and its use number n / SLOTS is the phase, whose parity the
// waits name.
#pragma once

#include <cstdint>

#include "evpack/hopper.cuh"

namespace evpack {
namespace wgmma {

template <int kSlots>
struct PipelineState {
  int count = 0;  // buffers passed so far

  __device__ __forceinline__ int slot() const { return count % kSlots; }
  __device__ __forceinline__ uint32_t parity() const { return (count / kSlots) & 1; }
  __device__ __forceinline__ bool reused() const { return count >= kSlots; }  // its slot held an earlier buffer
  __device__ __forceinline__ PipelineState at(int ahead) const { return {count + ahead}; }
  __device__ __forceinline__ void advance(int n = 1) { count += n; }
};

template <int kSlots>
struct Ring {
  uint64_t* full;   // [kSlots]
  uint64_t* empty;  // [kSlots]

  __device__ __forceinline__ void init(uint32_t consumer_warps) const {  // one thread, before any use
    for (int s = 0; s < kSlots; ++s) {
      hopper::mbar_init(&full[s], 1);
      hopper::mbar_init(&empty[s], consumer_warps);
    }
  }
  // Producer: waits until every consumer warp released the slot's previous buffer, then announces `bytes`
  // on the slot's full barrier; returns that barrier (the TMA copies complete it).
  __device__ __forceinline__ uint64_t* acquire(PipelineState<kSlots> st, uint32_t bytes) const {
    if (st.reused()) hopper::mbar_wait(&empty[st.slot()], st.parity() ^ 1);
    hopper::mbar_arrive_expect_tx(&full[st.slot()], bytes);
    return &full[st.slot()];
  }
  // Consumer: waits until the buffer has landed.
  __device__ __forceinline__ void wait(PipelineState<kSlots> st) const {
    hopper::mbar_wait(&full[st.slot()], st.parity());
  }
  // Consumer warp: nothing of this warp reads the buffer any more.
  __device__ __forceinline__ void release(PipelineState<kSlots> st, int lane) const {
    if (lane == 0) hopper::mbar_arrive(&empty[st.slot()]);
  }
};

}  // namespace wgmma
}  // namespace evpack
