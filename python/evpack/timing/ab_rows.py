"""The records timing/ab.py builds while it decides an A/B: a row's ratio of medians and its CI, the first
round's numbers, a confirmation round, an entry of ab.json's `rows` (to_json writes it as the file holds it)
and the confirmation round's samples by side."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Ratio:
    """median(head) / median(base) and its CI at the rule's confidence."""

    ratio: float
    ci_lo: float
    ci_hi: float

    @staticmethod
    def to_json(nums: Ratio | None) -> dict:
        """ab.json's ratio, ci_lo and ci_hi (None each without numbers)."""
        if nums is None:
            return {"ratio": None, "ci_lo": None, "ci_hi": None}
        return {"ratio": nums.ratio, "ci_lo": nums.ci_lo, "ci_hi": nums.ci_hi}


@dataclass(frozen=True)
class FirstRound:
    """Round-1 numbers of a comparable row: the per-row (version 1) verdict and the two one-sided p-values."""

    v1: str
    reason: str
    nums: Ratio | None
    p_slower: float | None = None
    p_faster: float | None = None


@dataclass(frozen=True)
class Confirm:
    """A candidate row's confirmation round: its ratio and CI, p-value and the two sides' statistics."""

    nums: Ratio
    p: float
    head: dict
    base: dict

    def to_json(self) -> dict:
        return {**Ratio.to_json(self.nums), "p": self.p, "head": self.head, "base": self.base}


@dataclass(frozen=True)
class ConfirmSamples:
    """The confirmation-round samples (rule version 2 on): {head key: times} and {base key: times}."""

    head: dict = field(default_factory=dict)
    base: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Entry:
    """A row of ours timed on both sides. `compared`: both sides could be compared; `v2`: decided by rule
    version 2 (its entries carry p_slower, p_faster and confirm: after the CI when compared, else last)."""

    key: str
    variant: str
    config: str
    shape: str
    mode: str
    head: dict
    base: dict
    compared: bool
    v2: bool
    nums: Ratio | None = None
    verdict: str | None = None
    reason: str | None = None
    p_slower: float | None = None
    p_faster: float | None = None
    confirm: Confirm | None = None

    def to_json(self) -> dict:
        out = {"key": self.key, "variant": self.variant, "config": self.config, "shape": self.shape,
               "mode": self.mode, "head": self.head, "base": self.base, **Ratio.to_json(self.nums)}
        decided = {"verdict": self.verdict, "reason": self.reason}
        if not self.v2:
            return {**out, **decided}
        p = {"p_slower": self.p_slower, "p_faster": self.p_faster,
             "confirm": None if self.confirm is None else self.confirm.to_json()}
        return {**out, **p, **decided} if self.compared else {**out, **decided, **p}
