"""Issue 25 on a CUDA device (skipped without one): timed content is new on every call in every mode, the kept
timed outputs are checked against exactly their inputs, the content probe leaves honest kernels alone, the
attention floor and the new integrity rules pass real rows, the two new bench canaries are caught, and the
A/B's confirmation round re-times rows. bench/validate_timing.sh runs this file."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from evpack.timing import baselines, content_probe, harness, integrity, roofline, uniqueness  # noqa: E402
from evpack.timing import summary as sm  # noqa: E402
from evpack.timing.content import ContentPool  # noqa: E402
from evpack.timing.stats import StopRule  # noqa: E402
from evpack.timing.suites import Shape, SuiteShape, load_suite  # noqa: E402

RULE = StopRule(warmup=2, min_samples=10, floor_samples=5, max_samples=200, time_cap_s=0.2, graph_calls=6,
                max_batch=32)
DIMS = (1, 2, 128, 64)


def _physics():
    """The run's physics as the bench stage records it (device_info, the SM clocks read now)."""
    from evpack.timing import clocks

    reading = clocks.read(0)
    ph = roofline.physics_of(harness.device_info(), clocks.highest_sm_mhz({"before": reading, "after": reading}))
    assert ph is not None, f"no exp floor on this device ({harness.device_info()}, clocks {reading})"
    return ph


class Digests:
    """SDPA that also records, on the device, a digest of the inputs of every call it runs (graph: per captured
    call, into a slot the replays overwrite)."""

    def __init__(self, numel: int, slots: int = 64):
        gen = torch.Generator(device="cuda").manual_seed(99)
        self.w = torch.randn(3 * numel, generator=gen, device="cuda", dtype=torch.float64)
        self.eager: list[torch.Tensor] = []
        self.slots = torch.zeros(slots, device="cuda", dtype=torch.float64)
        self.capturing = False
        self.j = 0

    def digest(self, q, k, v) -> torch.Tensor:
        bits = torch.cat([t.reshape(-1).view(torch.int16) for t in (q, k, v)]).to(torch.float64)
        return (bits * self.w).sum()

    def __call__(self, q, k, v):
        d = self.digest(q, k, v)
        if self.capturing:
            self.slots[self.j].copy_(d)
            self.j += 1
        else:
            self.eager.append(d)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("mode", harness.MODES)
def test_every_call_sees_content_no_call_saw_before(mode):
    stream = torch.cuda.Stream()
    pool = ContentPool(DIMS, torch.float16, 8, seed=4)
    fn = Digests(pool.numel)
    real_capture = harness._capture_keep

    def capture(*a, **kw):
        fn.capturing = True
        try:
            return real_capture(*a, **kw)
        finally:
            fn.capturing = False

    harness._capture_keep = capture
    try:
        t = harness.Timer(fn, pool.sets, mode, RULE, stream=stream, name=mode, content=pool, min_sets=2)
        seen = [float(d) for d in fn.eager]
        if mode == "graph":
            for _ in range(20):  # every replay: each captured call on its own, freshly raised set
                t._run(1, 0)
                stream.synchronize()
                seen += fn.slots[:t.per].tolist()
            timed = 20 * t.per
        else:
            for _ in range(5):
                t.sample(harness.SLICE_S, harness.sleep_cycles_per_s(stream))
            stream.synchronize()
            seen = [float(d) for d in fn.eager]  # warm-up, calibration and timed calls
            timed = len(t.times_ms)
        t.close()
    finally:
        harness._capture_keep = real_capture
    assert len(seen) > 20 and len(set(seen)) == len(seen), "two calls saw the same content"
    assert t.unique_calls == timed


def test_kept_timed_outputs_are_checked_on_exactly_their_inputs():
    """SDPA is deterministic: a kept output equals SDPA on the inputs the check is handed only if those are the
    inputs that call saw (one element of the set differs on every other call)."""
    stream = torch.cuda.Stream()
    pool = ContentPool(DIMS, torch.float16, 3, seed=5)
    fn = baselines.sdpa_fn(False)
    results = []

    def check(inputs, out, reference):
        with torch.cuda.stream(stream):
            again = fn(*inputs)
            results.append(int((out.view(torch.int16) != again.view(torch.int16)).sum().item()))
        return harness.CheckResult(results[-1])

    for mode in ("cold", "warm", "graph"):
        t = harness.Timer(fn, pool.sets, mode, RULE, stream=stream, name=f"det/{mode}", content=pool, min_sets=2)
        t.check = check
        for _ in range(8):
            t.sample(harness.SLICE_S, harness.sleep_cycles_per_s(stream))
        t.close()
    assert len(results) >= 12 and results == [0] * len(results)


def _ours_or_skip():
    try:
        import evpack._C  # noqa: F401

        from evpack.api import flash_attention
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"extension not built: {exc}")
    return flash_attention


def test_our_rows_pass_the_new_rules():
    """Our kernels at one shape in every mode: unique content on every timed row, kept timed outputs equal to an
    untimed call and within the reference bound of their own inputs, every row above the attention floor."""
    op = _ours_or_skip()
    from evpack import registry
    from evpack.timing import ceilings
    from evpack.timing.shape_runner import ShapeRunner

    cap = torch.cuda.get_device_capability()
    names = [v.name for v in registry.VARIANTS if v.runs_on(cap)]
    suite = load_suite("quick", REPO)
    shape = Shape(2, 8, 512, 64, "fp16", False)
    suite = type(suite)(suite.name, (SuiteShape(shape, harness.MODES, ("t",)),), RULE, suite.canonical, budget_s=20)
    stream = torch.cuda.Stream()
    runner = ShapeRunner(suite, op, stream, harness.device_info()["l2_bytes"], names)
    runner.run_shape(suite.shapes[0])
    rates = ceilings.rates(ceilings.measure(stream, RULE))
    physics = _physics()
    rows = sm.build_rows(runner.records, runner.samples, rates, physics=physics)
    timed = [r for r in rows if r["median_us"] is not None]
    assert timed and all(r["timed_content_unique"] is True for r in timed), \
        [(r["key"], r.get("unique_calls"), r["n"]) for r in timed if r["timed_content_unique"] is not True]
    ours = [r for r in timed if r["impl"] == sm.OURS]
    assert ours and all(r["timed_ref_checks"] >= 1 and r["timed_ref_failures"] == 0 and r["timed_mismatches"] == 0
                        for r in ours), [(r["key"], r["timed_mismatches"], r["timed_ref_worst"]) for r in ours]
    assert all(r["floor_exp_us"] is not None and r["pct_sol"] < 100 for r in timed)
    _, summary = integrity.judge(rows, rates, schema=2, physics=physics)
    assert summary["broken_rows"] == 0, summary


def test_content_probe_leaves_honest_kernels_alone():
    op = _ours_or_skip()
    from evpack import registry

    shape = Shape(16, 16, 512, 64, "fp16", False)
    cap = torch.cuda.get_device_capability()
    kernels = [("sdpa", "default", "", baselines.sdpa_fn(False))]
    for v in registry.VARIANTS:
        if not v.runs_on(cap):
            continue
        for c in v.configs:
            kernels.append((sm.OURS, v.name, c.name,
                            lambda q, k, v_, _n=v.name, _c=c.name: op(q, k, v_, variant=_n, config=_c)))
    probe = content_probe.run(kernels, shape, torch.cuda.Stream(), 7)
    verdicts = [(e["variant"], e["config"], content_probe.judge(e)) for e in probe["entries"]]
    assert all(v["flagged"] is False for _, _, v in verdicts), verdicts
    print(json.dumps({f"{a}/{b}": round(v["ratio"], 4) for a, b, v in verdicts}))  # the honest spread, for NOTES


def _canaries_or_skip():
    try:
        import evpack._canaries  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"canaries not built (EVPACK_CANARIES=1 python setup.py build_ext --inplace): {exc}")


@pytest.mark.parametrize("name", ["canary_side_stream", "canary_content_cache", "canary_timing_aware"])
def test_bench_canaries_are_caught_by_the_rule_of_their_class(tmp_path, name):
    _canaries_or_skip()
    from evpack.stages import bench_canaries
    from evpack.stages.base import write_json
    from evpack.timing import ceilings

    stream = torch.cuda.Stream()
    rates = ceilings.rates(ceilings.measure(stream, RULE))
    rec = bench_canaries._time_one(name, stream)
    assert rec["error"] is None, rec["error"]
    write_json(tmp_path / bench_canaries.FILES[name], rec)
    out = bench_canaries.outcome(tmp_path, rates, name, schema=2, physics=_physics())
    print(name, json.dumps({k: out[k] for k in ("caught", "observed")}))
    assert out["caught"], out


def test_confirmation_round_times_head_and_base_again(tmp_path):
    op = _ours_or_skip()
    import evpack._C as ext

    from evpack.timing import ab, ab_runner
    from evpack.timing.shape_runner import ShapeRunner

    copy = tmp_path / "base" / Path(ext.__file__).name
    copy.parent.mkdir()
    shutil.copyfile(ext.__file__, copy)
    base = ab_runner.load_base(copy, ["mma"])
    suite = load_suite("quick", REPO)
    shape = Shape(2, 8, 512, 64, "fp16", False)
    ss = SuiteShape(shape, harness.MODES, ("t",))
    suite = type(suite)(suite.name, (ss,), RULE, suite.canonical, budget_s=20)
    runner = ShapeRunner(suite, op, torch.cuda.Stream(), harness.device_info()["l2_bytes"], ["mma"], base=base)
    v, c = base.pairs[0]
    records, samples = runner.confirm(ss, [(v, c, "cold"), (v, c, "graph")], 0.2)
    head = [r for r in records if r["impl"] == sm.OURS]
    assert len(head) == 2 and len(records) == 4 and all(r["status"] == "ok" for r in records)
    for r in head:
        assert len(samples[r["key"]]) >= RULE.floor_samples and len(samples[ab.base_key(r["key"])]) >= 5
        assert r["content_uniqueness"] in uniqueness.METHODS
    ratio = [math.log(sorted(samples[r["key"]])[len(samples[r["key"]]) // 2] /
                      sorted(samples[ab.base_key(r["key"])])[len(samples[ab.base_key(r["key"])]) // 2]) for r in head]
    assert all(abs(x) < 0.05 for x in ratio), ratio  # one binary against a copy of itself
    # the FASTER candidates' round of the same shape (ab_confirm's round_no 1) runs on inputs of its own
    again, more = runner.confirm(ss, [(v, c, "cold")], 0.2, round_no=1)
    assert len(again) == 2 and all(r["status"] == "ok" for r in again)
    assert all(len(more[r["key"]]) >= 5 for r in again)
    assert all(r["content_uniqueness"] in uniqueness.METHODS for r in again if r["impl"] == sm.OURS)
