"""The GPU harness on one tiny shape (skipped without CUDA): every mode, ceilings, the shape runner."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from evpack.timing import baselines, ceilings, harness, summary  # noqa: E402
from evpack.timing.stats import StopRule  # noqa: E402
from evpack.timing.suites import Shape, SuiteShape, load_suite  # noqa: E402

RULE = StopRule(warmup=2, min_samples=10, floor_samples=5, max_samples=300, time_cap_s=0.2, graph_calls=4)


def _sets(n, shape=(1, 2, 128, 64)):
    return [tuple(torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(3)) for _ in range(n)]


@pytest.mark.parametrize("mode", harness.MODES)
def test_measure_sdpa_tiny(mode):
    stream = torch.cuda.Stream()
    m = harness.measure(baselines.sdpa_fn(False), _sets(3), mode, RULE, stream=stream)
    assert m.stop in ("converged", "median_ci", "time_cap", "hard_cap", "max_samples")
    assert len(m.times_us) >= RULE.floor_samples and all(t > 0 for t in m.times_us)
    assert m.n_sets == (1 if mode == "warm" else 3)
    if mode == "graph":
        assert m.capture_ms is not None and m.capture_ms > 0 and m.calls_per_sample >= 3
    else:
        assert m.capture_ms is None and m.calls_per_sample == 1


def test_ceilings_and_kernel_names():
    c = ceilings.measure(torch.cuda.Stream(), RULE)
    r = ceilings.rates(c)
    assert r["bandwidth"] > 1e11 and r["matmul_fp16"] > 1e12 and r["matmul_bf16"] > 1e12
    q, k, v = _sets(1)[0]
    names = baselines.kernels_ran(baselines.sdpa_fn(False), (q, k, v))
    assert names and baselines.classify_kernels(names) in ("cudnn", "flash", "efficient", "math")
    out, why = baselines.probe("math", False, q, k, v)
    assert out is not None and why == ""
    assert baselines.max_abs_err(out, baselines.reference(q, k, v, False)) < 1e-2


def test_shape_runner_with_sdpa_as_our_op(tmp_path):
    """The whole per-shape path, with SDPA standing in for the custom op (no extension needed)."""
    from evpack.timing.shape_runner import ShapeRunner

    def op(q, k, v, *, causal=False, variant="wmma", config=None):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    suite = load_suite("quick", __import__("pathlib").Path(__file__).resolve().parents[1])
    suite = type(suite)(suite.name, (SuiteShape(Shape(1, 2, 128, 64, "fp16", True), harness.MODES, ("t",)),),
                        RULE, suite.canonical, budget_s=10)
    l2 = harness.device_info()["l2_bytes"]
    runner = ShapeRunner(suite, op, torch.cuda.Stream(), l2, ["wmma"])
    runner.run_shape(suite.shapes[0])
    ours = [r for r in runner.records if r["impl"] == "evpack"]
    assert ours and all(r["status"] == "ok" and r["max_abs_err"] <= r["err_bound"] for r in ours)
    default = [r for r in runner.records if r["variant"] == "default"]
    assert all(r["status"] == "ok" and r["kernels"] for r in default)
    rates = {"bandwidth": 3e12, "matmul_fp16": 7e14, "matmul_bf16": 7e14}
    rows = summary.build_rows(runner.records, runner.samples, rates)
    assert all(r["median_us"] > 0 for r in rows if r["status"] == "ok")


def test_our_op_if_built():
    try:
        import evpack._C  # noqa: F401

        from evpack.api import flash_attention
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"extension not built: {exc}")
    m = harness.measure(lambda q, k, v: flash_attention(q, k, v, variant="wmma"), _sets(2), "graph", RULE)
    assert m.times_us and m.capture_ms is not None
