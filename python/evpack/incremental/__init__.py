"""Incremental evidence: a rerun carries the verified cells of variants nothing they depend on has changed.

A *cell* is one process of a GPU stage (a procs.json entry: `mma`, `stability`'s `mma.diagnostic`,
`sanitize`'s `memcheck.mma.m64n64w4s2`); each belongs to one variant. Before the GPU stages run, the
planner (plan.py) takes the newest complete pack of the packs folder, has it verified, and compares, per
(stage, variant), what the cells depend on (keys.py: the variant's device code, its sources, the check
code, the toolchain, the GPU and driver). Equal keys: the stage skips that variant (procs.variants_to_run)
and its cell files are copied from the pack where the cell last ran (carry.py), procs.json entries marked
`carried_from`, so each stage's derive() reads them as it reads fresh ones. pack.json records the chain
(`incremental`), and `verify` checks it (chain.py): the source pack is found and verifies, every carried
file and procs entry equals the source's, the keys equal both packs'.

Never carried: canary cells (every pack shows every gate firing), bench and the A/B (always re-measured),
build, PTXAS and SASS (CPU stages, re-run on the new binary). docs/incremental.md has the whole design.

Modules: cells (which cell is whose, its files), keys (keys derived from a pack's files; standard library
only: verify uses them), sources (the recorded keys, from the checkout), chain (verify's checks), plan and
carry (the evidence run's side).
"""
from __future__ import annotations

CARRY_STAGES = ("tensor_proof", "sanitize", "correctness", "stability")
DUMP_STAGE = "sass"  # the stage whose SASS dump the device keys come from
# A pack's chain: the packs its carried cells come from, and theirs. verify walks it; a longer one is refused
# (the planner runs a cell afresh rather than make it longer).
MAX_CHAIN_DEPTH = 6
