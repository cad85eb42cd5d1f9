"""The A/B verdict rule (timing/ab.py) as a frozen record: the numbers the verdict uses and the words ab.json
carries, written by to_json() as ab.json's `rule` (version 1's rule has no version, fdr_q or confirm_alpha). Every
version stays in RULES: an ab.json is re-derived with the rule it was made with."""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Rule:
    name: str
    test: str
    conf: float
    min_effect: float
    min_n: int
    slower: str
    faster: str
    same: str
    version: int | None = None  # rule version 2 on: FDR control (fdr_q) and a confirmation round (confirm_alpha);
    # version 3 on: FASTER is confirmed as SLOWER is
    fdr_q: float | None = None
    confirm_alpha: float | None = None

    @property
    def rule_version(self) -> int:
        return self.version or 1

    def to_json(self) -> dict:
        """ab.json's `rule`: the fields in the order the file holds them, those the version lacks left out."""
        out = {"name": self.name, "version": self.version, "test": self.test, "conf": self.conf,
               "min_effect": self.min_effect, "min_n": self.min_n, "fdr_q": self.fdr_q,
               "confirm_alpha": self.confirm_alpha, "slower": self.slower, "faster": self.faster, "same": self.same}
        return {k: v for k, v in out.items() if v is not None}


RULE_V1 = Rule(
    name="median-ratio-ci",
    test="ratio of medians head/base; distribution-free order-statistic CI of each median at "
         "1-(1-conf)/2, combined as [lo_h/hi_b, hi_h/lo_b] (joint coverage >= conf)",
    conf=0.99,
    min_effect=0.02,
    min_n=10,
    slower="CI lo > 1 and ratio > 1 + min_effect",
    faster="CI hi < 1 and ratio < 1 - min_effect",
    same="1 - min_effect <= CI lo and CI hi <= 1 + min_effect",
)
RULE_V2 = Rule(
    name="median-ratio-ci-fdr-confirmed",
    version=2,
    test=RULE_V1.test + "; one-sided rank-sum p-value of head vs base x (1 +- min_effect)",
    conf=0.99,
    min_effect=0.02,
    min_n=10,
    fdr_q=0.05,
    confirm_alpha=0.05,
    slower="CI lo > 1, ratio > 1 + min_effect, p significant under Benjamini-Hochberg at fdr_q over the "
           "compared rows; confirmed by a second same-run round: CI lo > 1, ratio > 1 + min_effect, "
           "p <= confirm_alpha / rows re-timed",
    faster="CI hi < 1, ratio < 1 - min_effect, p significant under Benjamini-Hochberg at fdr_q",
    same="1 - min_effect <= CI lo and CI hi <= 1 + min_effect",
)
RULE_VERSION = 3
RULE = replace(
    RULE_V2,
    name="median-ratio-ci-fdr-confirmed-both-ways",
    version=RULE_VERSION,
    faster="CI hi < 1, ratio < 1 - min_effect, p significant under Benjamini-Hochberg at fdr_q over the "
           "compared rows; confirmed by a second same-run round: CI hi < 1, ratio < 1 - min_effect, "
           "p <= confirm_alpha / rows re-timed",
)
RULES = {1: RULE_V1, 2: RULE_V2, RULE_VERSION: RULE}
