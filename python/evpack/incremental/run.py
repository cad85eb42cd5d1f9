"""The evidence run's side of incremental evidence: one object the run loop asks three things.

    inc = IncrementalRun(repo, packs_root, pack_tmp, ...)   # picks the source pack, starts verifying it
    options = inc.stage_options(name, options, pack_record) # before a stage: plans at the first GPU stage,
                                                            # adds options["carry"] for the stage
    inc.after_stage(name)                                   # after it ran: copies its carried cells
    pack_json["incremental"] = inc.record()                 # what was carried, from where, and every key
"""
from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

from ..jsonio import read_json
from . import CARRY_STAGES
from .carry import copy_cells
from .cells import cells_of
from .keys import PARTS, KeysUnavailable, derived_keys
from .plan import Plan, choose_source, make_plan
from .sources import check_digest, source_digest

log = logging.getLogger("evpack")
VERIFY_TIMEOUT_S = 900


class IncrementalRun:
    def __init__(self, repo: Path, packs_root: Path, pack_dir: Path, *, variants: list[str], fresh: bool,
                 exclude: str, stages: str | None = None, why_not: str | None = None) -> None:
        """`why_not`: nothing can be carried in this run (no GPU, no GPU stage selected), and why."""
        self.repo, self.pack_dir, self.variants, self.fresh, self.stages = repo, pack_dir, variants, fresh, stages
        self.why_not = why_not
        self.plan: Plan | None = None
        self.keys: dict[str, dict[str, dict]] = {}
        self.applied: list = []
        self.source = None if fresh or why_not else choose_source(packs_root, exclude)
        self._verify = None
        self._facts: dict | None = None  # the run's facts the keys take (toolchain, python), from stage_options
        if self.source is not None:  # verified while the build runs: the plan waits for it only then
            cmd = [sys.executable, "-m", "evpack", "verify", str(self.source)]
            if stages:
                cmd += ["--stage-package", stages]
            self._verify = subprocess.Popen(cmd, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                            text=True, errors="replace")

    def _verified(self) -> str | None:
        """None when the source pack verified, else why not (one line)."""
        assert self._verify is not None
        t0 = time.monotonic()
        try:
            out, _ = self._verify.communicate(timeout=VERIFY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._verify.kill()
            self._verify.communicate()
            return f"its verify ran past {VERIFY_TIMEOUT_S} s"
        log.info("incremental: verified %s (%.1f s waited)", self.source.name, time.monotonic() - t0)
        if self._verify.returncode == 0:
            return None
        lines = [ln for ln in out.splitlines() if ln.strip()]
        first = next((ln for ln in lines if ln.startswith("MISMATCH")), lines[-1] if lines else "no output")
        return f"verify exited {self._verify.returncode}: {first[:200]}"

    def _compute_keys(self, pack_record: dict) -> str:
        """Fill self.keys from this build's files (the SASS dump, the PTXAS logs) and the run's facts; '' or why
        the device keys are not known (then no variant has keys)."""
        from ..stages.order import stage_module

        try:
            derived = derived_keys(self.pack_dir, pack_record)
        except KeysUnavailable as exc:
            derived = {}
            why = f"this build's keys are not known ({exc})"
        else:
            why = ""
        for stage in CARRY_STAGES:
            check = check_digest(self.repo, stage_module(stage, self.stages))
            self.keys[stage] = {v: {**derived[v], "source": source_digest(self.repo, v), "check": check}
                                for v in self.variants if v in derived}
        return why

    def _make_plan(self, pack_record: dict) -> Plan:
        """The plan, made when the first carrying stage starts. With nothing to carry from, the keys wait for
        record() (the run then need not hold its GPU checks back for the SASS dump)."""
        self._facts = pack_record
        if self.fresh:
            return Plan(reason="--fresh: every cell runs", fresh=True)
        if self.why_not:
            return Plan(reason=self.why_not)
        if self.source is None:
            return Plan(reason="no earlier complete pack in the packs folder: every cell runs")
        why = self._compute_keys(pack_record)  # the run waited for the SASS dump (evidence.py)
        bad = self._verified()
        if bad:
            return Plan(reason=f"the newest complete pack {self.source.name} does not verify ({bad}): every cell "
                               "runs", source=self.source)
        if why:
            return Plan(reason=f"{why}: every cell runs", source=self.source)
        return make_plan(self.source, self.keys, list(CARRY_STAGES))

    def stage_options(self, name: str, options: dict, pack_record: dict) -> dict:
        if name not in CARRY_STAGES:
            return options
        if self.plan is None:
            self.plan = self._make_plan(pack_record)
            log.info("incremental: %s", self.plan.reason)
        carry = self.plan.carry_option().get(name)
        if carry:
            log.info("incremental: %s carries %s from %s", name, ", ".join(carry),
                     ", ".join(sorted({c.source_pack for c in self.plan.carried if c.stage == name})))
            return dict(options, carry={name: carry})
        return options

    def after_stage(self, name: str, ran: bool) -> None:
        """Copy the stage's carried cells (only when the stage ran: a skipped stage holds no cell)."""
        if self.plan is None or not ran:
            return
        cells = [c for c in self.plan.carried if c.stage == name]
        copy_cells(cells, self.plan.source, self.pack_dir, name)
        self.applied += cells

    def close(self) -> None:
        if self._verify is not None and self._verify.poll() is None:
            self._verify.kill()
            self._verify.communicate()

    def record(self) -> dict:
        """pack.json's `incremental`: the carried cells, the sources' index digests, and the keys of every
        (stage, variant) with a cell in this pack (the next run compares with them)."""
        self.close()
        plan = self.plan or Plan(reason=self.why_not or "no GPU stage ran: nothing to carry", fresh=self.fresh)
        if not self.keys and self.plan is not None and self._facts is not None:  # the next run compares with them
            self._compute_keys(self._facts)
        keys = {}
        for stage, table in self.keys.items():
            procs_path = self.pack_dir / stage / "procs.json"
            if not procs_path.is_file():
                continue
            procs = read_json(procs_path)
            present = {v: {p: k[p] for p in PARTS} for v, k in table.items() if cells_of(stage, v, procs)}
            if present:
                keys[stage] = present
        used = {c.source_pack for c in self.applied}
        return {"fresh": plan.fresh, "reason": plan.reason,
                "source_pack": plan.source.name if plan.source is not None else None,
                "sources": {k: {"index_sha256": v} for k, v in sorted(plan.sources.items()) if k in used},
                "carried": [c.to_json() for c in self.applied], "keys": keys}
