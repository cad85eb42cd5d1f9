// canary_serialized_wgmma: a one-warpgroup Hopper forward (Q.K^T and P.V on wgmma.mma_async, online
// exp2 softmax in registers) with one planted design fault: on tiles that need it, the key mask is
// written into the S accumulators in a per-row branch right after the first k-slice of Q.K^T is issued,
// instead of after the last one is waited for. The result is still right (-inf + a finite product =
// -inf), but the accumulators are touched inside the wgmma pipeline on a divergent path, so ptxas
// serialises the kernel's wgmma and says so (CUDA 13.0: `ptxas info : (C7518) Potential Performance
// Loss: wgmma.mma_async instructions are serialized due to program dependence on compiler-inserted
// WG.DP in divergent path ...`).
// Gate that must fire: the PTXAS gate (a build-time gate: caught without a GPU).
// sm_90a only (wgmma needs the arch-specific target); the registry builds it for fp16, D=64.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "evpack/registry.h"
#include "evpack/traits.h"

namespace evpack {
namespace canary_serialized_wgmma {

constexpr int kTile = 64;  // query rows per CTA = keys per step = head dim

// (64, 64) fp16 tile in the no-swizzle layout wgmma reads: 8x8 core matrices of 128 contiguous bytes,
// 8 of them along K in one 8-row band (1024 bytes), bands one after the other.
__device__ __forceinline__ int core_index(int row, int col) {
  return ((row >> 3) * 8 + (col >> 3)) * 64 + (row & 7) * 8 + (col & 7);
}

// Shared-memory matrix descriptor (K-major, no swizzle): start, leading and stride byte offsets in 16 B units.
__device__ __forceinline__ uint64_t smem_desc(const __half* tile) {
  const uint64_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  return ((addr & 0x3FFFF) >> 4) | (uint64_t(128 >> 4) << 16) | (uint64_t(1024 >> 4) << 32);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }

#define EVPACK_ACC32(d)                                                                                   \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),         \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),            \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),          \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),          \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define EVPACK_D32 \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"

// d (64x64 fp32, 32 per thread) = A(64x16, shared) * B(16x64, shared) [+ d when accumulate != 0]
__device__ __forceinline__ void wgmma_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " EVPACK_D32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
               : EVPACK_ACC32(d)
               : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d += A(64x16, registers: 4 x half2 per thread) * B(16x64, shared)
__device__ __forceinline__ void wgmma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " EVPACK_D32
               ", {%32,%33,%34,%35}, %36, 1, 1, 1, 0;\n"
               : EVPACK_ACC32(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}
#undef EVPACK_ACC32
#undef EVPACK_D32

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Copy rows [row0, row0 + 64) of a (seqlen, 64) matrix into a core-matrix tile; rows past seqlen are 0.
// transpose: store element (r, c) at (c, r) (V becomes the K-major B operand of P.V).
template <bool kTranspose>
__device__ __forceinline__ void load_tile(__half* sT, const __half* g, int64_t row_stride, int row0, int seqlen) {
  for (int chunk = threadIdx.x; chunk < kTile * kTile / 8; chunk += blockDim.x) {
    const int r = chunk / 8, c = (chunk % 8) * 8;  // 8 consecutive halves (16 B) of row r
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row0 + r < seqlen) v = *reinterpret_cast<const uint4*>(g + (row0 + r) * row_stride + c);
    if constexpr (kTranspose) {
      const __half* h = reinterpret_cast<const __half*>(&v);
#pragma unroll
      for (int i = 0; i < 8; ++i) sT[core_index(c + i, r)] = h[i];
    } else {
      *reinterpret_cast<uint4*>(sT + core_index(r, c)) = v;
    }
  }
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  static_assert(std::is_same_v<T, __half> && kHeadDim == kTile, "canary_serialized_wgmma: fp16, D=64 only");
  static_assert(Cfg::kBlockM == kTile && Cfg::kBlockN == kTile && Cfg::kThreads == 128,
                "canary_serialized_wgmma: one warpgroup, 64x64 tiles");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char smem[];
  __half* sQ = reinterpret_cast<__half*>(smem);  // (64 query rows, 64 d)
  __half* sK = sQ + kTile * kTile;               // (64 keys, 64 d)
  __half* sVt = sK + kTile * kTile;              // (64 d, 64 keys): V transposed
  const int b = blockIdx.y / p.heads, h = blockIdx.y % p.heads, q0 = blockIdx.x * kTile;
  const __half* gQ = static_cast<const __half*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride;
  const __half* gK = static_cast<const __half*>(p.k) + b * p.k_batch_stride + h * p.k_head_stride;
  const __half* gV = static_cast<const __half*>(p.v) + b * p.v_batch_stride + h * p.v_head_stride;
  __half* gO = static_cast<__half*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row[2] = {warp * 16 + lane / 4, warp * 16 + lane / 4 + 8};  // tile rows of this thread
  const float scale_log2 = p.scale * kLog2e;

  load_tile<false>(sQ, gQ, p.q_row_stride, q0, p.seqlen);
  float rO[32] = {};                           // (64, 64) fp32 output accumulator, wgmma layout
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // running max (log2 units) and partial sum
  const int n_end = p.causal ? min(p.seqlen, q0 + kTile) : p.seqlen;
  for (int k0 = 0; k0 < n_end; k0 += kTile) {
    __syncthreads();  // the previous tile's wgmma reads of sK / sVt are complete (waited below)
    load_tile<false>(sK, gK, p.k_row_stride, k0, p.seqlen);
    load_tile<true>(sVt, gV, p.v_row_stride, k0, p.seqlen);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic-proxy stores -> wgmma reads
    __syncthreads();

    float rS[32];  // (64 query rows, 64 keys) = Q K^T, four k-slices of 16
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      wgmma_ss(rS, smem_desc(sQ + kk * 128), smem_desc(sK + kk * 128), kk);
      if (kk == 0 && (k0 + kTile > p.seqlen || (p.causal && k0 + kTile - 1 > q0 + row[0]))) {
        // PLANTED: the key mask, in a per-row branch, written into accumulators still in the wgmma pipeline.
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          const int key = k0 + 8 * (i / 4) + 2 * (lane % 4) + (i % 2), q = q0 + row[(i % 4) / 2];
          if (key >= p.seqlen || (p.causal && key > q)) rS[i] = -INFINITY;
        }
      }
    }
    wgmma_commit();
    wgmma_wait_all();

    // online softmax: rows row[0] and row[1], 16 keys each per thread, 4 threads per row
    float alpha[2];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fmaxf(rS[4 * j + 2 * rr], rS[4 * j + 2 * rr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
      const float m_new = fmaxf(m[rr], mx * scale_log2);
      const float ref = m_new == -INFINITY ? 0.f : m_new;  // a fully masked row so far: exp2(-inf) = 0
      alpha[rr] = exp2f(m[rr] - ref);
      m[rr] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float& s = rS[4 * j + 2 * rr + c];
          s = exp2f(s * scale_log2 - ref);
          sum += s;
        }
      l[rr] = l[rr] * alpha[rr] + sum;
    }
#pragma unroll
    for (int i = 0; i < 32; ++i) rO[i] *= alpha[(i % 4) / 2];

    // O += P V: P from registers (the S accumulator layout is the A-fragment layout), V^T from shared memory
    uint32_t rP[kTile / 16][4];  // (64, 64) fp16 P as four A fragments of 16 keys
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) rP[kk][i] = pack_half2(rS[8 * kk + 2 * i], rS[8 * kk + 2 * i + 1]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) wgmma_rs(rO, rP[kk], smem_desc(sVt + kk * 128));
    wgmma_commit();
    wgmma_wait_all();
  }
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    l[rr] += __shfl_xor_sync(0xffffffff, l[rr], 1);
    l[rr] += __shfl_xor_sync(0xffffffff, l[rr], 2);
    const int q = q0 + row[rr];
    if (q >= p.seqlen) continue;
    const float inv = l[rr] > 0.f ? 1.f / l[rr] : 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int col = 8 * j + 2 * (lane % 4);
      *reinterpret_cast<__half2*>(gO + q * p.o_row_stride + col) =
          __floats2half2_rn(rO[4 * j + 2 * rr] * inv, rO[4 * j + 2 * rr + 1] * inv);
    }
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // built for another arch: wgmma needs sm_90a
#endif
}

template <class Cfg, class T, int kHeadDim>
constexpr size_t dynamic_smem_bytes() {
  return 3 * kTile * kTile * sizeof(__half);  // sQ, sK, sVt
}

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  return launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(), p,
                                      stream);
}

}  // namespace canary_serialized_wgmma
}  // namespace evpack
