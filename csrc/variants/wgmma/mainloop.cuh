// wgmma: the producer's load loop and the consumers' main loop over the K/V tiles of their work items.
//
// Producer (one thread of warpgroup 0): per work item, its Q into one of the two Q buffers, then its K/V
// tiles into the ring, in the scheduler's order; the ring and the Q buffers run on across items.
// Consumer warpgroup c owns query rows [64 c, 64 c + 64) of the item. Per K/V tile j:
//   rS  = sQ_c . sK_j^T        wgmma SS, m64 n BLOCK_N k16, D / 16 of them
//   rO += rP_{j-1} . sV_{j-1}  wgmma RS (P from registers), m64 n D k16, issued with S_j, so it runs while
//                              this warpgroup does the softmax of S_j
//   softmax(rS) (softmax.cuh); wait for P.V_{j-1}; rO *= alpha; rP = T(P)
// The consumers take turns to issue their wgmmas (pingpong, named barriers), so one's softmax overlaps the
// others' matrix work. A consumer whose rows all lie past seqlen computes nothing and only takes its turns
// (pass_tiles); with kCausalStop, causal, one passes the tiles past its own last row's key on the same way.
#pragma once

#include <cstdint>

#include "evpack/hopper.cuh"
#include "evpack/kernel_common.cuh"
#include "evpack/params.h"
#include "config.cuh"
#include "epilogue.cuh"
#include "pipeline.cuh"
#include "scheduler.cuh"
#include "softmax.cuh"
#include "split.cuh"

namespace evpack {
namespace wgmma {

template <class S>
using Scheduler = TileScheduler<S::kBlockM, S::kBlockN, S::kTailSplit>;

template <class S>
__device__ __forceinline__ void producer_loop(const FwdParams& p, const TmaMaps& tma, const SharedStorage<S>& sm,
                                              const Scheduler<S>& sched) {
  hopper::tma_prefetch_descriptor(&tma.q);
  hopper::tma_prefetch_descriptor(&tma.k);
  hopper::tma_prefetch_descriptor(&tma.v);
  hopper::tma_prefetch_descriptor(&tma.o);
  const Ring<2> q_ring{sm.q_full, sm.q_empty};
  const Ring<S::kStages> k_ring{sm.k_full, sm.k_empty}, v_ring{sm.v_full, sm.v_empty};
  PipelineState<2> qs;
  PipelineState<S::kStages> kv;
  for (int tile = sched.first(); sched.valid(tile); tile = sched.next(tile), qs.advance()) {
    const TileCoord c = sched.coord(tile);
    const int batch = c.bh / p.heads, head = c.bh % p.heads, m0 = c.m_block * S::kBlockM;
    uint64_t* q_bar = q_ring.acquire(qs, S::kQBytes);  // its last Q.K^T, 2 items ago, is done
    for (int b = 0; b < S::kDBoxes; ++b)
      hopper::tma_load_4d(sm.q + qs.slot() * S::kQBytes + b * S::kQBoxBytes, &tma.q, q_bar, b * kBoxCols, m0, head,
                          batch);
    const int kv_begin = S::kTailSplit ? c.kv_begin : 0;
    const int kv_end = S::kTailSplit ? c.kv_end : sched.kv_tiles(c.m_block);
    for (int j = kv_begin; j < kv_end; ++j, kv.advance()) {
      const int n0 = j * S::kBlockN;
      uint64_t* k_bar = k_ring.acquire(kv, S::kKVBytes);
      for (int b = 0; b < S::kDBoxes; ++b)
        hopper::tma_load_4d(sm.k + kv.slot() * S::kKVBytes + b * S::kKVBoxBytes, &tma.k, k_bar, b * kBoxCols, n0,
                            head, batch);
      uint64_t* v_bar = v_ring.acquire(kv, S::kKVBytes);
      for (int b = 0; b < S::kDBoxes; ++b)
        hopper::tma_load_4d(sm.v + kv.slot() * S::kKVBytes + b * S::kKVBoxBytes, &tma.v, v_bar, b * kBoxCols, n0,
                            head, batch);
    }
  }
}

// The wgmmas of one consumer warpgroup.
template <class S, class T, int kHeadDim>
struct ConsumerMma {
  uint32_t q_addr, k_addr, v_addr;  // this warpgroup's rows of Q buffer 0; the K and V rings

  __device__ __forceinline__ ConsumerMma(const SharedStorage<S>& sm, int consumer)
      : q_addr(hopper::smem_u32(sm.q) + consumer * kRowsPerConsumer * kBoxRowBytes),
        k_addr(hopper::smem_u32(sm.k)),
        v_addr(hopper::smem_u32(sm.v)) {}

  // rS = sQ_c (64, D) . sK_s (BLOCK_N, D)^T of Q buffer q, ring slot s; both K-major, k16 step kk at byte
  // 32 (kk % 4) of box kk / 4.
  __device__ __forceinline__ void qk(float (&rS)[S::kBlockN / 2], int q, int s) const {
    hopper::fence_operands(rS);
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < S::kKSteps; ++kk) {
      const uint32_t a = q_addr + q * S::kQBytes + (kk / 4) * S::kQBoxBytes + (kk % 4) * 32;
      const uint32_t b = k_addr + s * S::kKVBytes + (kk / 4) * S::kKVBoxBytes + (kk % 4) * 32;
      hopper::wgmma_ss<S::kBlockN, T>(rS, hopper::make_smem_desc_sw128(a, 16, 1024),
                                      hopper::make_smem_desc_sw128(b, 16, 1024), kk > 0);
    }
    hopper::wgmma_commit();
    hopper::fence_operands(rS);
  }
  // rO += rP (64, BLOCK_N) . sV_s (BLOCK_N, D); V is N-major: k16 step kk = keys 16 kk.. at byte 2048 kk, the
  // next 64 columns of D one box (LBO) further.
  __device__ __forceinline__ void pv(float (&rO)[kHeadDim / 2], uint32_t (&rP)[S::kPSteps][4], int s) const {
    hopper::fence_operands(rO);
    hopper::fence_operands(rP);
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < S::kPSteps; ++kk) {
      const uint32_t b = v_addr + s * S::kKVBytes + kk * 16 * kBoxRowBytes;
      hopper::wgmma_rs<kHeadDim, T>(rO, rP[kk], hopper::make_smem_desc_sw128(b, S::kKVBoxBytes, 1024), 1);
    }
    hopper::wgmma_commit();
    hopper::fence_operands(rO);
    hopper::fence_operands(rP);
  }
  // rP = T(P): the C fragments of n8 atoms 2kk, 2kk + 1 are the A fragment of k16 step kk.
  __device__ __forceinline__ static void convert(uint32_t (&rP)[S::kPSteps][4], const float (&rS)[S::kBlockN / 2]) {
#pragma unroll
    for (int kk = 0; kk < S::kPSteps; ++kk) {
      rP[kk][0] = pack2<T>(rS[8 * kk + 0], rS[8 * kk + 1]);  // row g,     keys 16kk + 2t, +1
      rP[kk][1] = pack2<T>(rS[8 * kk + 2], rS[8 * kk + 3]);  // row g + 8, keys 16kk + 2t, +1
      rP[kk][2] = pack2<T>(rS[8 * kk + 4], rS[8 * kk + 5]);  // row g,     keys 16kk + 8 + 2t, +1
      rP[kk][3] = pack2<T>(rS[8 * kk + 6], rS[8 * kk + 7]);  // row g + 8, keys 16kk + 8 + 2t, +1
    }
  }
};

// Pingpong: the consumer warpgroups take turns to issue their wgmmas, warpgroup 0 first, then 1, ...: warpgroup c
// waits on named barrier kBase + c, which the warpgroup before it arrives at once it has issued (barriers
// 1 .. kConsumers are the epilogue's). One warpgroup alone needs no turns.
template <int kConsumers>
struct Turns {
  static constexpr int kBase = 1 + kConsumers;
  int consumer;
  __device__ __forceinline__ explicit Turns(int c) : consumer(c) {
    if (kConsumers > 1 && consumer == kConsumers - 1) hopper::named_barrier_arrive(kBase, 256);
  }
  __device__ __forceinline__ void wait() const {
    if constexpr (kConsumers > 1) hopper::named_barrier_sync(kBase + consumer, 256);
  }
  __device__ __forceinline__ void pass() const {
    if constexpr (kConsumers > 1) hopper::named_barrier_arrive(kBase + (consumer + 1) % kConsumers, 256);
  }
};

// The item's n K/V tiles, passed on by a consumer warpgroup whose rows all lie past seqlen: per tile, the turn the
// others take for it, and the release of its buffers once they have landed (an arrival before then would count
// toward the slot's previous use, whose readers may not be done).
template <class S, int kConsumers>
__device__ __forceinline__ void pass_tiles(const Ring<S::kStages>& k_ring, const Ring<S::kStages>& v_ring,
                                           const PipelineState<S::kStages>& kv, int n, const Turns<kConsumers>& turn,
                                           int lane, int j0 = 0) {
  for (int j = j0; j < n; ++j) {
    const PipelineState<S::kStages> cur = kv.at(j);
    k_ring.wait(cur);
    turn.wait();
    turn.pass();
    k_ring.release(cur, lane);
    v_ring.wait(cur);
    v_ring.release(cur, lane);
  }
}

template <class S, class T, int kHeadDim>
__device__ __forceinline__ void consumer_loop(const FwdParams& p, const TmaMaps& tma, const SharedStorage<S>& sm,
                                              const Scheduler<S>& sched, int consumer) {
  constexpr int kBlockN = S::kBlockN;
  const int tid_in_wg = threadIdx.x % 128, warp = tid_in_wg / 32, lane = tid_in_wg % 32;
  const int g = lane / 4, t = lane % 4;
  float rS[kBlockN / 2];          // (64, BLOCK_N) scores / probabilities of this warpgroup
  uint32_t rP[S::kPSteps][4];     // (64, BLOCK_N) P in T: A fragments of the k16 steps of P.V
  float rO[kHeadDim / 2];         // (64, D) output accumulator
  OnlineSoftmax<kBlockN> softmax(p.scale);
  const ConsumerMma<S, T, kHeadDim> mma(sm, consumer);
  const Epilogue<S, T, kHeadDim> epilogue(sm, tma, consumer);
  const Turns<S::kConsumers> turn(consumer);
  const SplitPiece<S, kHeadDim> split(tma, sm, consumer);
  const Ring<2> q_ring{sm.q_full, sm.q_empty};
  const Ring<S::kStages> k_ring{sm.k_full, sm.k_empty}, v_ring{sm.v_full, sm.v_empty};
  PipelineState<2> qs;
  PipelineState<S::kStages> kv;

  // S of the K/V tile at key n0 -> P in fp32 (masked where the tile crosses seqlen or this warpgroup's diagonal).
  auto scores_to_p = [&](int n0, int first_row, float(&alpha)[2]) {
    if (n0 + kBlockN > p.seqlen || (p.causal && n0 + kBlockN - 1 > first_row))
      softmax.mask(rS, n0, first_row + 16 * warp + g, t, p.seqlen, p.causal);
    softmax.online(rS, alpha);
  };

  for (int tile = sched.first(); sched.valid(tile); tile = sched.next(tile), qs.advance()) {
    const TileCoord c = sched.coord(tile);
    const int first_row = c.m_block * S::kBlockM + consumer * kRowsPerConsumer;  // this warpgroup's first row
    const int n_tiles = S::kTailSplit ? c.kv_end - c.kv_begin : sched.kv_tiles(c.m_block);
    const int n_begin = S::kTailSplit ? c.kv_begin * kBlockN : 0;
    const int q = qs.slot();
    float alpha[2];
    // Every row of this warpgroup lies past seqlen (a head's last query block, partly filled): it computes and
    // stores nothing, and takes its turns for the others' tiles.
    if (first_row >= p.seqlen) {
      q_ring.wait(qs);
      q_ring.release(qs, lane);
      pass_tiles<S>(k_ring, v_ring, kv, n_tiles, turn, lane);
      turn.wait();  // the others' last P.V
      turn.pass();
      kv.advance(n_tiles);
      continue;
    }

    // Causal, in a config with kCausalStop: this warpgroup computes the tiles up to its last row's key only and
    // takes its turns for the block's later tiles, which only the block's later warpgroups need.
    int n_own = n_tiles;
    if constexpr (S::kCausalStop) {
      if (p.causal) n_own = min(n_tiles, (min(p.seqlen, first_row + kRowsPerConsumer) + kBlockN - 1) / kBlockN);
    }

    // K/V tile 0: S alone, then its softmax.
    softmax.reset();
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) rO[i] = 0.f;
    q_ring.wait(qs);
    k_ring.wait(kv);
    turn.wait();
    mma.qk(rS, q, kv.slot());
    turn.pass();
    hopper::wgmma_wait<0>();
    hopper::fence_operands(rS);
    k_ring.release(kv, lane);
    if (n_own == 1) q_ring.release(qs, lane);
    scores_to_p(n_begin, first_row, alpha);
    mma.convert(rP, rS);

    // K/V tiles 1..n-1: S_j and P_{j-1}.V_{j-1} in flight together; the softmax of S_j overlaps P.V.
    for (int j = 1; j < n_own; ++j) {
      const PipelineState<S::kStages> cur = kv.at(j), prev = kv.at(j - 1);
      k_ring.wait(cur);
      v_ring.wait(prev);
      turn.wait();
      mma.qk(rS, q, cur.slot());
      mma.pv(rO, rP, prev.slot());
      turn.pass();
      hopper::wgmma_wait<1>();  // S_j done (groups complete in order); P.V_{j-1} may still run
      hopper::fence_operands(rS);
      k_ring.release(cur, lane);
      if (j == n_own - 1) q_ring.release(qs, lane);  // the producer may load a later work item's Q
      scores_to_p(n_begin + j * kBlockN, first_row, alpha);
      hopper::wgmma_wait<0>();  // P.V_{j-1} done: rO and rP are ours again
      hopper::fence_operands(rO);
      hopper::fence_operands(rP);
      v_ring.release(prev, lane);
      softmax.template rescale<kHeadDim>(rO, alpha);
      mma.convert(rP, rS);
    }

    // The last P.V, then the epilogue.
    const PipelineState<S::kStages> last = kv.at(n_own - 1);
    v_ring.wait(last);
    turn.wait();
    mma.pv(rO, rP, last.slot());
    turn.pass();
    hopper::wgmma_wait<0>();
    hopper::fence_operands(rO);
    v_ring.release(last, lane);
    if constexpr (S::kCausalStop) pass_tiles<S>(k_ring, v_ring, kv, n_tiles, turn, lane, n_own);
    kv.advance(n_tiles);
    // A piece of a split item: only the piece that finishes last stores, the merge of them all.
    if constexpr (S::kTailSplit) {
      if (c.piece >= 0 && !split.finish(rO, softmax, c.piece, sched.split_item(c.piece), sched.splits)) continue;
    }
    float inv_l[2];
    softmax.inverse_sums(inv_l);
    epilogue.store(rO, inv_l, first_row, c.bh / p.heads, c.bh % p.heads, p.seqlen);
  }
  epilogue.drain();
}

}  // namespace wgmma
}  // namespace evpack
