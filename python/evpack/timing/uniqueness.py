"""Timed content is unique: what a row records about it and how derive re-derives it (standard library only).

Every timed call of a row (cold, warm, graph, the A/B base side) sees input content that no call of the
shape saw before. timing/content.py makes it so; this module names the methods and judges a row:

  per-call   before every eager call (warm-up and timed alike), outside the call's event pair, one kernel
             raises one element of each of q, k and v of the call's input set by +1.
  per-replay a CUDA graph's calls each read their own input set; before every replay, outside its event
             pair, one kernel raises one element of each of q, k and v of every one of those sets by +1.

Why that makes content unique: each raise strictly increases the element it hits (|x| stays far below
where +1 could round away: 2048 in fp16, 256 in bf16), nothing else writes the sets while they are timed,
so the sum of a set's elements grows with every raise and a set never holds the same content twice.
Different sets are independent draws. The raised positions walk each tensor in a seeded order that
repeats no position for numel raises, so the sets stay close to their standard-normal draw.

A row records content_uniqueness (the method's key) and unique_calls (timed calls the harness raised
content for). derive re-derives timed_content_unique = known method and unique_calls == n x
calls_per_sample (every timed call, from the samples file).
"""
from __future__ import annotations

PER_CALL, PER_REPLAY = "per-call", "per-replay"
METHODS = {
    PER_CALL: "before every call, outside its event pair, one element of each of q, k, v of its input set "
              "raised by +1 (one kernel); the set's element sum grows with every call",
    PER_REPLAY: "every call of the graph on its own input set; before every replay, outside its event pair, "
                "one element of each of q, k, v of every set raised by +1 (one kernel)",
}
DELTA = 1.0  # the raise; strictly increases any |x| < 256 in bf16 and < 2048 in fp16


def timed_content_unique(row: dict, n: int | None) -> bool | None:
    """Whether every timed call of the row saw new content (None for a row without samples)."""
    if not n:
        return None
    per = row.get("calls_per_sample") or 1
    return row.get("content_uniqueness") in METHODS and row.get("unique_calls") == n * per
