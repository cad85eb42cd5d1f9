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


@pytest.mark.parametrize("pack", PACKS[:1], ids=[p.name for p in PACKS[:1]])
def test_verify_needs_neither_torch_nor_pandas(pack, tmp_path):
    """A reviewer can re-check a pack on a bare Python: hide torch, pandas and numpy."""
    import os
    import subprocess
    import sys

    for mod in ("torch", "pandas", "numpy", "matplotlib"):
        (tmp_path / mod).mkdir()
        (tmp_path / mod / "__init__.py").write_text(f"raise ImportError('{mod} hidden for this test')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO / "python")]))
    proc = subprocess.run([sys.executable, "-m", "evpack", "verify", str(pack)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("verified")
