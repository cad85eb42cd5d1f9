"""Input sets whose content never repeats: one flat buffer, and the raises that make each call's content new.

A ContentPool holds a shape's input sets as views of one flat device buffer (set i: q, k, v at
[(3i + t) numel, (3i + t + 1) numel)), so one `index_add_` can raise elements of any number of sets in
one kernel. timing/uniqueness.py says why a raise makes content unique; here:

  touch plan   the host picks, for every call of a batch, the positions to raise (one per tensor of each
               set the call reads) from each tensor's seeded walk `(a + c g) mod numel` (g coprime with
               numel: no position repeats for numel raises) and sends them as one index tensor before
               the batch (outside every timed region). Each call then costs one small kernel.
  snapshot     clone of one set, taken before a checked batch; replaying the batch's raises of that set up
               to a kept call (inputs_at) gives exactly the inputs that call saw, for re-checking its output
               after the batch without any extra work inside it.

GPU only (torch); used by the harness and the shape runner.
"""
from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .uniqueness import DELTA


def _step(rng: random.Random, n: int) -> int:
    """A walk step coprime with n (so the walk visits every position once per n raises), far from 1."""
    if n == 1:
        return 1
    g = rng.randrange(n // 3 + 1, n) | 1
    while math.gcd(g, n) != 1:
        g += 2
    return g % n or 1


@dataclass
class TouchPlan:
    """The raises of one batch: for call i, `index[i]` (absolute positions into the pool) and the sets it raised."""

    index: list[torch.Tensor]  # per call: positions (3 per raised set), views of one device tensor
    sets: list[tuple[int, ...]]  # per call: the sets raised
    positions: list[list[int]]  # per call: the same positions on the host (for inputs_at)
    keep: torch.Tensor | None = None  # the device tensor the views point into (kept alive)


class ContentPool:
    """A shape's input sets in one flat buffer, standard-normal, seeded; raises that keep their content new."""

    def __init__(self, dims: Sequence[int], dtype: torch.dtype, n_sets: int, seed: int, device="cuda",
                 generator: torch.Generator | None = None) -> None:
        if n_sets < 1:
            raise ValueError("ContentPool: at least one set")
        self.dims, self.dtype = tuple(dims), dtype
        self.numel = math.prod(self.dims)
        self.flat = torch.empty(n_sets * 3 * self.numel, dtype=dtype, device=device)
        gen = generator or torch.Generator(device=device).manual_seed(seed)
        self.sets: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for i in range(n_sets):
            views = []
            for t in range(3):
                view = self.flat[(3 * i + t) * self.numel:(3 * i + t + 1) * self.numel].view(self.dims)
                view.copy_(torch.randn(self.dims, generator=gen, device=device, dtype=dtype))  # as separate draws did
                views.append(view)
            self.sets.append((views[0], views[1], views[2]))
        rng = random.Random(seed ^ 0xC0FFEE)
        self._walk = [[(rng.randrange(self.numel), _step(rng, self.numel)) for _ in range(3)] for _ in range(n_sets)]
        self.touches = [0] * n_sets  # raises planned per set so far
        self._ones = torch.full((3 * n_sets,), DELTA, dtype=dtype, device=device)

    def index_of(self, qkv: Sequence[torch.Tensor]) -> int:
        """The set index of (q, k, v) views of this pool (ValueError for tensors that are not one of its sets)."""
        off, rem = divmod(qkv[0].data_ptr() - self.flat.data_ptr(), self.flat.element_size())
        s, r = divmod(off, 3 * self.numel)
        if rem or r or not 0 <= s < len(self.sets) or any(
                a.data_ptr() != b.data_ptr() for a, b in zip(qkv, self.sets[s], strict=True)):
            raise ValueError("ContentPool: the inputs are not one of this pool's sets")
        return s

    def positions(self, s: int) -> list[int]:
        """The next raise of set s: one position in each of its q, k, v (absolute), advancing its walk."""
        c = self.touches[s]
        self.touches[s] = c + 1
        return [(3 * s + t) * self.numel + (a + c * g) % self.numel for t, (a, g) in enumerate(self._walk[s])]

    def plan(self, calls: Sequence[Sequence[int]]) -> TouchPlan:
        """Positions for a batch: calls[i] = the sets call i reads (raised before it). One host-to-device copy."""
        per_call = [[p for s in sets for p in self.positions(s)] for sets in calls]
        width = max((len(p) for p in per_call), default=0)
        if not per_call or width == 0:
            return TouchPlan([], [], [])
        flat = torch.tensor([p for ps in per_call for p in ps], dtype=torch.int64).to(self.flat.device)
        views, at = [], 0
        for ps in per_call:
            views.append(flat[at:at + len(ps)])
            at += len(ps)
        return TouchPlan(views, [tuple(s) for s in calls], per_call, flat)

    def touch(self, index: torch.Tensor) -> None:
        """Raise the given positions by DELTA (one kernel on the current stream)."""
        self.flat.index_add_(0, index, self._ones[:index.numel()])

    def snapshot(self, s: int) -> torch.Tensor:
        """A copy of set s's q, k, v as they are now (one flat tensor)."""
        return self.flat[3 * s * self.numel:3 * (s + 1) * self.numel].clone()

    def inputs_at(self, snap: torch.Tensor, s: int, plan: TouchPlan, upto: int) -> tuple[torch.Tensor, ...]:
        """(q, k, v) of set s as call `upto` of the plan saw them, from a snapshot taken before the plan ran."""
        lo, hi = 3 * s * self.numel, 3 * (s + 1) * self.numel
        local = [p - lo for i in range(upto + 1) if s in plan.sets[i] for p in plan.positions[i] if lo <= p < hi]
        if local:
            idx = torch.tensor(local, dtype=torch.int64).to(snap.device)
            snap.index_add_(0, idx, torch.full((len(local),), DELTA, dtype=snap.dtype, device=snap.device))
        return tuple(snap[t * self.numel:(t + 1) * self.numel].view(self.dims) for t in range(3))

    def set_view(self, snap: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(q, k, v) views of a snapshot."""
        return tuple(snap[t * self.numel:(t + 1) * self.numel].view(self.dims) for t in range(3))
