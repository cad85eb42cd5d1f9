"""Stability oracle: N back-to-back launches with no sync between them give bitwise-identical
outputs and no CUDA error; then the same under CUDA-graph capture and replay.

This catches the "fails from the second launch on" class of bug (state left
behind by a launch, uninitialised shared memory, races that depend on timing).
Comparisons run on the device and accumulate a mismatch count; the host syncs
once at the end of each phase. Every eager output is NaN-poisoned before its call
(the graph's output before every replay), and q, k, v are compared with a snapshot
after every call.

Stale results and stream semantics: after each phase, REFILLS rounds overwrite q, k, v
in place (same pointers, a new seed each round) on a side stream behind a pending
producer (a spin kernel, then the copy), call the op (eager) or replay the graph on that
stream, and copy the output in a consumer on the same stream; the copy must match the
float64 reference of the new inputs within the correctness bound. A memo keyed by
pointers returns the old output; a launch on any other stream runs before the producer
has written the inputs. The graph is captured in global capture mode, where a launch
on the legacy stream is refused.

Capture-aware launches: the captured graph is kept (torch.cuda.CUDAGraph(keep_graph=True)) and its nodes
are read through the driver (graph_nodes.py); the row records every node, and the stage requires the
call's own kernel and no other kernel in it. Output aliasing: ALIAS_CALLS calls through the op, each on
inputs of its own, keep every output alive; after the last one each output must still hold the bits it had
right after its call and be within the bound of its own inputs, and no output may share memory with any
input or another output (storage address ranges).

    python oracles/stability.py --variant wmma --out results.json [--launches 1000]
"""
from __future__ import annotations

import argparse
import os
import time

import graph_nodes
from common import (
    bound_for,
    changed_elements,
    cuda_error_text,
    default_scale,
    make_qkv,
    max_err,
    poisoned_out,
    snapshot,
    storage_overlaps,
    torch,
    write_result,
)

from evpack import registry
from evpack.api import _extension, run_kernel
from evpack.binary import loaded_binary
from evpack.stages.stability import alias_problems, graph_kernel_problems

# A tail tile on purpose (700 = 5 x 128 + 60), and few enough work items that wgmma's tail_split config splits them
# across CTAs (scheduler.cuh): the merge of the pieces must give the same bits on every launch.
SHAPE = dict(B=2, H=2, S=700, D=64, dtype="fp16")
REFILLS = 4  # in-place refills per phase (each a new seed, each checked against the reference)
PRODUCER_CYCLES = 20_000_000  # spin of the pending producer, ~10 ms: the host enqueues the rest meanwhile
ALIAS_CALLS = 4  # calls whose outputs are kept alive and rechecked after the later ones


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16)


def _checked(var, cfg, q, k, v, causal: bool, stream) -> torch.Tensor:
    """One call of the extension into a NaN-poisoned output, on `stream`."""
    out = poisoned_out(q)
    _extension(var.name).forward(q, k, v, out, causal, default_scale(q.shape[-1]), var.name, cfg.name,
                                 stream.cuda_stream)
    return out


def refilled(call, qkv, causal: bool, seed0: int) -> dict:
    """REFILLS rounds: on a side stream, a pending producer refills q, k, v in place, then `call(stream)`
    (returns the output tensor), then a consumer copies the output; each copy is checked afterwards."""
    side = torch.cuda.Stream()
    bad, worst, results = 0, 0.0, []
    for i in range(REFILLS):
        seed = seed0 + 1000 * (i + 1)
        gen = torch.Generator(device="cuda").manual_seed(seed)
        fresh = [torch.randn(t.shape, generator=gen, device="cuda", dtype=torch.float32).to(t.dtype) for t in qkv]
        torch.cuda.synchronize()  # the new values exist before the test starts; nothing below is timed
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(PRODUCER_CYCLES)  # producer still busy when the op is enqueued
            for t, f in zip(qkv, fresh, strict=True):
                t.copy_(f)  # in place: same storage, same pointers
            out = call(side)
            consumed = out.clone()  # the consumer, ordered after the op on the same stream
        torch.cuda.synchronize()
        ref, _, _, bound = bound_for(*qkv, causal, default_scale(qkv[0].shape[-1]))
        err = max_err(consumed, ref)
        results.append({"seed": seed, "max_err": err, "bound": bound})
        if not err <= bound:
            bad += 1
            worst = max(worst, err)
    return {"rounds": REFILLS, "bad_rounds": bad, "worst_err": worst, "rounds_detail": results}


def eager(var, cfg, causal: bool, launches: int) -> dict:
    qkv = make_qkv(SHAPE["B"], SHAPE["H"], SHAPE["S"], SHAPE["D"], SHAPE["dtype"], seed=7)
    q, k, v = qkv
    before = snapshot(qkv)
    stream = torch.cuda.current_stream()
    first = _checked(var, cfg, q, k, v, causal, stream)
    mismatched = torch.zeros((), dtype=torch.int64, device="cuda")
    bad_launches = torch.zeros((), dtype=torch.int64, device="cuda")
    changed = changed_elements(qkv, before)
    for _ in range(launches - 1):
        out = _checked(var, cfg, q, k, v, causal, stream)
        diff = (_bits(out) != _bits(first)).sum() + (~torch.isfinite(out)).sum()
        mismatched += diff
        bad_launches += (diff > 0).to(torch.int64)
        changed = changed + changed_elements(qkv, before)
    torch.cuda.synchronize()
    first_bad = int((~torch.isfinite(first)).sum().item())
    res = {"launches": launches, "mismatched_elements": int(mismatched.item()) + first_bad,
           "mismatched_launches": int(bad_launches.item()) + (first_bad > 0), "inputs_changed": int(changed.item())}
    res["refill"] = refilled(lambda s: run_kernel(q, k, v, causal=causal, variant=var.name, config=cfg.name),
                             qkv, causal, seed0=7)
    return res


def graph(var, cfg, causal: bool, replays: int) -> dict:
    qkv = make_qkv(SHAPE["B"], SHAPE["H"], SHAPE["S"], SHAPE["D"], SHAPE["dtype"], seed=8)
    q, k, v = qkv
    before = snapshot(qkv)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside capture, as CUDA graphs require
        ref = run_kernel(q, k, v, causal=causal, variant=var.name, config=cfg.name)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph(keep_graph=True)  # kept, so its nodes can be read before the first replay
    t0 = time.perf_counter()
    with torch.cuda.graph(g, capture_error_mode="global"):  # any launch on the legacy stream is refused
        out = run_kernel(q, k, v, causal=causal, variant=var.name, config=cfg.name)
    capture_s = time.perf_counter() - t0
    try:
        nodes, nodes_error = graph_nodes.describe(g.raw_cuda_graph()), None
    except (graph_nodes.GraphInspectionError, OSError, AttributeError) as exc:
        nodes, nodes_error = None, cuda_error_text(exc)
    mismatched = torch.zeros((), dtype=torch.int64, device="cuda")
    bad = torch.zeros((), dtype=torch.int64, device="cuda")
    changed = changed_elements(qkv, before)
    for _ in range(replays):
        out.fill_(float("nan"))  # poisoned before every replay
        g.replay()
        diff = (_bits(out) != _bits(ref)).sum()
        mismatched += diff
        bad += (diff > 0).to(torch.int64)
        changed = changed + changed_elements(qkv, before)
    torch.cuda.synchronize()

    def replay(stream):
        out.fill_(float("nan"))
        g.replay()  # on the current stream: the side stream of the round
        return out

    return {"replays": replays, "mismatched_elements": int(mismatched.item()),
            "mismatched_replays": int(bad.item()), "capture_s": round(capture_s, 6),
            "inputs_changed": int(changed.item()), "refill": refilled(replay, qkv, causal, seed0=8),
            "nodes": nodes, "nodes_error": nodes_error,
            "own_kernel": {"variant": var.name, "config": cfg.name, "dtype": SHAPE["dtype"], "D": SHAPE["D"]}}


def aliasing(var, cfg, causal: bool) -> dict:
    """ALIAS_CALLS calls through the op on inputs of their own, every output kept alive; afterwards each output
    must hold the bits it had right after its call and match its own inputs' reference, and no output may share
    memory with an input or another output."""
    calls = []
    for i in range(ALIAS_CALLS):
        qkv = make_qkv(SHAPE["B"], SHAPE["H"], SHAPE["S"], SHAPE["D"], SHAPE["dtype"], seed=900 + i)
        out = run_kernel(*qkv, causal=causal, variant=var.name, config=cfg.name)
        calls.append((qkv, out, out.clone()))  # the clone is ordered right after this call, before the next
    torch.cuda.synchronize()
    overwritten, wrong, worst = [], [], 0.0
    for i, (qkv, out, right_after) in enumerate(calls):
        if not torch.equal(_bits(out), _bits(right_after)):
            overwritten.append(i)
        ref, _, _, bound = bound_for(*qkv, causal, default_scale(SHAPE["D"]))
        err = max_err(right_after, ref)
        if not err <= bound:
            wrong.append(i)
            worst = max(worst, err)
    named = {f"out{i}": out for i, (_, out, _) in enumerate(calls)}
    named.update({f"{n}{i}": t for i, (qkv, _, _) in enumerate(calls) for n, t in zip("qkv", qkv, strict=True)})
    overlaps = [[a, b] for a, b in storage_overlaps(named) if a.startswith("out") or b.startswith("out")]
    return {"calls": ALIAS_CALLS, "overwritten": overwritten, "wrong": wrong, "worst_err": worst,
            "overlaps": overlaps}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--launches", type=int, default=1000)
    args = ap.parse_args()
    var = registry.get(args.variant, include_canaries=True)
    rows, first_error = [], None
    for cfg in var.configs_for(SHAPE["D"]):
        for causal in (False, True):
            row = {"variant": var.name, "config": cfg.name, "causal": causal, **SHAPE}
            try:
                row["alias"] = aliasing(var, cfg, causal)  # first: its calls see no state of the other phases
                row["eager"] = eager(var, cfg, causal, args.launches)
                row["graph"] = graph(var, cfg, causal, args.launches)
                row["error"] = None
            except Exception as exc:  # a CUDA error: recorded, and the context is likely gone
                row["error"] = cuda_error_text(exc)
                first_error = first_error or row["error"]
            row["passed"] = bool(row["error"] is None and all(
                row[p]["mismatched_elements"] == 0 and row[p]["inputs_changed"] == 0
                and row[p]["refill"]["bad_rounds"] == 0 for p in ("eager", "graph"))
                and not graph_kernel_problems(row["graph"]) and not alias_problems(row["alias"]))
            rows.append(row)
            if row["error"]:
                break
        if first_error:
            break
    env = {k: os.environ.get(k) for k in ("CUDA_LAUNCH_BLOCKING", "TORCH_USE_CUDA_DSA")}
    binary = None
    try:
        binary = loaded_binary(_extension(var.name).__name__)
    except Exception as exc:
        first_error = first_error or cuda_error_text(exc)
    write_result(args.out, {"variant": var.name, "env": env, "rows": rows, "first_error": first_error,
                            "binary": binary})
    ok = sum(r["passed"] for r in rows)
    print(f"stability {var.name}: {ok}/{len(rows)} configs stable over {args.launches} launches"
          + (f"; first error: {first_error}" if first_error else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
