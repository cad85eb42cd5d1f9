"""One profiled launch each of ours (D=64, D=128) and SDPA's flash / cuDNN backends at B=16, H=16,
S=512, fp16, between cudaProfilerStart/Stop, for Nsight Compute. With the argument `hopper`: the
wgmma variant and cuDNN instead (m192n128w16s2 at D=64, m128n128w12s2 causal and at D=128), at D=64, D=64
causal, D=128 and B=2 S=4096 D=64, then m192n128w16s2t (the split last round) at B=2 S=4096 D=64. From the repo root,
after a build:

    ncu --clock-control none --profile-from-start off --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
        --section Occupancy --section InstructionStats --section MemoryWorkloadAnalysis \
        --csv --page details python3 bench/profiles/profile_launches.py > OUT.csv
"""
import contextlib
import sys

sys.path.insert(0, "python")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import evpack  # noqa: E402


def qkv(d, b=16, s=512):
    g = torch.Generator(device="cuda").manual_seed(0)
    return [torch.randn(b, 16, s, d, device="cuda", dtype=torch.float16, generator=g) for _ in range(3)]


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def wgmma(causal, config="m128n128w12s2"):
    return lambda q, k, v: evpack.flash_attention(q, k, v, causal=causal, variant="wgmma", config=config)


CALLS = [
    ("mma64", lambda q, k, v: evpack.flash_attention(q, k, v, variant="mma", config="m64n64w4s2"), 64, None),
    ("mma128", lambda q, k, v: evpack.flash_attention(q, k, v, variant="mma", config="m128n64w4s2"), 128, None),
    ("flash64", sdpa, 64, SDPBackend.FLASH_ATTENTION),
    ("cudnn64", sdpa, 64, SDPBackend.CUDNN_ATTENTION),
    ("flash128", sdpa, 128, SDPBackend.FLASH_ATTENTION),
]
HOPPER = [  # (name, call, D, SDPA backend, B, S)
    ("wgmma192_64", wgmma(False, "m192n128w16s2"), 64, None, 16, 512),
    ("cudnn64", sdpa, 64, SDPBackend.CUDNN_ATTENTION, 16, 512),
    ("wgmma64causal", wgmma(True), 64, None, 16, 512),
    ("cudnn64causal", sdpa_causal, 64, SDPBackend.CUDNN_ATTENTION, 16, 512),
    ("wgmma128", wgmma(False), 128, None, 16, 512),
    ("cudnn128", sdpa, 128, SDPBackend.CUDNN_ATTENTION, 16, 512),
    ("wgmma192_64_s4096", wgmma(False, "m192n128w16s2"), 64, None, 2, 4096),
    ("cudnn64_s4096", sdpa, 64, SDPBackend.CUDNN_ATTENTION, 2, 4096),
    ("wgmma192t_64_s4096", wgmma(False, "m192n128w16s2t"), 64, None, 2, 4096),  # the last round split
]
if sys.argv[1:] == ["hopper"]:
    CALLS = HOPPER
for name, fn, d, backend, *bs in CALLS:
    q, k, v = qkv(d, *bs)
    with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
        for _ in range(5):  # warm-up: lazy init, cuDNN plan
            fn(q, k, v)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        fn(q, k, v)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    print("profiled", name, flush=True)
