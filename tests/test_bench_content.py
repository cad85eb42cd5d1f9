"""Unique timed content on the CPU: the ContentPool's raises, and the harness Timer's bookkeeping (every call's
content new, which call's inputs a check receives, what a row records) with torch's CUDA calls replaced by a
synchronous stand-in that runs each "kernel" at once (a graph replays its recorded calls). The same checks on
a real device: tests/test_bench_content_gpu.py.
"""
from __future__ import annotations

import contextlib
import hashlib
import types

import pytest

torch = pytest.importorskip("torch")

from evpack.timing import harness, uniqueness  # noqa: E402
from evpack.timing.content import ContentPool  # noqa: E402
from evpack.timing.stats import StopRule  # noqa: E402

DIMS = (1, 2, 16, 64)
RULE = StopRule(warmup=3, min_samples=30, floor_samples=10, max_samples=60, time_cap_s=0.2, graph_calls=5,
                max_batch=8)


def digest(qkv) -> str:
    return hashlib.sha256(b"".join(t.contiguous().view(torch.int16).numpy().tobytes() for t in qkv)).hexdigest()


# -- the pool ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_raise_gives_content_never_seen_before(dtype):
    pool = ContentPool(DIMS, dtype, 3, seed=11, device="cpu")
    numel = pool.numel
    seen = {digest(s) for s in pool.sets}
    assert len(seen) == 3
    calls = 2 * numel + 7  # past one full walk of every tensor: positions come round again
    plan = pool.plan([[i % 3] for i in range(calls)])
    for i in range(calls):
        assert plan.index[i].numel() == 3  # one element of each of q, k, v: warm mode keeps its lines in L2
        pool.touch(plan.index[i])
        seen.add(digest(pool.sets[i % 3]))
    assert len(seen) == 3 + calls
    # the walk visits each position of a tensor once per numel raises
    fresh = ContentPool(DIMS, dtype, 1, seed=11, device="cpu")
    firsts = [fresh.positions(0) for _ in range(numel)]
    for t in range(3):
        assert sorted(p[t] for p in firsts) == list(range(t * numel, (t + 1) * numel))


def test_a_replay_plan_raises_every_set_in_one_kernel():
    pool = ContentPool(DIMS, torch.float16, 4, seed=2, device="cpu")
    before = [digest(s) for s in pool.sets]
    plan = pool.plan([[0, 1, 2, 3]])
    assert plan.index[0].numel() == 12
    pool.touch(plan.index[0])
    assert all(digest(s) != b for s, b in zip(pool.sets, before, strict=True))


def test_inputs_at_gives_exactly_what_a_call_saw():
    pool = ContentPool(DIMS, torch.float16, 2, seed=5, device="cpu")
    plan = pool.plan([[i % 2] for i in range(9)])
    snaps = {s: pool.snapshot(s) for s in (0, 1)}
    truth = []
    for i in range(9):
        pool.touch(plan.index[i])
        truth.append(digest(pool.sets[i % 2]))
    for j in range(9):
        s = j % 2
        got = pool.inputs_at(snaps[s].clone(), s, plan, j)
        assert digest(got) == truth[j], j


def test_index_of_refuses_tensors_of_another_buffer():
    pool = ContentPool(DIMS, torch.float16, 2, seed=5, device="cpu")
    assert [pool.index_of(s) for s in pool.sets] == [0, 1]
    with pytest.raises(ValueError):
        pool.index_of(tuple(t.clone() for t in pool.sets[0]))
    with pytest.raises(ValueError):
        pool.index_of((pool.sets[0][0], pool.sets[1][1], pool.sets[0][2]))


def test_timed_content_unique_needs_a_known_method_and_every_timed_call():
    row = {"content_uniqueness": uniqueness.PER_CALL, "unique_calls": 40, "calls_per_sample": 1}
    assert uniqueness.timed_content_unique(row, 40) is True
    assert uniqueness.timed_content_unique(dict(row, unique_calls=39), 40) is False
    assert uniqueness.timed_content_unique(dict(row, content_uniqueness="trust me"), 40) is False
    assert uniqueness.timed_content_unique(dict(row, content_uniqueness=None), 40) is False
    graph = {"content_uniqueness": uniqueness.PER_REPLAY, "unique_calls": 30 * 7, "calls_per_sample": 7}
    assert uniqueness.timed_content_unique(graph, 30) is True
    assert uniqueness.timed_content_unique(row, 0) is None


# -- the Timer on a synchronous stand-in for torch.cuda ----------------------------------------------------

class _Event:
    def __init__(self, enable_timing=False):
        self.t = 0.0

    def record(self, stream=None):
        import time

        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return max((end.t - self.t) * 1e3, 1e-4)


class _Graph:
    def __init__(self):
        self.nodes = []

    def replay(self):
        for node in self.nodes:
            node()

    def reset(self):
        self.nodes = []


class _Stream:
    cuda_stream = 0
    device = types.SimpleNamespace(index=0)

    def wait_stream(self, other):
        pass

    def synchronize(self):
        pass


class _Cuda:
    """The torch.cuda calls harness.Timer makes, run synchronously on the CPU."""

    capturing: _Graph | None = None
    Event, CUDAGraph, Stream = _Event, _Graph, _Stream

    @staticmethod
    def _sleep(cycles):
        pass

    @staticmethod
    def stream(s):
        return contextlib.nullcontext()

    @staticmethod
    def current_stream():
        return _Stream()

    @staticmethod
    def synchronize():
        pass

    @classmethod
    @contextlib.contextmanager
    def graph(cls, g, stream=None):
        cls.capturing = g
        try:
            yield
        finally:
            cls.capturing = None


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setattr(harness, "torch", types.SimpleNamespace(cuda=_Cuda))
    monkeypatch.setattr(harness, "reset_persisting_l2", lambda stream: 0.0)
    monkeypatch.setattr(harness, "persisting_l2_limit", lambda: 0)
    monkeypatch.setattr(harness, "device_drain_s", lambda: 0.0)
    return _Cuda


def _compute(q, k, v):
    return (q.float() + 2 * k.float() - v.float()).to(q.dtype)


class Kernel:
    """A stand-in kernel that remembers the content of every call it ran (graph: every replayed call)."""

    def __init__(self):
        self.calls: list[str] = []  # digest of each executed call, in order
        self.out_digest: dict[int, str] = {}  # id(output) -> digest of the inputs that produced it last

    def __call__(self, q, k, v):
        out = _compute(q, k, v)
        if _Cuda.capturing is not None:  # captured, not run: the replay runs it
            def node(q=q, k=k, v=v, out=out):
                out.copy_(_compute(q, k, v))
                self._ran((q, k, v), out)
            _Cuda.capturing.nodes.append(node)
            return out
        self._ran((q, k, v), out)
        return out

    def _ran(self, qkv, out):
        d = digest(qkv)
        self.calls.append(d)
        self.out_digest[id(out)] = d


@pytest.mark.parametrize("mode", harness.MODES)
def test_timer_every_call_new_content_and_checks_get_the_kept_calls_inputs(fake_cuda, mode):
    pool = ContentPool(DIMS, torch.float16, 6, seed=3, device="cpu")
    kernel = Kernel()
    checked = []

    def check(inputs, out, reference):
        checked.append((digest(inputs), kernel.out_digest[id(out)], reference))
        bad = int((out.view(torch.int16) != _compute(*inputs).view(torch.int16)).sum())
        return harness.CheckResult(bad, reference, 0.0 if reference else None, 1.0 if reference else None)

    t = harness.Timer(kernel, pool.sets, mode, RULE, stream=_Stream(), name=f"k/{mode}", content=pool, min_sets=2)
    t.check = check
    for _ in range(12):
        t.sample(harness.SLICE_S, 1e9)
    assert len(kernel.calls) == len(set(kernel.calls)), "a call saw content another call saw"
    n = len(t.times_ms)
    fields = t.content_fields()
    assert fields["unique_calls"] == n * t.per and uniqueness.timed_content_unique(
        {**fields, "calls_per_sample": t.per}, n)
    if mode == "graph":  # every captured call on its own set
        assert fields["content_uniqueness"] == uniqueness.PER_REPLAY and t.per == len(t.sets) >= 2
        assert len({id(s[0]) for s in t.sets}) == t.per
    else:
        assert fields["content_uniqueness"] == uniqueness.PER_CALL
        assert len(t.sets) == (1 if mode == "warm" else 2)
    # the checks saw exactly the inputs of the call whose output they were given, and it matched
    assert checked and all(a == b for a, b, _ in checked)
    assert [r for *_, r in checked] == [True] * harness.REF_CHECKS + [False] * (len(checked) - harness.REF_CHECKS)
    integ = t.integrity()
    assert integ["timed_mismatches"] == 0 and integ["timed_checks"] == len(checked)
    assert integ["timed_ref_checks"] == harness.REF_CHECKS and integ["timed_ref_failures"] == 0


def test_kept_calls_are_drawn_across_the_batch(fake_cuda):
    """Which timed call a check keeps is random within the batch (seeded by the timer's name), not the last."""
    pool = ContentPool(DIMS, torch.float16, 1, seed=3, device="cpu")
    kernel = Kernel()
    positions = []
    t = harness.Timer(kernel, pool.sets, "warm", RULE, stream=_Stream(), name="k", content=pool)

    def check(inputs, out, reference):
        positions.append(kernel.calls.index(kernel.out_digest[id(out)]))
        return harness.CheckResult(0)

    t.check = check
    assert {0, 1, 3, 7} <= harness.CHECK_BATCHES and not {2, 4, 5, 6} & harness.CHECK_BATCHES  # 4 checks in 8
    for _ in range(8):
        before = len(kernel.calls)
        t.sample(harness.SLICE_S, 1e9)
        if positions and positions[-1] >= before:
            positions[-1] -= before  # index within its batch
    assert len(positions) == 4 and len(set(positions)) > 1 and any(p != RULE.max_batch - 1 for p in positions)


@pytest.mark.parametrize("unique", [False, True])
def test_a_stale_output_in_a_fast_loop_is_caught_by_the_kept_call_check(fake_cuda, unique):
    """The timing-aware class on the stand-in: calls after the first of a batch return the first one's output.
    With the same content every call (warm mode before issue 25) that output is right and no check can see it;
    with new content every call the kept call's check does."""
    pool = ContentPool(DIMS, torch.float16, 1, seed=3, device="cpu")
    state = {"last": None, "first": True}

    def lazy(q, k, v):
        if state["first"] or state["last"] is None:
            state["last"] = _compute(q, k, v)
            state["first"] = False
        return state["last"].clone()

    def check(inputs, out, reference):
        state["first"] = True  # an untimed call after a sync computes
        return harness.CheckResult(int((out.view(torch.int16) != _compute(*inputs).view(torch.int16)).sum()))

    t = harness.Timer(lazy, pool.sets, "warm", RULE, stream=_Stream(), name="stale", content=pool if unique else None)
    t.check = check
    real_run = t._run

    def run(count, sleep, timed=True):
        state["first"] = True  # the spin before a batch: the first call of each batch computes
        return real_run(count, sleep, timed)

    t._run = run
    for _ in range(8):
        t.sample(harness.SLICE_S, 1e9)
    assert t.timed_checks == 4
    assert (t.timed_mismatches > 0) is unique
