"""The evidence run's side of incremental evidence: one object the run loop asks a few things.

    inc = IncrementalRun(repo, packs_root, pack_tmp, ...)   # picks the source pack, starts verifying it
    options = inc.stage_options(name, options, pack_record) # before a stage: plans at the first GPU stage,
                                                            # adds options["carry"] for the stage
    inc.hold(name)                                          # after it ran: what its conclusion must wait for
    inc.sass_concluded()                                    # the SASS dump is there: the device keys are known
    again = inc.settle(name)                                # before it concludes: copies its carried cells, or
                                                            # True: it must run again
    pack_json["incremental"] = inc.record()                 # what was carried, from where, and every key

The plan is made when the first GPU check starts, right after the build. When the SASS stage runs in this pack and
has not ended by then, the plan compares every key part but the device key (`EARLY_PARTS`: the variant's source,
the check code, the build settings, the toolchain, the GPU), so the GPU checks need not wait for the dump. When the
dump is there the device keys are derived and the plan made again from every part. A stage that carried a variant
the full plan does not carry is run again under the full plan (its folder emptied first); a stage concludes, and
its carried cells are copied, only once the full plan is known. So a pack carries exactly what a plan made after
the SASS dump would carry, and verify's chain check holds it to that.
"""
from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..jsonio import read_json
from . import CARRY_STAGES, DUMP_STAGE
from .carry import copy_cells
from .cells import cells_of
from .keys import EARLY_PARTS, PARTS, KeysUnavailable, derived_keys, environment_keys
from .plan import Plan, choose_source, describe, make_plan
from .sources import check_digest, source_digest

log = logging.getLogger("evpack")
VERIFY_TIMEOUT_S = 900


class IncrementalRun:
    def __init__(self, repo: Path, packs_root: Path, pack_dir: Path, *, variants: list[str], fresh: bool,
                 exclude: str, stages: str | None = None, why_not: str | None = None,
                 early: bool = False) -> None:
        """`why_not`: nothing can be carried in this run (no GPU, no GPU stage selected), and why. `early`: the
        SASS stage runs in this pack, so a plan may be made before it ends and checked when it does."""
        self.repo, self.pack_dir, self.variants, self.fresh, self.stages = repo, pack_dir, variants, fresh, stages
        self.why_not = why_not
        self.plan: Plan | None = None
        self.early = early
        self.speculative = False  # self.plan was made from EARLY_PARTS and is not checked yet
        self.reran: list[str] = []  # stages run again: they carried on the early plan what the full one does not
        self.ran_with: dict[str, set[str]] = {}  # stage -> the variants its last run carried
        self.keys: dict[str, dict[str, dict]] = {}
        self.applied: list = []
        self._lock = threading.RLock()
        self._dump_done = False
        self._early_note = ""  # how an early plan was checked, for the record's reason
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

    def _recorded_parts(self, check: str, variant: str) -> dict:
        return {"source": source_digest(self.repo, variant), "check": check}

    def _checks(self) -> dict[str, str]:
        from ..stages.order import stage_module

        return {stage: check_digest(self.repo, stage_module(stage, self.stages)) for stage in CARRY_STAGES}

    def _compute_keys(self, pack_record: dict) -> str:
        """Fill self.keys from this build's files (the SASS dump, the PTXAS logs) and the run's facts; '' or why
        the device keys are not known (then no variant has keys)."""
        try:
            derived = derived_keys(self.pack_dir, pack_record)
        except KeysUnavailable as exc:
            derived = {}
            why = f"this build's keys are not known ({exc})"
        else:
            why = ""
        for stage, check in self._checks().items():
            self.keys[stage] = {v: {**derived[v], **self._recorded_parts(check, v)}
                                for v in self.variants if v in derived}
        return why

    def _early_keys(self, pack_record: dict) -> dict[str, dict[str, dict]]:
        """Every variant's EARLY_PARTS, per stage (KeysUnavailable when the build's files do not give them)."""
        common = environment_keys(self.pack_dir, pack_record)
        return {stage: {v: {**common, **self._recorded_parts(check, v)} for v in self.variants}
                for stage, check in self._checks().items()}

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
        bad = self._verified()
        if bad:
            return Plan(reason=f"the newest complete pack {self.source.name} does not verify ({bad}): every cell "
                               "runs", source=self.source)
        if self.early and not self._dump_done:
            try:
                early = self._early_keys(pack_record)
            except KeysUnavailable as exc:
                return Plan(reason=f"this build's keys are not known ({exc}): every cell runs", source=self.source)
            plan = make_plan(self.source, early, list(CARRY_STAGES), parts=EARLY_PARTS)
            self.speculative = bool(plan.carried)
            if self.speculative:
                log.info("incremental: planned before the SASS dump (every key but the device key); the plan is "
                         "checked when the dump is there")
            return plan
        return self._full_plan(pack_record)

    def _full_plan(self, pack_record: dict) -> Plan:
        why = self._compute_keys(pack_record)
        if why:
            return Plan(reason=f"{why}: every cell runs", source=self.source)
        return make_plan(self.source, self.keys, list(CARRY_STAGES))

    def stage_options(self, name: str, options: dict, pack_record: dict) -> dict:
        if name not in CARRY_STAGES:
            return options
        with self._lock:
            if self.plan is None:
                self.plan = self._make_plan(pack_record)
                log.info("incremental: %s", self.plan.reason)
            carry = self.plan.carry_option().get(name) or []
            self.ran_with[name] = set(carry)
        if carry:
            log.info("incremental: %s carries %s from %s", name, ", ".join(carry),
                     ", ".join(sorted({c.source_pack for c in self.plan.carried if c.stage == name})))
            return dict(options, carry={name: carry})
        return options

    def sass_concluded(self) -> None:
        """The SASS stage concluded (ran or was skipped): check an early plan against the device keys."""
        with self._lock:
            self._dump_done = True
            if not self.speculative:
                return
            early = self.plan
            full = self._full_plan(self._facts)
            self.speculative = False
            full_pairs = {(c.stage, c.variant) for c in full.carried}
            wrong = sorted({f"{c.stage}/{c.variant}" for c in early.carried if (c.stage, c.variant) not in full_pairs})
            note = "; planned when the build ended, before the SASS dump, and checked against the device keys"
            if wrong:
                note += f" (the early plan also carried {', '.join(wrong)}; the full plan does not)"
            self.plan, self._early_note = full, note
            log.info("incremental: the SASS dump is there: %s%s", full.reason, note)

    def hold(self, name: str) -> tuple[str, ...]:
        """What a stage's conclusion waits for: the SASS stage, when the stage carried cells on an early plan."""
        with self._lock:
            return (DUMP_STAGE,) if self.speculative and self.ran_with.get(name) else ()

    def settle(self, name: str) -> bool:
        """Before a stage that ran concludes: copy its carried cells and return False; or, when it carried a
        variant the full plan does not, empty its folder and return True (it must run again)."""
        if name not in CARRY_STAGES or self.plan is None or not self.ran_with.get(name):
            return False  # it carried nothing: nothing to check or copy (the dump may not be complete yet)
        with self._lock:
            if self.speculative:  # hold() kept it until the SASS stage concluded; this is only a safety net
                self.sass_concluded()
            carried = self.ran_with[name]
            allowed = set(self.plan.carry_option().get(name, []))
            if not carried <= allowed:
                log.info("incremental: %s carried %s on the early plan; the device keys say otherwise: it runs "
                         "again", name, ", ".join(sorted(carried - allowed)))
                shutil.rmtree(self.pack_dir / name, ignore_errors=True)
                self.reran.append(name)
                return True
            cells = [c for c in self.plan.carried if c.stage == name and c.variant in carried]
        copy_cells(cells, self.plan.source, self.pack_dir, name)
        self.applied += cells
        return False

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
        # what was carried in fact (a stage may have run fresh what the plan let it carry), and how it was planned
        reason = (describe(self.applied) if plan.carried else plan.reason) + self._early_note
        if self.reran:
            reason += f"; run again under the full plan: {', '.join(self.reran)}"
        return {"fresh": plan.fresh, "reason": reason,
                "source_pack": plan.source.name if plan.source is not None else None,
                "sources": {k: {"index_sha256": v} for k, v in sorted(plan.sources.items()) if k in used},
                "carried": [c.to_json() for c in self.applied], "keys": keys}
