// canary_fp16_accum: a tensor-core kernel (compact_mma.cuh: mma.sync m16n8k16, ldmatrix, online softmax)
// whose Q.K^T products accumulate in fp16: every 16-deep partial score comes out of an mma with fp16 C/D
// (SASS HMMA.16816.F16) before it is added up in fp32. On the normal inputs of the correctness grid its
// error stays within the bound (each partial is rounded once, like P is); it is a precision downgrade all the
// same (fp16 accumulators overflow at 65504, and halve the cost on parts where fp16 accumulation is faster).
// Gate that must fire: the SASS gate (a tensor variant's HMMA/HGMMA must accumulate in F32).
#pragma once

#include "oracles/canaries/compact_mma.cuh"

namespace evpack {
namespace canary_fp16_accum {

struct F16Scores : compact_mma::Exact {
  static constexpr bool kF16Scores = true;  // planted fault: fp16 accumulators for S = Q.K^T
};

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads) fwd_kernel(FwdParams p) {
  compact_mma::fwd_block<F16Scores, Cfg, T, kHeadDim>(p);
}

using compact_mma::dynamic_smem_bytes;

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  return launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(), p,
                                      stream);
}

}  // namespace canary_fp16_accum
}  // namespace evpack
