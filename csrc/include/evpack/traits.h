// Compile-time traits: tile shapes (one struct per registry config) and element types.
//
// A config of the registry (python/evpack/registry.py, e.g. "m64n64w4s1") becomes
//   struct cfg_m64n64w4s1 : evpack::TileConfig<64, 64, 4, 1> {};
// inside the variant's namespace (see EVPACK_INSTANTIATE in registry.h), so kernels read
// Cfg::kBlockM and friends and the mangled kernel name carries the config's name.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "evpack/params.h"

namespace evpack {

template <int BM, int BN, int WARPS, int STAGES, bool TAIL_SPLIT = false>
struct TileConfig {
  static constexpr int kBlockM = BM;   // query rows per CTA
  static constexpr int kBlockN = BN;   // keys per K/V tile
  static constexpr int kWarps = WARPS;
  static constexpr int kStages = STAGES;  // K/V tiles resident in shared memory
  static constexpr int kThreads = 32 * WARPS;
  // A variant that schedules work items may split the last round of a launch across the grid (wgmma:
  // scheduler.cuh tail_split); a config without it is built without that code.
  static constexpr bool kTailSplit = TAIL_SPLIT;
};

constexpr float kLog2e = 1.4426950408889634f;  // exp(x) = exp2(x * log2(e))

// Element types. torch builds .cu files with __CUDA_NO_HALF_CONVERSIONS__ (and the bf16 twin),
// so every conversion below is an explicit intrinsic.
template <class T>
struct ElemTraits;

template <>
struct ElemTraits<__half> {
  using Vec2 = __half2;
  static constexpr const char* kName = "fp16";
  __device__ __forceinline__ static float to_float(__half x) { return __half2float(x); }
  __device__ __forceinline__ static __half from_float(float x) { return __float2half_rn(x); }
  __device__ __forceinline__ static float2 to_float2(Vec2 x) { return __half22float2(x); }
  __device__ __forceinline__ static Vec2 from_float2(float a, float b) { return __floats2half2_rn(a, b); }
};

template <>
struct ElemTraits<__nv_bfloat16> {
  using Vec2 = __nv_bfloat162;
  static constexpr const char* kName = "bf16";
  __device__ __forceinline__ static float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ __forceinline__ static __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
  __device__ __forceinline__ static float2 to_float2(Vec2 x) { return __bfloat1622float2(x); }
  __device__ __forceinline__ static Vec2 from_float2(float a, float b) { return __floats2bfloat162_rn(a, b); }
};

// 16-byte vectors of 8 elements: the unit of every global load and store in the kernels.
constexpr int kVecElems = 8;

template <class T, int N>
__device__ __forceinline__ void unpack_to_float(const void* src, float (&dst)[N]) {  // N elements of T -> fp32
  static_assert(N % 2 == 0, "unpack_to_float: even element count");
  using Vec2 = typename ElemTraits<T>::Vec2;
  const Vec2* pairs = reinterpret_cast<const Vec2*>(src);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const float2 f = ElemTraits<T>::to_float2(pairs[i]);
    dst[2 * i] = f.x;
    dst[2 * i + 1] = f.y;
  }
}

template <class T, int N>
__device__ __forceinline__ void pack_from_float(const float (&src)[N], void* dst) {  // N fp32 -> N elements of T
  static_assert(N % 2 == 0, "pack_from_float: even element count");
  using Vec2 = typename ElemTraits<T>::Vec2;
  Vec2* pairs = reinterpret_cast<Vec2*>(dst);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) pairs[i] = ElemTraits<T>::from_float2(src[2 * i], src[2 * i + 1]);
}

}  // namespace evpack

#ifdef __CUDACC__
namespace evpack {

// Launch `kernel` over (ceil(seqlen / BLOCK_M), batch * heads) CTAs of Cfg::kThreads threads.
// The binding checks batch * heads <= 65535 (grid.y limit).
template <class Cfg>
inline cudaError_t launch_over_query_tiles(void (*kernel)(FwdParams), size_t smem_bytes, const FwdParams& p,
                                           cudaStream_t stream) {
  if (smem_bytes > 48 * 1024) {  // opt in to more than the default 48 KB of dynamic shared memory
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(smem_bytes));
    if (err != cudaSuccess) return err;
  }
  const dim3 grid((p.seqlen + Cfg::kBlockM - 1) / Cfg::kBlockM, p.batch * p.heads);
  kernel<<<grid, Cfg::kThreads, smem_bytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace evpack
#endif  // __CUDACC__
