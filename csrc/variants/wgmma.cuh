// wgmma: flash-attention forward for Hopper (sm_90a only) in the FlashAttention-3 design: warp-specialised,
// persistent, TMA loads into 128-byte-swizzled shared memory, wgmma.mma_async. Its pieces:
//   wgmma/config.cuh     the instantiation's shape and the shared-memory layout
//   wgmma/scheduler.cuh  which work items a persistent CTA takes, in which order
//   wgmma/pipeline.cuh   the K/V ring and the Q buffers between producer and consumers (mbarriers)
//   wgmma/mainloop.cuh   the producer's loads; the consumers' wgmmas over an item's K/V tiles (pingpong)
//   wgmma/softmax.cuh    the online softmax in registers
//   wgmma/split.cuh      the pieces of a split work item: partial results, and the merge by the last piece
//   wgmma/epilogue.cuh   O / l through shared memory to a TMA store
//   wgmma/tma_maps.cuh   host: the TMA descriptors
//
// Grid: one CTA per SM (fewer if there is less work). One CTA = 1 + BLOCK_M / 64 warpgroups (Cfg::kWarps / 4;
// BLOCK_M 64: one consumer, 128: two, 192: three, which fit head_dim 64 only):
//   warpgroup 0    producer: setmaxnreg down to 24 (32 beside three consumers); one thread issues the TMA loads.
//   warpgroup 1+c  consumer c: setmaxnreg up to 240 (160 for three); owns query rows [64 c, 64 c + 64) of an item.
// Registers of one consumer thread (warp w of its warpgroup, lane = 4 g + t):
//   rS (BLOCK_N / 2)       fp32   scores of rows 16 w + g, +8; columns 8 a + 2 t, +1 (a = 0..BLOCK_N/8-1)
//   rP (BLOCK_N / 16, 4)   T x 2  P of the previous tile as wgmma A fragments (k16 steps)
//   rO (D / 2)             fp32   unnormalised output, same fragment layout as rS
//   m, l (2)               fp32   running max (raw score units) and partial row sums of rows g, g + 8
// Masks: keys >= seqlen (TMA zero-fills rows past the tensor; their scores are set to -inf) and, causal
// (top-left), keys > row; only tiles that cross seqlen or a warpgroup's diagonal pay for the mask. A consumer
// warpgroup whose 64 rows all lie past seqlen skips the item (mainloop.cuh, pass_tiles); in the tail-split config,
// causal, one stops at its own last row's key tile and passes the block's later tiles on; other rows past seqlen
// are computed on zero-filled Q and never stored (TMA clips the store).
// Alternatives measured slower on the H200 left the tree (bench/NOTES.md, wgmma sections 2, 5 and 6; the
// commit history keeps their code).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "evpack/hopper.cuh"
#include "evpack/params.h"
#include "evpack/registry.h"
#include "evpack/traits.h"
#include "wgmma/config.cuh"
#include "wgmma/mainloop.cuh"
#include "wgmma/pipeline.cuh"
#include "wgmma/scheduler.cuh"
#include "wgmma/tma_maps.cuh"

namespace evpack {
namespace wgmma {

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Shape<Cfg, kHeadDim>::kThreads, 1)
    fwd_kernel(const __grid_constant__ FwdParams p, const __grid_constant__ TmaMaps tma) {
  using S = Shape<Cfg, kHeadDim>;
  extern __shared__ uint8_t smem_raw[];
  const SharedStorage<S> sm(smem_raw);
  const Scheduler<S> sched(p, tma.head_major, tma.whole_items, tma.splits);
  // Broadcast from lane 0, so the compiler knows it is warp-uniform: the branches on it stay uniform and the ring
  // positions stay in uniform registers (3 consumers: -2.5 to -4%; bench/NOTES.md, wgmma section 7).
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);

  if (threadIdx.x == 0) {
    Ring<2>{sm.q_full, sm.q_empty}.init(S::kConsumerWarps);
    Ring<S::kStages>{sm.k_full, sm.k_empty}.init(S::kConsumerWarps);
    Ring<S::kStages>{sm.v_full, sm.v_empty}.init(S::kConsumerWarps);
    hopper::fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    hopper::setmaxnreg_dec<S::kProducerRegs>();
    if (threadIdx.x == 0) producer_loop<S>(p, tma, sm, sched);
    return;
  }
  hopper::setmaxnreg_inc<S::kConsumerRegs>();
  consumer_loop<S, T, kHeadDim>(p, tma, sm, sched, warpgroup - 1);
}

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  using S = Shape<Cfg, kHeadDim>;
  int device = 0, major = 0, minor = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (err != cudaSuccess) return err;
  if (major != 9 || minor != 0) return cudaErrorNoKernelImageForDevice;  // built for sm_90a only

  TmaMaps maps;
  if (!detail::encode_maps<S, T>(&maps, p)) return cudaErrorInvalidValue;
  auto kernel = fwd_kernel<Cfg, T, kHeadDim>;
  const size_t smem = dynamic_smem_bytes<Cfg, T, kHeadDim>();
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  int sms = 0;
  err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  // Persistent: one CTA per SM (or per work index, if fewer), each looping over work indices.
  const int n_m = (p.seqlen + S::kBlockM - 1) / S::kBlockM;
  const long long items = static_cast<long long>(n_m) * p.batch * p.heads;
  detail::TailSplit split{items, 1};  // whole items only, unless the config splits (TAIL_SPLIT) and this launch may
  if constexpr (S::kTailSplit)
    split = detail::tail_split(items, sms, (p.seqlen + S::kBlockN - 1) / S::kBlockN, p.causal);
  err = detail::split_scratch<S, kHeadDim>(&maps, &split, items, p, stream);
  if (err != cudaSuccess) return err;
  const long long work = split.n_work(items);
  const dim3 grid(static_cast<unsigned>(work < sms ? work : sms));
  maps.head_major = p.causal && detail::causal_head_major(n_m, p.batch * p.heads, static_cast<int>(grid.x),
                                                          p.seqlen, S::kBlockM, S::kBlockN);
  kernel<<<grid, S::kThreads, smem, stream>>>(p, maps);
  return cudaGetLastError();
}

}  // namespace wgmma
}  // namespace evpack
