// canary_foreign_work: both matrix products of attention done by cuBLAS (opened with dlopen from the
// copy the process already loaded), only the softmax by a kernel of this binary:
//   S = scale * Q K^T  (cublasGemmStridedBatchedEx, fp16 in, fp32 compute, into a scratch buffer)
//   P = softmax(S)     (fwd_kernel below, in place, causal mask applied here)
//   O = P V            (cublasGemmStridedBatchedEx straight into o)
// The output is attention; the tensor-core work is real; none of it is ours. Gate that must fire:
// tensor_proof (every kernel executed during the op must come from the extension the build recorded).
// Contiguous (B, H, S, D) tensors only (batch stride = heads x head stride), as tensor_target passes.
#pragma once

#include <dlfcn.h>

#include <cstdint>

#include "evpack/params.h"
#include "evpack/registry.h"
#include "evpack/traits.h"

namespace evpack {
namespace canary_foreign_work {

// One CTA per score row: p.o is the (B*H, S, S) scratch buffer, p.o_row_stride = S, in place.
template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  __shared__ float red[Cfg::kThreads];
  const int row = blockIdx.x;
  T* s = static_cast<T*>(p.o) + int64_t(blockIdx.y) * p.o_head_stride + int64_t(row) * p.o_row_stride;
  const int n = p.causal ? row + 1 : p.seqlen;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < n; j += Cfg::kThreads) m = fmaxf(m, ElemTraits<T>::to_float(s[j]));
  red[threadIdx.x] = m;
  __syncthreads();
  for (int w = Cfg::kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + w]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float l = 0.0f;
  for (int j = threadIdx.x; j < n; j += Cfg::kThreads) l += __expf(ElemTraits<T>::to_float(s[j]) - m);
  red[threadIdx.x] = l;
  __syncthreads();
  for (int w = Cfg::kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
    __syncthreads();
  }
  const float inv = 1.0f / red[0];
  for (int j = threadIdx.x; j < p.seqlen; j += Cfg::kThreads)
    s[j] = ElemTraits<T>::from_float(j < n ? __expf(ElemTraits<T>::to_float(s[j]) - m) * inv : 0.0f);
}

template <class Cfg, class T, int kHeadDim>
constexpr size_t dynamic_smem_bytes() {
  return 0;
}

// The few cuBLAS entry points used, declared here (no cuBLAS header or link dependency).
using GemmEx = int (*)(void*, int, int, int, int, int, const void*, const void*, int, int, long long, const void*, int,
                       int, long long, const void*, void*, int, int, long long, int, int, int);
struct Blas {
  void* handle = nullptr;
  int (*set_stream)(void*, cudaStream_t) = nullptr;
  GemmEx gemm = nullptr;
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
};

inline cudaError_t blas(Blas*& out) {
  static Blas b;
  static bool tried = false;
  if (!tried) {
    tried = true;
    void* lib = nullptr;
    for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
      lib = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
      if (lib == nullptr) lib = dlopen(name, RTLD_NOW);
      if (lib != nullptr) break;
    }
    if (lib != nullptr) {
      auto create = reinterpret_cast<int (*)(void**)>(dlsym(lib, "cublasCreate_v2"));
      b.set_stream = reinterpret_cast<int (*)(void*, cudaStream_t)>(dlsym(lib, "cublasSetStream_v2"));
      b.gemm = reinterpret_cast<GemmEx>(dlsym(lib, "cublasGemmStridedBatchedEx"));
      if (create == nullptr || create(&b.handle) != 0) b.handle = nullptr;
    }
  }
  if (b.handle == nullptr || b.set_stream == nullptr || b.gemm == nullptr) return cudaErrorSharedObjectInitFailed;
  out = &b;
  return cudaSuccess;
}

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  constexpr int kOpN = 0, kOpT = 1, kR16F = 2, kR16BF = 14, kCompute32F = 68, kAlgoDefault = -1;
  const int dt = ElemTraits<T>::kName[0] == 'f' ? kR16F : kR16BF;
  Blas* b = nullptr;
  cudaError_t err = blas(b);
  if (err != cudaSuccess) return err;
  const int S = p.seqlen, bh = p.batch * p.heads;
  const size_t need = size_t(bh) * S * S * sizeof(T);
  if (need > b->scratch_bytes) {
    if (b->scratch != nullptr) cudaFree(b->scratch);
    b->scratch = nullptr, b->scratch_bytes = 0;
    err = cudaMalloc(&b->scratch, need);
    if (err != cudaSuccess) return err;
    b->scratch_bytes = need;
  }
  if (b->set_stream(b->handle, stream) != 0) return cudaErrorUnknown;
  const float alpha_s = p.scale, one = 1.0f, zero = 0.0f;
  // column-major view: scores(j, i) = sum_d K(j, d) Q(i, d), ld S (row-major S x S per head)
  if (b->gemm(b->handle, kOpT, kOpN, S, S, p.head_dim, &alpha_s, p.k, dt, int(p.k_row_stride), p.k_head_stride, p.q,
              dt, int(p.q_row_stride), p.q_head_stride, &zero, b->scratch, dt, S, int64_t(S) * S, bh, kCompute32F,
              kAlgoDefault) != 0)
    return cudaErrorUnknown;
  FwdParams ps = p;
  ps.o = b->scratch, ps.o_row_stride = S, ps.o_head_stride = int64_t(S) * S;
  fwd_kernel<Cfg, T, kHeadDim><<<dim3(S, bh), Cfg::kThreads, 0, stream>>>(ps);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  // O(d, i) = sum_j V(j, d) P(i, j): column-major D x S with ld o_row_stride
  if (b->gemm(b->handle, kOpN, kOpN, p.head_dim, S, S, &one, p.v, dt, int(p.v_row_stride), p.v_head_stride,
              b->scratch, dt, S, int64_t(S) * S, &zero, p.o, dt, int(p.o_row_stride), p.o_head_stride, bh, kCompute32F,
              kAlgoDefault) != 0)
    return cudaErrorUnknown;
  return cudaSuccess;
}

}  // namespace canary_foreign_work
}  // namespace evpack
