"""Pure parser of `ncu --csv --metrics ...` output, and the tensor-work arithmetic.

Trap seen on the H200: plain CUDA-core code contains `HFMA2.MMA` (a register
move issued on the tensor pipe), so `sm__inst_executed_pipe_tensor_op_hmma`
is non-zero for a scalar kernel. Tensor *math* is counted from the
`sm__ops_path_tensor_op_*` counters (operations, an FMA = 2), and the
instruction count is reported less its `_type_hfma2` part.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass

# Raw metric names (one mapping). ops_path counters count FLOPs (measured: a 64^3 x4 wmma GEMM gave 2,097,152).
# The executed tensor FLOPs are the sum of the per-opcode counters: HMMA (mma.sync, wmma) and HGMMA
# (Hopper wgmma.mma_async), each for fp16 and bf16 sources. Each is the parent of its dst/sparsity splits
# (measured: hmma_src_fp16 == hmma_src_fp16_dst_fp32 for an fp32-accumulating GEMM), so the splits are
# not added. All four names are in the H200's `ncu --query-metrics` (tests/fixtures/ncu).
TENSOR_OPS_METRICS = (
    "sm__ops_path_tensor_op_hmma_src_fp16.sum",
    "sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32.sum",
    "sm__ops_path_tensor_op_hgmma_src_fp16.sum",
    "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum",
)
HGMMA_OPS_METRICS = TENSOR_OPS_METRICS[2:]  # the wgmma path alone
# Opcode-independent totals of the same tensor path, recorded beside the sum as a cross-check: on a
# real run, per-opcode sum == generic total shows the HGMMA counters are the ones wgmma increments.
GENERIC_TENSOR_OPS_METRICS = (
    "sm__ops_path_tensor_src_fp16.sum",
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
)
HMMA_INST = "sm__inst_executed_pipe_tensor_op_hmma.sum"
HFMA2_INST = "sm__inst_executed_pipe_tensor_op_hmma_type_hfma2.sum"
GMMA_INST = "sm__inst_executed_pipe_tensor_op_gmma.sum"
METRICS = TENSOR_OPS_METRICS + (HMMA_INST, HFMA2_INST, GMMA_INST) + GENERIC_TENSOR_OPS_METRICS
COVERAGE_MIN = 0.95
# The other side: a tensor call's executed tensor FLOPs are at most this multiple of the tile-padded FLOPs of the
# shape and causality its manifest names. A call that says causal but ran the whole square reads >= 1.6x at the
# canonical shape, one that says D=64 but ran D=128 2x; the kernels so far read <= 1.0x.
PADDED_MAX = 1.10
# The kernel torch.cuda._sleep launches (ATen's at::cuda::spin_kernel): tensor_target's marker
# before each call in the profiled range.
MARKER_KERNEL = "spin_kernel"


@dataclass(frozen=True)
class KernelMetrics:
    launch_id: int
    kernel: str
    values: dict  # metric name -> float | None

    @property
    def tensor_flops(self) -> float:
        return float(sum(self.values.get(m) or 0.0 for m in TENSOR_OPS_METRICS))

    @property
    def hgmma_flops(self) -> float:
        return float(sum(self.values.get(m) or 0.0 for m in HGMMA_OPS_METRICS))

    @property
    def generic_tensor_flops(self) -> float | None:
        """The opcode-independent total (None when the profile did not record it: packs before it was added)."""
        vals = [self.values.get(m) for m in GENERIC_TENSOR_OPS_METRICS]
        return None if any(v is None for v in vals) else float(sum(vals))

    @property
    def tensor_math_inst(self) -> float:
        """HMMA instructions that are math (all tensor-pipe HMMA less the HFMA2.MMA moves) + GMMA."""
        hmma = self.values.get(HMMA_INST) or 0.0
        return hmma - (self.values.get(HFMA2_INST) or 0.0) + (self.values.get(GMMA_INST) or 0.0)


def _num(text: str) -> float | None:
    t = text.strip().replace(",", "")
    if t in ("", "n/a", "N/A"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list[KernelMetrics]:
    """One KernelMetrics per profiled launch, in launch order. Raises ValueError without a CSV header."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID","Process ID"')), None)
    if start is None:
        raise ValueError("no ncu CSV header in the output")
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    by_id: dict[int, KernelMetrics] = {}
    for r in rows:
        if not r.get("ID", "").strip().isdigit():
            continue
        i = int(r["ID"])
        km = by_id.setdefault(i, KernelMetrics(i, r["Kernel Name"], {}))
        km.values[r["Metric Name"]] = _num(r["Metric Value"])
    return [by_id[i] for i in sorted(by_id)]


def required_flops(b: int, h: int, s: int, d: int, causal: bool) -> int:
    """Matrix FLOPs the call must do: Q.K^T and P.V, 2*S*S*D each per head (causal: keys j <= i only)."""
    pairs = s * (s + 1) // 2 if causal else s * s
    return 4 * b * h * pairs * d


def tile_padded_flops(b: int, h: int, s: int, d: int, causal: bool, block_m: int, block_n: int) -> int:
    """What a tiled kernel computes when it processes whole (block_m x block_n) tiles up to the diagonal."""
    import math

    m_tiles = math.ceil(s / block_m)
    total_pairs = 0
    for m in range(m_tiles):
        n_keys = min((m + 1) * block_m, s) if causal else s
        total_pairs += block_m * math.ceil(n_keys / block_n) * block_n
    return 4 * b * h * total_pairs * d


def split_at_markers(kernels: list[KernelMetrics], marker: str = MARKER_KERNEL) -> list[list[KernelMetrics]]:
    """The launches after each marker kernel, up to the next one (one group per call).

    Raises ValueError when something ran before the first marker (the range holds only calls)."""
    groups: list[list[KernelMetrics]] = []
    for km in kernels:
        if marker in km.kernel:
            groups.append([])
        elif not groups:
            raise ValueError(f"launch {km.launch_id} ({km.kernel[:80]}) comes before the first marker")
        else:
            groups[-1].append(km)
    return groups


def split_batch_log(text: str, shares: list[tuple[str, int]], marker: str = MARKER_KERNEL) -> dict[str, str]:
    """Each target's share of the output of one ncu process that profiled several targets' calls in turn
    (oracles/tensor_target.py --batch): `shares` = [(name, calls), ...] in the order they ran. A share is the
    lines before ncu's CSV header (ncu's and the target's own messages, for every share), the header, and the
    CSV rows of the launches from its first call's marker up to the next share's first marker, byte for byte
    and in their order. Every launch of the output is in exactly one share.

    Raises ValueError when the output has no CSV header, a launch comes before the first marker, or the
    markers are not as many as the shares' calls."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID","Process ID"')), None)
    if start is None:
        raise ValueError("no ncu CSV header in the output")
    if any(type(n) is not int or n < 0 for _, n in shares):
        raise ValueError("a share's call count is not a count")
    names = [name for name, _ in shares]
    if len(set(names)) != len(names):
        raise ValueError("a target is named twice in the shares")
    kernels = parse_ncu_csv(text)
    groups = split_at_markers(kernels, marker)  # raises when a launch comes before the first marker
    share_of_call = [k for k, (_, n) in enumerate(shares) for _ in range(n)]
    if len(groups) != len(share_of_call):
        raise ValueError(f"the output holds {len(groups)} marked calls, the shares {len(share_of_call)}")
    owner: dict[int, int] = {}  # launch id -> share index
    call = -1
    for km in kernels:
        call += marker in km.kernel
        owner[km.launch_id] = share_of_call[call]
    head, body = lines[:start + 1], lines[start + 1:]
    out: dict[str, list[str]] = {name: list(head) for name in names}
    for ln in body:
        field = next(csv.reader([ln]), [""])[0].strip() if ln else ""
        if field.isdigit() and int(field) in owner:
            out[names[owner[int(field)]]].append(ln)
        else:  # no launch row (none seen in ncu's output): every share keeps it
            for rows in out.values():
                rows.append(ln)
    return {name: "\n".join(rows) + "\n" for name, rows in out.items()}
