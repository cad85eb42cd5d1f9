"""Every pack committed under artifacts/reference/ re-verifies from its raw files with today's code."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evpack.timing import compare
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


def _bench_packs_by_commit() -> dict[str, list[Path]]:
    groups: dict[str, list[Path]] = {}
    for p in PACKS:
        meta = json.loads((p / "pack.json").read_text(encoding="utf-8"))
        if meta["git"]["commit"] and not meta["git"]["dirty"] and (p / "bench" / "summary.json").exists():
            groups.setdefault(meta["git"]["commit"], []).append(p)
    return {c: ps for c, ps in groups.items() if len(ps) >= 2}


def test_two_benchmarks_of_one_commit_agree():
    """Issue 6's stability bar on the committed data: >= 90% of rows SAME between two runs of one commit."""
    pairs = _bench_packs_by_commit()
    assert pairs, "no two committed packs with a benchmark from one clean commit"
    for commit, (a, b, *_) in pairs.items():
        diff = compare.compare_rows(compare.load(a)["rows"], compare.load(b)["rows"])
        c = diff["counts"]
        compared = c["SAME"] + c["FASTER"] + c["SLOWER"]
        assert compared >= 100, (commit, c)
        assert c["SAME"] / compared >= 0.90, (commit, a.name, b.name, c)
        assert not compare.regressions(diff), compare.render(diff, only_changed=True)


def _best(rows: list[dict], shape: str, mode: str = "cold") -> tuple[float, dict[str, float]]:
    ours = [r["median_us"] for r in rows if r["shape"] == shape and r["mode"] == mode and r["impl"] == "evpack"
            and r["variant"] != "scalar" and r.get("median_us")]
    sdpa = {r["variant"]: r["median_us"] for r in rows if r["shape"] == shape and r["mode"] == mode
            and r["impl"] == "sdpa" and r.get("median_us")}
    return min(ours), sdpa


def test_complete_full_suite_pack_meets_the_must_reach_targets():
    """Issue 8's 'must reach' column, read from the newest complete full-suite reference pack."""
    metas = {p: json.loads((p / "pack.json").read_text(encoding="utf-8")) for p in PACKS}
    full = [p for p, m in metas.items() if m["label"] == "evidence:complete" and m["options"]["suite"] == "full"]
    assert full, "no complete full-suite reference pack"
    rows = compare.load(full[-1])["rows"]
    base = "B=16,H=16,S=512,D={d},dtype={t},causal={c}"
    ours, sdpa = _best(rows, base.format(d=64, t="fp16", c=0))
    assert ours <= sdpa["flash"]
    ours, sdpa = _best(rows, base.format(d=64, t="fp16", c=1))
    assert ours <= sdpa["flash"]
    ours, sdpa = _best(rows, "B=2,H=8,S=512,D=64,dtype=fp16,causal=0", mode="graph")
    assert ours <= sdpa["default"]
    for d, t in ((64, "bf16"), (128, "fp16"), (128, "bf16")):
        ours, sdpa = _best(rows, base.format(d=d, t=t, c=0))
        assert sdpa["flash"] / ours >= 0.8, (d, t, ours, sdpa["flash"])


NEWEST = PACKS[-1]
SIGNERS = REPO / "artifacts" / "reference" / "allowed_signers"


def _verify_cli(*args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "evpack", "verify", *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO)


def test_newest_reference_pack_is_signed_by_an_allowed_signer():
    """Issue 14's acceptance: the newest H200 pack passes --require-signature against the committed key."""
    import shutil

    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen (OpenSSH) is not installed: signatures cannot be checked here")
    ok = _verify_cli(str(NEWEST), "--allowed-signers", str(SIGNERS), "--require-signature")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "provenance: signed by evpack-reference-h200" in ok.stdout


def test_a_rehashed_forgery_of_the_newest_pack_and_an_unsigned_older_pack_are_refused(tmp_path):
    import shutil

    from evpack.pack import write_index

    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen (OpenSSH) is not installed: signatures cannot be checked here")
    forged = tmp_path / NEWEST.name
    shutil.copytree(NEWEST, forged)
    env = json.loads((forged / "env.json").read_text())
    env["gpu_name"] = "NVIDIA B200"
    (forged / "env.json").write_text(json.dumps(env, indent=2) + "\n")
    write_index(forged)
    bad = _verify_cli(str(forged), "--allowed-signers", str(SIGNERS), "--require-signature")
    assert bad.returncode == 1 and "MISMATCH provenance digest: index.json" in bad.stdout, bad.stdout
    old = _verify_cli(str(PACKS[0]), "--allowed-signers", str(SIGNERS), "--require-signature")
    assert old.returncode == 1 and "MISMATCH signature: unsigned pack" in old.stdout


def test_newest_reference_pack_holds_the_evidence_the_issues_ask_for():
    pj = json.loads((NEWEST / "pack.json").read_text())
    assert pj["schema_version"] == 2 and pj["label"] == "evidence:complete"
    comment = (NEWEST / "comment.md").read_text()
    assert len(comment) <= 10_000 and "evidence:complete" in comment
    ab = json.loads((NEWEST / "bench" / "ab.json").read_text())
    assert ab["status"] == "pass" and ab["base_commit"].startswith("342053f") and not ab["regressions"]
    canaries = json.loads((NEWEST / "canaries" / "outcome.json").read_text())["data"]["matrix"]
    assert len(canaries) >= 13 and all(c["caught"] for c in canaries)
