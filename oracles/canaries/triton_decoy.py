"""canary_triton_decoy: a Triton kernel whose SASS holds tensor-core instructions that do none of the work.

The output is computed on CUDA cores, one key at a time (q.k by an elementwise product and a row sum,
online softmax, o += p v by a broadcast product). Once per CTA a tl.dot of the Q tile with the first K
tile runs on tensor cores (HGMMA on sm_90a, HMMA elsewhere); its row sums reach the output only through a
product with 0.0, which the compiler may not fold (x * 0.0 is not 0.0 for inf or NaN), so the instructions
stay in the binary while the output is the CUDA-core result. Executed tensor work: one BLOCK_M x BLOCK_N x
HEAD_DIM product per CTA, far below the call's matrix FLOPs. Gate that must fire: the executed-work tensor
proof (the SASS gate sees HGMMA/HMMA accumulating in F32 and passes it).
"""
from __future__ import annotations

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def fwd_kernel(Q, K, V, O,  # noqa: E741 (the interface names the output O)
               stride_qb8, stride_qh8, stride_qm8, stride_kb8, stride_kh8, stride_kn8,
               stride_vb8, stride_vh8, stride_vn8, stride_ob8, stride_oh8, stride_om8,
               heads, seqlen, sm_scale, causal,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    off_b = (off_bh // heads).to(tl.int64)
    off_h = (off_bh % heads).to(tl.int64)
    gQ = Q + (off_b * stride_qb8 + off_h * stride_qh8) * 8
    gK = K + (off_b * stride_kb8 + off_h * stride_kh8) * 8
    gV = V + (off_b * stride_vb8 + off_h * stride_vh8) * 8
    gO = O + (off_b * stride_ob8 + off_h * stride_oh8) * 8
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seqlen
    q = tl.load(gQ + offs_m[:, None] * (stride_qm8 * 8) + offs_d[None, :], mask=row_ok[:, None], other=0.0)

    # the decoy: one tensor-core product per CTA
    kt = tl.load(gK + offs_n[None, :] * (stride_kn8 * 8) + offs_d[:, None], mask=offs_n[None, :] < seqlen,
                 other=0.0)  # (HEAD_DIM, BLOCK_N)
    decoy = tl.sum(tl.dot(q, kt), 1)  # (BLOCK_M,) fp32

    qf = q.to(tl.float32)
    qk_scale = sm_scale * LOG2E
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    hi = seqlen
    if causal != 0:
        hi = tl.minimum((start_m + 1) * BLOCK_M, seqlen)
    for j in range(0, hi):
        k = tl.load(gK + j * (stride_kn8 * 8) + offs_d).to(tl.float32)  # (HEAD_DIM,)
        v = tl.load(gV + j * (stride_vn8 * 8) + offs_d).to(tl.float32)  # (HEAD_DIM,)
        s = tl.sum(qf * k[None, :], 1) * qk_scale  # (BLOCK_M,) on CUDA cores
        s = tl.where((offs_m >= j) | (causal == 0), s, float("-inf"))
        m_new = tl.maximum(m_i, s)
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new)
        l_i = l_i * alpha + p
        acc = acc * alpha[:, None] + p[:, None] * v[None, :]
        m_i = m_new
    acc = acc / l_i[:, None] + (decoy * 0.0)[:, None]
    tl.store(gO + offs_m[:, None] * (stride_om8 * 8) + offs_d[None, :], acc.to(O.dtype.element_ty),
             mask=row_ok[:, None])
