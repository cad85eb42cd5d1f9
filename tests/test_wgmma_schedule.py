"""wgmma's work schedule with the tail split (csrc/variants/wgmma/scheduler.cuh, as a TAIL_SPLIT config runs it),
on the CPU: tests/native/wgmma_schedule.cu, built here with nvcc, walks every work index of every CTA of a
persistent grid and reports what it covered.

What must hold for every shape: each work item's K/V tiles are covered exactly once (a split item's pieces partition
them), no K/V range is empty or past the item's end, no CTA runs two pieces (the merge's counters assume one), and a
causal launch never splits. Where the last round is split, the busiest CTA runs at least kMinSavedTiles tiles fewer
than it would with whole items. Where a head's last query block leaves consumer warpgroups idle, the order puts those
short items last, so the busiest CTA does less than in plain head-major order. Skipped, with the reason, where nvcc
is not on PATH.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
NVCC = shutil.which("nvcc")
MIN_SAVED_TILES = 4  # scheduler.cuh kMinSavedTiles
H200_SMS = 132

pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: cannot build the schedule walker")


@pytest.fixture(scope="module")
def walker(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("schedule") / "wgmma_schedule"
    res = subprocess.run([NVCC, "-std=c++17", "-I", str(REPO / "csrc/include"), "-I", str(REPO), "-o", str(exe),
                          str(REPO / "tests/native/wgmma_schedule.cu")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return exe


def walk(walker: Path, cases: list[tuple[int, int, int, int, int, bool, int]], split: bool = True) -> list[dict]:
    """One report per case, walked with the scheduler of a TAIL_SPLIT config (split) or of one without."""
    text = "".join(f"{b} {h} {s} {bm} {bn} {int(c)} {g} {int(split)}\n" for b, h, s, bm, bn, c, g in cases)
    res = subprocess.run([str(walker)], input=text, capture_output=True, text=True, timeout=120, check=True)
    return [json.loads(line) for line in res.stdout.splitlines()]


def whole_rounds_tiles(items: int, grid: int, seqlen: int, block_n: int) -> int:
    """Tiles of the busiest CTA with whole items only (not causal: every item has all K/V tiles)."""
    return -(-items // grid) * -(-seqlen // block_n)


def check_invariants(case, row: dict) -> None:
    b, h, s, bm, bn, causal, grid = case
    assert row["covered_once"] == row["items"] and row["miscovered"] == 0, (case, row)
    assert row["bad_ranges"] == 0, (case, row)
    assert row["max_pieces_per_cta"] <= 1 and row["pieces"] <= grid, (case, row)
    assert row["grid"] <= grid
    if causal:
        assert row["splits"] == 1, (case, row)
    if row["splits"] > 1:
        assert row["pieces"] == (row["items"] - row["whole_items"]) * row["splits"]
        assert row["max_tiles_per_cta"] <= whole_rounds_tiles(row["items"], grid, s, bn) - MIN_SAVED_TILES, (case, row)


def test_the_long_rows_split_their_last_round_and_the_short_ones_do_not(walker):
    cases = [
        (2, 16, 4096, 192, 128, False, H200_SMS),  # 704 items: 5 rounds and 44 left, split in 3
        (4, 16, 2048, 192, 128, False, H200_SMS),  # the same count, 16 tiles
        (2, 16, 4096, 192, 128, True, H200_SMS),  # causal: never
        (2, 8, 512, 128, 128, False, H200_SMS),  # 64 items of 4 tiles: pieces of 2 save too little
        (32, 32, 512, 192, 128, False, H200_SMS),  # 36 left of 3072, 4 tiles each: likewise
        (16, 16, 512, 192, 128, False, H200_SMS),  # 108 left: more than half the grid, no split
        (1, 23, 1000, 128, 128, False, H200_SMS),  # the correctness oracle's shape: split after one round
        (1, 23, 1000, 192, 128, False, H200_SMS),
    ]
    rows = walk(walker, cases)
    for case, row in zip(cases, rows, strict=True):
        check_invariants(case, row)
    s4096, s2048, causal, b2h8, b32h32, canonical, oracle128, oracle192 = rows
    assert (s4096["whole_items"], s4096["splits"], s4096["max_tiles_per_cta"]) == (660, 3, 5 * 32 + 11)
    assert (s2048["splits"], s2048["max_tiles_per_cta"]) == (3, 5 * 16 + 6)
    assert [r["splits"] for r in (causal, b2h8, b32h32, canonical)] == [1, 1, 1, 1]
    assert oracle128["splits"] > 1 and oracle128["whole_items"] == H200_SMS
    assert oracle192["splits"] > 1 and oracle192["whole_items"] == H200_SMS


def test_the_oracles_shapes_reach_the_split_path(walker):
    """The shapes that the sanitizers (B1 H2 S700), the stability oracle (B2 H2 S700) and the correctness oracle
    (B1 H23 S1000) run split on an H200 with both configs, so each gate sees the pieces, the partials and the merge."""
    cases = [(b, h, s, bm, 128, False, H200_SMS) for b, h, s in ((1, 2, 700), (2, 2, 700), (1, 23, 1000))
             for bm in (128, 192)]
    for case, row in zip(cases, walk(walker, cases), strict=True):
        check_invariants(case, row)
        assert row["splits"] > 1, (case, row)


def head_major_max_load(b: int, h: int, s: int, bm: int, bn: int, grid: int) -> int:
    """The busiest CTA's load (K/V tiles x the consumer warpgroups that compute them) with whole items, not causal,
    in plain head-major order: item t is query block t % n_m. A warpgroup whose 64 rows all lie past s computes
    nothing."""
    n_m, tiles = -(-s // bm), -(-s // bn)
    last_groups = -(-(s - (n_m - 1) * bm) // 64)

    def load(t: int) -> int:
        return (last_groups if t % n_m == n_m - 1 else bm // 64) * tiles

    items = n_m * b * h
    return max(sum(load(t) for t in range(cta, items, grid)) for cta in range(min(grid, items)))


def test_short_last_blocks_come_last_so_no_cta_gets_them_all(walker):
    """B16 H16 S512 with 192 rows: 3 blocks a head, the last 128 rows (2 of 3 warpgroups), 768 items on 132 CTAs.
    Head-major, 132 is a multiple of 3, so each CTA always gets the same block: 6 whole items, 6 x 3 x 4 = 72.
    Short last: at most 4 whole and 2 short items, 4 x 12 + 2 x 8 = 64. B8 H16 S1024: 6 blocks a head, the last one
    64 rows (1 warpgroup): 6 x 24 = 144 head-major, 5 x 24 + 8 = 128 short last."""
    cases = [(16, 16, 512, 192, 128, False, H200_SMS), (8, 16, 1024, 192, 128, False, H200_SMS),
             (4, 16, 2048, 192, 128, False, H200_SMS), (2, 16, 4096, 192, 128, False, H200_SMS),
             (32, 32, 512, 192, 128, False, H200_SMS), (32, 16, 256, 192, 128, False, H200_SMS),
             (64, 16, 128, 128, 128, False, H200_SMS), (2, 8, 65, 128, 128, False, H200_SMS)]
    rows = walk(walker, cases, split=False)
    for case, row in zip(cases, rows, strict=True):
        check_invariants(case, row)
        assert row["max_load"] <= head_major_max_load(*case[:5], case[6]), (case, row)
    assert (rows[0]["max_load"], head_major_max_load(16, 16, 512, 192, 128, H200_SMS)) == (64, 72)
    assert (rows[1]["max_load"], head_major_max_load(8, 16, 1024, 192, 128, H200_SMS)) == (128, 144)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 8), st.integers(1, 40), st.integers(1, 5000), st.sampled_from([128, 192]),
                          st.booleans(), st.sampled_from([H200_SMS, 114, 78, 16, 1])), min_size=1, max_size=8),
       st.booleans())
def test_every_schedule_covers_each_items_tiles_once(walker, shapes, split):
    cases = [(b, h, s, bm, 128, c, g) for b, h, s, bm, c, g in shapes]
    for case, row in zip(cases, walk(walker, cases, split), strict=True):
        check_invariants(case, row)
