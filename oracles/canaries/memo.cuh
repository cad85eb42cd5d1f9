// canary_memo: the scalar kernel behind a host-side memo. The launch keeps the output of every
// (q, k, v pointers, shape, causal, scale) it has computed in a buffer of its own; a later call
// with the same key copies that buffer into o and skips the kernel. Correct on fresh inputs,
// stale when the caller refills the same buffers in place (static CUDA-graph inputs, caches).
// Gate that must fire: stability (inputs refilled in place between calls, new output required).
#pragma once

#include <cstdint>
#include <map>
#include <tuple>

#include "csrc/variants/scalar.cuh"

namespace evpack {
namespace canary_memo {

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  scalar::fwd_block<Cfg, T, kHeadDim>(p);
}

using scalar::dynamic_smem_bytes;  // the scalar kernel's shared-memory layout

// (q, k, v, batch, heads, seqlen, head_dim, causal, scale bits) -> device copy of the output
using MemoKey = std::tuple<const void*, const void*, const void*, int, int, int, int, bool, uint32_t>;

inline std::map<MemoKey, void*>& memo() {
  static std::map<MemoKey, void*> table;
  return table;
}

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  uint32_t scale_bits = 0;
  static_assert(sizeof(scale_bits) == sizeof(p.scale), "scale is a 32-bit float");
  memcpy(&scale_bits, &p.scale, sizeof(scale_bits));
  const MemoKey key{p.q, p.k, p.v, p.batch, p.heads, p.seqlen, p.head_dim, p.causal, scale_bits};
  // The memo assumes a contiguous output (what every caller in this repository passes).
  const size_t bytes = size_t(p.batch) * p.heads * p.seqlen * p.head_dim * sizeof(T);
  auto hit = memo().find(key);
  if (hit != memo().end())  // planted fault: a repeat of the key returns the remembered output
    return cudaMemcpyAsync(p.o, hit->second, bytes, cudaMemcpyDeviceToDevice, stream);
  cudaError_t err = launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(),
                                                 p, stream);
  if (err != cudaSuccess) return err;
  void* copy = nullptr;
  err = cudaMalloc(&copy, bytes);
  if (err != cudaSuccess) return err;
  memo()[key] = copy;
  return cudaMemcpyAsync(copy, p.o, bytes, cudaMemcpyDeviceToDevice, stream);
}

}  // namespace canary_memo
}  // namespace evpack
