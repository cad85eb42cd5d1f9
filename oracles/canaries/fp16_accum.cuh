// canary_fp16_accum: a tensor-core kernel (compact_mma.cuh: mma.sync m16n8k16, ldmatrix, online softmax)
// that accumulates part of Q.K^T in fp16: the first 16-deep k-step (head dims 0-15) of every score runs on an
// mma with fp16 C/D (SASS HMMA.16816.F16) before it is added up in fp32; the rest is fp32. A partial
// precision downgrade that stays within the correctness bound on normal inputs (an emulation of its rounding
// on the quick grid: at most 0.65 of the bound; with every k-step in fp16 it reaches 1.04), so only the
// instruction form gives it away (fp16 accumulators overflow at 65504, and are faster on some parts).
// Gate that must fire: the SASS gate (a tensor variant's HMMA/HGMMA must accumulate in F32).
#pragma once

#include "oracles/canaries/compact_mma.cuh"

namespace evpack {
namespace canary_fp16_accum {

struct F16Scores : compact_mma::Exact {
  static constexpr int kF16ScoreSteps = 1;  // planted fault: fp16 accumulators for head dims 0-15 of Q.K^T
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
