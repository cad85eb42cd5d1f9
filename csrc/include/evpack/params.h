// Runtime parameters of one attention forward launch (shared by the binding and every kernel).
#pragma once

#include <cstddef>
#include <cstdint>

namespace evpack {

// Layout of q, k, v, o: (batch, heads, seqlen, head_dim); strides are in elements and the
// last dimension is contiguous (stride 1). Causal masking is top-left aligned: query i sees keys j <= i.
struct FwdParams {
  const void *q, *k, *v;  // T = __half or __nv_bfloat16
  void *o;

  int64_t q_batch_stride, q_head_stride, q_row_stride;
  int64_t k_batch_stride, k_head_stride, k_row_stride;
  int64_t v_batch_stride, v_head_stride, v_row_stride;
  int64_t o_batch_stride, o_head_stride, o_row_stride;

  int batch, heads, seqlen, head_dim;
  float scale;  // softmax scale applied to q.k (usually 1/sqrt(head_dim))
  bool causal;

  // Host side: device scratch memory for a launch that needs some (wgmma's split work items), ordered on the
  // launch's stream and kept until the launch has run; nullptr when none can be had (the launch does without).
  void* (*scratch)(void* ctx, size_t bytes);
  void* scratch_ctx;
};

}  // namespace evpack
