"""Every pack committed under artifacts/reference/ re-verifies from its raw files with today's code."""
from __future__ import annotations

from pathlib import Path

import pytest

from evpack.verify import verify_pack

REPO = Path(__file__).resolve().parents[1]
PACKS = sorted(p for p in (REPO / "artifacts" / "reference").glob("*") if (p / "index.json").exists())


@pytest.mark.parametrize("pack", PACKS, ids=[p.name for p in PACKS])
def test_reference_pack_verifies(pack):
    assert verify_pack(pack) == []


def test_there_is_a_reference_pack():
    assert PACKS, "no reference pack committed under artifacts/reference/"
