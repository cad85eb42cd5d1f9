"""evidence-pack: turn CUDA kernel source into a verifiable evidence pack."""
from __future__ import annotations

from .model import SCHEMA_VERSION as PACK_SCHEMA_VERSION  # the schema packs are written with (model.py)
from .version import __version__


def flash_attention(q, k, v, *, causal=False, scale=None, variant=None, config=None):
    """Flash-attention forward of a registered variant (default: the fastest verified one for this device
    and shape class); see evpack.api.flash_attention."""
    from .api import flash_attention as _fa  # torch is imported only when the op is used

    return _fa(q, k, v, causal=causal, scale=scale, variant=variant, config=config)


__all__ = ["flash_attention", "__version__", "PACK_SCHEMA_VERSION"]
