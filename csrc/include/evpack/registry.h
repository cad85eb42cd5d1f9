// The kernel registry: every compiled (variant, config, dtype, head_dim) registers its launcher here.
//
// ---------------------------------------------------------------------------------------------
// Adding a kernel variant: the interface
// ---------------------------------------------------------------------------------------------
// 1. Write the body in csrc/variants/<name>.cuh (canaries: oracles/canaries/<x>.cuh) and add one
//    entry to python/evpack/registry.py (name, kind, source, configs, dtypes, head_dims).
// 2. The body defines, in `namespace evpack::<name>`:
//
//      template <class Cfg, class T, int kHeadDim>
//      __global__ void fwd_kernel(FwdParams p);
//
//      template <class Cfg, class T, int kHeadDim>
//      cudaError_t launch(const FwdParams& p, cudaStream_t stream);
//
//      template <class Cfg, class T, int kHeadDim>
//      constexpr size_t dynamic_smem_bytes();   // what launch() requests (reported by kernels())
//
//    Cfg is a `cfg_<config>` struct deriving from evpack::TileConfig<BLOCK_M, BLOCK_N, WARPS,
//    STAGES> (traits.h); T is __half or __nv_bfloat16; kHeadDim is 64 or 128. FwdParams
//    (params.h): q, k, v, o of shape (batch, heads, seqlen, head_dim), strides in elements,
//    last-dim stride 1, rows 16-byte aligned (checked by the binding), top-left causal mask.
//    o = softmax(scale * q k^T) v per (batch, head), accumulated in fp32, stored in T.
//    launch() picks grid/block/dynamic shared memory, raises the dynamic shared-memory limit
//    with cudaFuncSetAttribute when it exceeds 48 KB, launches Cfg::kThreads threads per CTA on
//    `stream` and returns cudaGetLastError(). It never synchronizes.
// 3. Keep the kernel symbol in this form: the PTXAS and SASS stages map a mangled name such as
//      _ZN6evpack4wmma10fwd_kernelINS0_14cfg_m64n64w4s1E6__halfLi64EEEvNS_9FwdParamsE
//    back to variant (`6evpack4wmma`), config (`cfg_m64n64w4s1`), dtype (`6__half` or
//    `13__nv_bfloat16`) and head_dim (`Li64E` / `Li128E`).
// 4. python/evpack/buildgen.py writes one instantiation file per (variant, dtype, head_dim):
//      #include "csrc/variants/wmma.cuh"       // the registry's `source`, relative to the repo root
//      EVPACK_INSTANTIATE(wmma, m64n64w4s1, 64, 64, 4, 1, __half, fp16, 64)
//      EVPACK_INSTANTIATE(wmma, m32n64w2s1, 32, 64, 2, 1, __half, fp16, 64)
//    Each line defines evpack::wmma::cfg_<config> and registers launch<cfg_<config>, T, D>.
//    A config struct can be defined once per translation unit (C++ forbids a second
//    definition); to register the same config for another dtype/head_dim in the same file,
//    use EVPACK_REGISTER(variant, config, T, dtype, D) for the later lines. The generator
//    never needs it: each of its files holds one (dtype, head_dim), hence each config once.
// ---------------------------------------------------------------------------------------------
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "evpack/params.h"

namespace evpack {

using LaunchFn = cudaError_t (*)(const FwdParams&, cudaStream_t);

struct KernelEntry {
  const char* variant;  // e.g. "wmma"
  const char* config;   // e.g. "m64n64w4s1"
  const char* dtype;    // "fp16" or "bf16"
  int head_dim;         // 64 or 128
  int block_m, block_n, warps, stages;
  int threads;                // per CTA (32 * warps)
  size_t dynamic_smem_bytes;  // per CTA, as launched
  LaunchFn launch;
};

// Called from static initializers of the instantiation files; returns the entry's index.
// A second registration of the same key is reported on stderr and ignored.
int register_kernel(const KernelEntry& entry);

// Every registered kernel, in registration order.
const std::vector<KernelEntry>& registered_kernels();

// nullptr when (variant, config, dtype, head_dim) was not built into this extension.
const KernelEntry* find_kernel(const std::string& variant, const std::string& config,
                               const std::string& dtype, int head_dim);

namespace detail {
constexpr bool str_equal(const char* a, const char* b) {
  return *a == *b && (*a == '\0' || str_equal(a + 1, b + 1));
}
}  // namespace detail

}  // namespace evpack

#define EVPACK_INSTANTIATE(VARIANT, CONFIG, BM, BN, WARPS, STAGES, T, DTYPE, D) \
  EVPACK_INSTANTIATE_SPLIT(VARIANT, CONFIG, BM, BN, WARPS, STAGES, false, T, DTYPE, D)

// The same, with TileConfig's TAIL_SPLIT (a registry config with tail_split=True: buildgen writes this form).
#define EVPACK_INSTANTIATE_SPLIT(VARIANT, CONFIG, BM, BN, WARPS, STAGES, SPLIT, T, DTYPE, D) \
  namespace evpack {                                                                     \
  namespace VARIANT {                                                                    \
  struct cfg_##CONFIG : ::evpack::TileConfig<BM, BN, WARPS, STAGES, SPLIT> {};           \
  }                                                                                      \
  }                                                                                      \
  EVPACK_REGISTER(VARIANT, CONFIG, T, DTYPE, D)

#define EVPACK_REGISTER(VARIANT, CONFIG, T, DTYPE, D)                                              \
  static_assert(::evpack::detail::str_equal(::evpack::ElemTraits<T>::kName, #DTYPE),              \
                "EVPACK_REGISTER(" #VARIANT ", " #CONFIG "): element type " #T                    \
                " does not match dtype " #DTYPE);                                                  \
  static const int evpack_registered_##VARIANT##_##CONFIG##_##DTYPE##_d##D =                      \
      ::evpack::register_kernel({#VARIANT, #CONFIG, #DTYPE, D,                                     \
                                 ::evpack::VARIANT::cfg_##CONFIG::kBlockM,                         \
                                 ::evpack::VARIANT::cfg_##CONFIG::kBlockN,                         \
                                 ::evpack::VARIANT::cfg_##CONFIG::kWarps,                          \
                                 ::evpack::VARIANT::cfg_##CONFIG::kStages,                         \
                                 ::evpack::VARIANT::cfg_##CONFIG::kThreads,                        \
                                 ::evpack::VARIANT::dynamic_smem_bytes<::evpack::VARIANT::cfg_##CONFIG, T, D>(), \
                                 &::evpack::VARIANT::launch<::evpack::VARIANT::cfg_##CONFIG, T, D>});
