"""The custom op on a real GPU: SDPA-like results, graph capture, torch.compile, streams, input checks."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

import evpack  # noqa: E402
from evpack import registry  # noqa: E402


def _qkv(b=2, h=3, s=65, d=64, dtype=torch.float16):
    g = torch.Generator(device="cuda").manual_seed(0)
    return [torch.randn(b, h, s, d, device="cuda", dtype=dtype, generator=g) for _ in range(3)]


def _close(out, q, k, v, causal):
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    assert torch.isfinite(out).all()
    assert (out.float() - ref).abs().max().item() < 2e-2


@pytest.mark.parametrize("variant", [v.name for v in registry.VARIANTS])
@pytest.mark.parametrize("causal", [False, True])
def test_every_variant_matches_sdpa(variant, causal):
    q, k, v = _qkv()
    for cfg in registry.get(variant).configs:
        _close(evpack.flash_attention(q, k, v, causal=causal, variant=variant, config=cfg.name), q, k, v, causal)


def test_strided_sdpa_layout_is_honoured():
    q, k, v = (t.transpose(1, 2) for t in _qkv(2, 65, 4, 64))  # (B, S, H, D) storage viewed as (B, H, S, D)
    _close(evpack.flash_attention(q, k, v), q, k, v, False)


def test_cuda_graph_capture_and_replay():
    q, k, v = _qkv()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        evpack.flash_attention(q, k, v)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = evpack.flash_attention(q, k, v)
    q.copy_(torch.randn_like(q))
    g.replay()
    torch.cuda.synchronize()
    _close(out, q, k, v, False)


def test_torch_compile_fullgraph():
    q, k, v = _qkv()
    fn = torch.compile(lambda a, b, c: evpack.flash_attention(a, b, c, causal=True) * 2, fullgraph=True)
    _close(fn(q, k, v) / 2, q, k, v, True)


def test_launches_on_the_current_stream_without_syncing():
    q, k, v = _qkv(8, 16, 512, 64)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # keep the side stream busy
        out = evpack.flash_attention(q, k, v)
        assert not side.query()  # queued behind the sleep: the call returned without waiting
    side.synchronize()
    _close(out, q, k, v, False)


def test_mixed_devices_and_cpu_inputs_are_rejected_on_gpu_too():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="k: must be a CUDA tensor"):
        evpack.flash_attention(q, k.cpu(), v)
    with pytest.raises(ValueError, match="zero-size"):
        evpack.flash_attention(q[:, :, :0], k[:, :, :0], v[:, :, :0])
