// wgmma: the epilogue of one consumer warpgroup: O = rO / l -> T -> its 64 rows of the O staging tile
// (128B-swizzled, as TMA reads it) -> one TMA store per 64-column box, left in flight until the staging tile
// is needed again. Rows past seqlen are clipped by TMA.
#pragma once

#include <cstdint>

#include "evpack/hopper.cuh"
#include "evpack/kernel_common.cuh"
#include "config.cuh"

namespace evpack {
namespace wgmma {

// Byte offset of element (row, col) inside a 128B-swizzled box of 64-column rows (TMA's
// CU_TENSOR_MAP_SWIZZLE_128B pattern: 16-byte chunk index XOR row % 8).
__device__ __forceinline__ uint32_t swizzled_offset(int row, int col) {
  return row * kBoxRowBytes + ((((col >> 3) ^ (row & 7)) << 4) | ((col & 7) * 2));
}

template <class S, class T, int kHeadDim>
struct Epilogue {
  uint8_t* o_rows;  // this warpgroup's 64 rows of each box of the O staging tile
  const TmaMaps& tma;
  int consumer;

  __device__ __forceinline__ Epilogue(const SharedStorage<S>& sm, const TmaMaps& maps, int c)
      : o_rows(sm.o + c * kRowsPerConsumer * kBoxRowBytes), tma(maps), consumer(c) {}

  __device__ __forceinline__ void store(const float (&rO)[kHeadDim / 2], const float (&inv_l)[2], int first_row,
                                        int batch, int head, int seqlen) const {
    const int tid_in_wg = threadIdx.x % 128, warp = tid_in_wg / 32, lane = tid_in_wg % 32;
    const int g = lane / 4, t = lane % 4;
    if (tid_in_wg == 0) hopper::tma_store_wait_read();  // this warpgroup's previous store has read the tile
    hopper::named_barrier_sync(1 + consumer, 128);
    const int r_local0 = 16 * warp + g, r_local1 = r_local0 + 8;
#pragma unroll
    for (int a = 0; a < kHeadDim / 8; ++a) {
      const int box = a / 8, col = 8 * (a % 8) + 2 * t;
      uint8_t* sbox = o_rows + box * S::kQBoxBytes;
      const uint32_t v0 = pack2<T>(rO[4 * a + 0] * inv_l[0], rO[4 * a + 1] * inv_l[0]);
      const uint32_t v1 = pack2<T>(rO[4 * a + 2] * inv_l[1], rO[4 * a + 3] * inv_l[1]);
      *reinterpret_cast<uint32_t*>(sbox + swizzled_offset(r_local0, col)) = v0;
      *reinterpret_cast<uint32_t*>(sbox + swizzled_offset(r_local1, col)) = v1;
    }
    hopper::fence_proxy_async_smem();               // the writes above, before the copy engine reads
    hopper::named_barrier_sync(1 + consumer, 128);  // every thread of this warpgroup has written
    if (tid_in_wg == 0 && first_row < seqlen) {
      for (int b = 0; b < S::kDBoxes; ++b)
        hopper::tma_store_4d(&tma.o, o_rows + b * S::kQBoxBytes, b * kBoxCols, first_row, head, batch);
      hopper::tma_store_commit();
    }
  }
  // Shared memory must outlive the last copy.
  __device__ __forceinline__ void drain() const {
    if (threadIdx.x % 128 == 0) hopper::tma_store_wait_read();
  }
};

}  // namespace wgmma
}  // namespace evpack
