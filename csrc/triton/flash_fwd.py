"""Triton variant `triton`: FlashAttention-2 forward (one CTA per BLOCK_M query rows of one (batch, head)).

The kernel interface every Triton variant implements (docs/adding-a-triton-variant.md):

    fwd_kernel(Q, K, V, O,                     # *fp16 / *bf16, 16-byte aligned, last dim contiguous
               stride_qb8, stride_qh8, stride_qm8, stride_kb8, stride_kh8, stride_kn8,
               stride_vb8, stride_vh8, stride_vn8, stride_ob8, stride_oh8, stride_om8,  # i32: stride / 8
               heads, seqlen, sm_scale, causal,  # i32, i32, fp32, i32 (0 or 1)
               BLOCK_M, BLOCK_N, HEAD_DIM)       # constexpr: the registry config and head dim
    grid (cdiv(seqlen, BLOCK_M), batch * heads), 32 * warps threads per CTA

Strides come divided by 8 (the binding requires every stepped-over stride to be a multiple of 8
elements): multiplying by 8 here tells Triton's alignment analysis that every row starts on 16 bytes,
so K/V/Q loads are 16-byte vectors, with no claim the binding does not check.

Design: Q tile in registers for the whole loop; per K/V tile S = Q K^T on tensor cores (tl.dot of q and
the transposed view of the K tile, loaded as it lies in memory: (BLOCK_N, HEAD_DIM) rows; fp32 accumulation), online softmax in fp32 with exp2 (log2(e) folded into the scale), P cast to the
input type, O += P V (fp32 accumulator). The key tiles are walked in two loops: the full tiles
(every key < seqlen and, causal, every key <= every query row of the CTA) with no mask at all, then
the few boundary tiles (the diagonal, the ragged end of S) with the key mask.
"""
from __future__ import annotations

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(x) = exp2(x * log2(e))


@triton.jit
def _tile(acc, m_i, l_i, q, k_ptrs, v_ptrs, start_n, offs_m, offs_n, seqlen, qk_scale, causal,
          MASKED: tl.constexpr):
    """One K/V tile of the online softmax: returns the updated (acc, m_i, l_i)."""
    if MASKED:
        keys = start_n + offs_n  # (BLOCK_N,)
        k = tl.load(k_ptrs, mask=keys[:, None] < seqlen, other=0.0)  # (BLOCK_N, HEAD_DIM)
    else:
        k = tl.load(k_ptrs)  # (BLOCK_N, HEAD_DIM)
    qk = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N) fp32
    if MASKED:
        keep = (keys[None, :] < seqlen) & ((offs_m[:, None] >= keys[None, :]) | (causal == 0))
        qk = tl.where(keep, qk * qk_scale, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        qk = qk - m_ij[:, None]
    else:
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        qk = qk * qk_scale - m_ij[:, None]  # one FMA per score
    p = tl.math.exp2(qk)  # (BLOCK_M, BLOCK_N) fp32
    alpha = tl.math.exp2(m_i - m_ij)  # rescale of what was summed so far
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    if MASKED:
        v = tl.load(v_ptrs, mask=keys[:, None] < seqlen, other=0.0)  # (BLOCK_N, HEAD_DIM)
    else:
        v = tl.load(v_ptrs)  # (BLOCK_N, HEAD_DIM)
    acc = tl.dot(p.to(v.dtype), v, acc)  # (BLOCK_M, HEAD_DIM) fp32
    return acc, m_ij, l_i


@triton.jit
def fwd_kernel(Q, K, V, O,  # noqa: E741 (the interface names the output O)
               stride_qb8, stride_qh8, stride_qm8, stride_kb8, stride_kh8, stride_kn8,
               stride_vb8, stride_vh8, stride_vn8, stride_ob8, stride_oh8, stride_om8,
               heads, seqlen, sm_scale, causal,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    tl.static_assert(BLOCK_M % 16 == 0 and BLOCK_N % 16 == 0)
    tl.static_assert(HEAD_DIM == 64 or HEAD_DIM == 128)
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    off_b = (off_bh // heads).to(tl.int64)
    off_h = (off_bh % heads).to(tl.int64)
    gQ = Q + (off_b * stride_qb8 + off_h * stride_qh8) * 8
    gK = K + (off_b * stride_kb8 + off_h * stride_kh8) * 8
    gV = V + (off_b * stride_vb8 + off_h * stride_vh8) * 8
    gO = O + (off_b * stride_ob8 + off_h * stride_oh8) * 8

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) query rows
    offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    offs_d = tl.arange(0, HEAD_DIM)  # (HEAD_DIM,)
    q = tl.load(gQ + offs_m[:, None] * (stride_qm8 * 8) + offs_d[None, :], mask=offs_m[:, None] < seqlen,
                other=0.0)  # (BLOCK_M, HEAD_DIM)
    k_ptrs = gK + offs_n[:, None] * (stride_kn8 * 8) + offs_d[None, :]  # (BLOCK_N, HEAD_DIM): K rows
    v_ptrs = gV + offs_n[:, None] * (stride_vn8 * 8) + offs_d[None, :]  # (BLOCK_N, HEAD_DIM)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running row max (log2 units)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running row sum
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)  # (BLOCK_M, HEAD_DIM)
    qk_scale = sm_scale * LOG2E

    # keys [0, n_full): full tiles, no mask; [n_full, hi): boundary tiles, masked
    hi = seqlen
    n_full = seqlen // BLOCK_N * BLOCK_N
    if causal != 0:
        hi = tl.minimum((start_m + 1) * BLOCK_M, seqlen)
        n_full = tl.minimum(start_m * BLOCK_M, seqlen) // BLOCK_N * BLOCK_N
    for start_n in range(0, n_full, BLOCK_N):
        acc, m_i, l_i = _tile(acc, m_i, l_i, q, k_ptrs + start_n * (stride_kn8 * 8),
                              v_ptrs + start_n * (stride_vn8 * 8), start_n, offs_m, offs_n, seqlen, qk_scale,
                              causal, MASKED=False)
    for start_n in range(n_full, hi, BLOCK_N):
        acc, m_i, l_i = _tile(acc, m_i, l_i, q, k_ptrs + start_n * (stride_kn8 * 8),
                              v_ptrs + start_n * (stride_vn8 * 8), start_n, offs_m, offs_n, seqlen, qk_scale,
                              causal, MASKED=True)

    acc = acc / l_i[:, None]
    tl.store(gO + offs_m[:, None] * (stride_om8 * 8) + offs_d[None, :], acc.to(O.dtype.element_ty),
             mask=offs_m[:, None] < seqlen)
