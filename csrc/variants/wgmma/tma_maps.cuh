// wgmma, host side: the TMA descriptors of one launch.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled (entry point through the runtime: no -lcuda)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "evpack/params.h"
#include "config.cuh"

namespace evpack {
namespace wgmma {
namespace detail {

inline PFN_cuTensorMapEncodeTiled_v12000 encode_tiled_fn() {  // the driver entry point, looked up once
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status{};
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &status);
    return (err == cudaSuccess && status == cudaDriverEntryPointSuccess)
               ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr)
               : nullptr;
  }();
  return fn;
}

// A (batch, heads, seqlen, D) tensor of T as a 4-D tensor map (D, seqlen, heads, batch) with
// 128B-swizzled boxes of (64, box_rows, 1, 1). Out-of-range rows read as zero and are not written.
template <class T>
inline bool encode_map(CUtensorMap* map, const void* base, const FwdParams& p, int64_t batch_stride,
                       int64_t head_stride, int64_t row_stride, int box_rows) {
  const auto fn = encode_tiled_fn();
  if (fn == nullptr) return false;
  constexpr int64_t kElem = sizeof(T);
  // A dimension of size 1 is never stepped over, and the binding lets its stride be anything: give
  // TMA a valid (16-byte multiple) stride for it.
  const int64_t row = p.seqlen > 1 ? row_stride : p.head_dim;
  const int64_t hst = p.heads > 1 ? head_stride : row * p.seqlen;
  const int64_t bst = p.batch > 1 ? batch_stride : hst * p.heads;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(p.head_dim), static_cast<cuuint64_t>(p.seqlen),
                              static_cast<cuuint64_t>(p.heads), static_cast<cuuint64_t>(p.batch)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(row * kElem), static_cast<cuuint64_t>(hst * kElem),
                                 static_cast<cuuint64_t>(bst * kElem)};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(kBoxCols), static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUtensorMapDataType dtype =
      std::is_same<T, __nv_bfloat16>::value ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult res = fn(map, dtype, 4, const_cast<void*>(base), dims, strides, box, elem_strides,
                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return res == CUDA_SUCCESS;
}

// Q, K, V and O of one launch: Q by BLOCK_M rows, K and V by BLOCK_N, O by one consumer's 64 rows.
template <class S, class T>
inline bool encode_maps(TmaMaps* maps, const FwdParams& p) {
  return encode_map<T>(&maps->q, p.q, p, p.q_batch_stride, p.q_head_stride, p.q_row_stride, S::kBlockM) &&
         encode_map<T>(&maps->k, p.k, p, p.k_batch_stride, p.k_head_stride, p.k_row_stride, S::kBlockN) &&
         encode_map<T>(&maps->v, p.v, p, p.v_batch_stride, p.v_head_stride, p.v_row_stride, S::kBlockN) &&
         encode_map<T>(&maps->o, p.o, p, p.o_batch_stride, p.o_head_stride, p.o_row_stride, kRowsPerConsumer);
}

}  // namespace detail
}  // namespace wgmma
}  // namespace evpack
