// Kernel-side helpers every variant shares: global tile pointers of one (batch, head), packing two
// fp32 into one register of two T, and the cp.async wrappers (sm_80+). The launch tail (grid over
// query tiles, the dynamic shared-memory opt-in, the launch check) is launch_over_query_tiles in traits.h.
#pragma once

#include <cstdint>
#include <cstring>
#include <cuda_runtime.h>

#include "evpack/params.h"
#include "evpack/traits.h"

namespace evpack {

// The (seqlen, head_dim) matrices of batch b, head h: gQ, gK, gV (read) and gO (written).
template <class T>
struct HeadTiles {
  const T* q;  // (S, D), rows q_row_stride apart
  const T* k;  // (S, D)
  const T* v;  // (S, D)
  T* o;        // (S, D)
};

template <class T>
__device__ __forceinline__ HeadTiles<T> head_tiles(const FwdParams& p, int64_t b, int64_t h) {
  return {static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride,
          static_cast<const T*>(p.k) + b * p.k_batch_stride + h * p.k_head_stride,
          static_cast<const T*>(p.v) + b * p.v_batch_stride + h * p.v_head_stride,
          static_cast<T*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride};
}

// Two fp32 -> one register of two T (lo in the low half: the lower column / k index).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  const typename ElemTraits<T>::Vec2 v = ElemTraits<T>::from_float2(lo, hi);
  uint32_t u;
  memcpy(&u, &v, sizeof(u));
  return u;
}

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {  // generic -> shared-window address
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
// 16-byte global -> shared copy; with `valid` false it reads nothing and zero-fills the 16 bytes.
__device__ __forceinline__ void cp_async_16(uint32_t s_dst, const void* g_src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s_dst), "l"(g_src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {  // at most kPending of this thread's groups in flight
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
#endif

}  // namespace evpack
