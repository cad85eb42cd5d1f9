"""The flash-attention forward as a torch custom op, made in one place.

The head's op (`evpack::flash_attention_fwd`, evpack.api) and the A/B base's (`evpack_ab::base_fwd`,
timing/ab_runner.py) are two ops of this one factory, so both sides check the same pointer rule, pay the
same dispatch on the host and run under CUDA-graph capture the same way: allocate the output, launch on
the current stream, never synchronize. The fake implementation lets torch.compile trace them.
"""
from __future__ import annotations

from collections.abc import Callable

import torch


def forward_op(name: str, extension: Callable[[str], object]):
    """A custom op `name` (q, k, v, causal, scale, variant, config) -> out that launches
    `extension(variant).forward(q, k, v, out, causal, scale, variant, config, stream)`."""

    @torch.library.custom_op(name, mutates_args=(), device_types="cuda")
    def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float, variant: str,
                config: str) -> torch.Tensor:
        for arg, t in (("q", q), ("k", k), ("v", v)):
            if t.data_ptr() % 16:
                raise ValueError(f"{arg}: data pointer must be 16-byte aligned (got offset {t.data_ptr() % 16})")
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        with torch.cuda.device(q.device):
            stream = torch.cuda.current_stream(q.device).cuda_stream
            extension(variant).forward(q, k, v, out, causal, scale, variant, config, stream)
        return out

    @forward.register_fake
    def _fake(q, k, v, causal, scale, variant, config):
        return torch.empty(q.shape, dtype=q.dtype, device=q.device)

    return forward
