"""The content probe: is a kernel faster when it sees input content it has seen before?

Timed rows never repeat content (timing/uniqueness.py), so a kernel that caches its output keyed on the
content gets no hit from an exact repeat there; one keyed on a *sample* of the content still hits when the
per-call raise misses its sample, and returns stale output. The probe catches the class whatever it
samples: outside the rows, at one shape, it times pairs of calls on the same buffers,

  fresh   the source set is redrawn (every element new), copied into the inputs, the call timed;
  repeat  the same source copied into the inputs again (the same traffic, identical content), the call timed,

PAIRS times. Each call goes behind its own spin kernel (SPIN_S) and is synchronized after, so the events
time the kernel, not the host, and no two probe calls are launched back to back: a kernel that changes its
behaviour in fast loops (the timing-aware class) is not mistaken for a cache here. An honest kernel does the same work on both, after the same copy, with the same lines in L2: the
median of repeat / fresh over the pairs stays within a few percent of 1 (bench/NOTES.md). A kernel that
returns remembered output on a repeat runs the repeat much faster: below RULE.max_ratio it is flagged,
and the bench stage makes every row of that variant/config an error (timing/integrity.py).

content_probe.json: {"schema", "shape", "rule", "entries": [{impl, variant, config, fresh_us, repeat_us,
error}]}; judge() re-derives every verdict from those raw times (standard library; torch only in run()).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..records.bench import ContentProbe, ProbeEntry

SCHEMA = 1
FILE = "content_probe.json"
PAIRS = 12
SPIN_S = 300e-6  # spin before each probe call: covers its host enqueue, and spaces two calls > 100 us apart


@dataclass(frozen=True)
class Rule:
    """The probe's verdict rule; to_json() is content_probe.json's `rule`, word for word."""

    name: str
    statistic: str
    max_ratio: float
    min_pairs: int

    def to_json(self) -> dict:
        return {"name": self.name, "statistic": self.statistic, "max_ratio": self.max_ratio,
                "min_pairs": self.min_pairs}


RULE = Rule(name="repeat-over-fresh", statistic="median over pairs of t(repeat) / t(fresh)", max_ratio=0.9,
            min_pairs=8)


@dataclass(frozen=True)
class Verdict:
    """One entry judged: its median repeat/fresh ratio, flagged = a content-keyed cache (None: could not judge)."""

    ratio: float | None
    flagged: bool | None
    reason: str

    def to_json(self) -> dict:
        return {"ratio": self.ratio, "flagged": self.flagged, "reason": self.reason}


def verdict(entry: dict, rule: Rule = RULE) -> Verdict:
    """The verdict of one entry of a content_probe.json (its `shape` named in a flag's reason when it has one)."""
    e = ProbeEntry.from_json(entry)
    fresh, repeat = e.fresh_us or [], e.repeat_us or []
    if e.error:
        return Verdict(None, None, f"probe did not run: {e.error}")
    pairs = [(f, r) for f, r in zip(fresh, repeat, strict=False) if f > 0 and r > 0]
    if len(pairs) < rule.min_pairs or len(fresh) != len(repeat):
        return Verdict(None, None, f"{len(pairs)} pairs (need {rule.min_pairs})")
    ratio = statistics.median(r / f for f, r in pairs)
    flagged = ratio < rule.max_ratio
    shape = e.shape if "shape" in e.raw else "the probe shape"
    why = (f"identical content ran {1 / ratio:.2f}x as fast as fresh content (median repeat/fresh {ratio:.3f} < "
           f"{rule.max_ratio}, {len(pairs)} pairs at {shape})") if flagged else f"repeat/fresh {ratio:.3f}"
    return Verdict(ratio, flagged, why)


def judge(entry: dict, rule: Rule = RULE) -> dict:
    """{'ratio', 'flagged', 'reason'} of one entry (verdict() as JSON)."""
    return verdict(entry, rule).to_json()


def flags(probe: dict) -> dict[tuple[str, str], str]:
    """(variant, config) -> reason for every flagged entry of ours in a content_probe.json."""
    p = ContentProbe.from_json(probe)
    out = {}
    for e in p.entries:
        v = verdict(dict(e.raw, shape=p.shape), RULE)
        if v.flagged and e.impl == "evpack":
            out[(e.variant, e.config)] = v.reason
    return out


def problems(probe: dict) -> list[str]:
    """What makes a content_probe.json unusable (an unknown rule, entries that could not be judged)."""
    p = ContentProbe.from_json(probe)
    if p.rule != RULE.to_json():  # the rule is the code's, word for word: a file cannot loosen it
        return [f"its rule is not the probe rule {RULE.name!r} of this code"]
    judged = [(e, verdict(e.raw, RULE)) for e in p.entries]
    return [f"{e.variant}/{e.config}: {v.reason}" for e, v in judged if v.flagged is None]


def run(kernels: list[tuple[str, str, str, object]], shape, stream, seed: int) -> dict:
    """Probe each (impl, variant, config, fn) at `shape` on `stream`; returns the content_probe.json object."""
    import torch

    from . import harness
    from .shape_runner import TORCH_DTYPES

    dims = (shape.B, shape.H, shape.S, shape.D)
    dtype = TORCH_DTYPES[shape.dtype]
    numel = shape.numel
    gen = torch.Generator(device="cuda").manual_seed(seed)
    inputs = torch.empty(3 * numel, dtype=dtype, device="cuda")
    source = torch.empty_like(inputs)
    q, k, v = (inputs[t * numel:(t + 1) * numel].view(dims) for t in range(3))
    cycles_per_s = harness.sleep_cycles_per_s(stream)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = {"schema": SCHEMA, "shape": shape.key, "rule": RULE.to_json(), "pairs": PAIRS, "entries": []}

    def timed_call(fn, redraw: bool) -> float:
        """One call of fn behind its own spin (>= SPIN_S: the host never launches two calls back to back)."""
        torch.cuda._sleep(int(SPIN_S * cycles_per_s))
        if redraw:
            source.normal_(generator=gen)
        inputs.copy_(source)
        start.record(stream)
        fn(q, k, v)
        end.record(stream)
        end.synchronize()
        return round(start.elapsed_time(end) * 1e3, 4)

    for impl, variant, config, fn in kernels:
        entry = {"impl": impl, "variant": variant, "config": config, "fresh_us": [], "repeat_us": [], "error": None}
        try:
            with torch.cuda.stream(stream):
                timed_call(fn, True)  # lazy initialisation, not kept
                for _ in range(PAIRS):
                    entry["fresh_us"].append(timed_call(fn, True))
                    entry["repeat_us"].append(timed_call(fn, False))
        except Exception as exc:  # noqa: BLE001 - recorded: an entry that did not run cannot pass the derive
            entry["error"] = " ".join(f"{type(exc).__name__}: {exc}".split())[:600]
            torch.cuda.synchronize()
        out["entries"].append(entry)
    return out
