"""Every pack committed under artifacts/reference/ re-verifies from its raw files with today's code."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import reference

from evpack.jsonio import read_member_json
from evpack.timing import compare
from evpack.verify import verify_pack

REPO = Path(__file__).resolve().parents[1]
PACKS = list(reference.PACKS)


@pytest.mark.parametrize("pack", PACKS, ids=[p.name for p in PACKS])
def test_reference_pack_verifies(pack):
    assert verify_pack(pack) == []


def test_there_is_a_reference_pack():
    assert PACKS, "no reference pack committed under artifacts/reference/"


@pytest.mark.parametrize("pack", reference.param(("COMPAT", reference.COMPAT), ("FULL", reference.FULL)))
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


def _bench_packs_by_commit() -> dict[tuple, list[Path]]:
    """{(commit, suite): packs} of two or more benchmarks of one clean commit and suite."""
    groups: dict[tuple, list[Path]] = {}
    for p in PACKS:
        meta = json.loads((p / "pack.json").read_text(encoding="utf-8"))
        if meta["git"]["commit"] and not meta["git"]["dirty"] and any((p / "bench").glob("summary.json*")):
            groups.setdefault((meta["git"]["commit"], meta["options"].get("suite")), []).append(p)
    return {c: ps for c, ps in groups.items() if len(ps) >= 2}


def test_two_benchmarks_of_one_commit_agree():
    """Issue 6's stability bar on the committed data: >= 90% of rows SAME between two runs of one commit."""
    pairs = _bench_packs_by_commit()
    if not pairs:
        pytest.skip("no two reference packs with a benchmark of one clean commit and suite")
    for commit, (a, b, *_) in pairs.items():
        diff = compare.compare_rows(compare.load(a)["rows"], compare.load(b)["rows"])
        c = diff.counts
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
    if not full:
        pytest.skip("no complete full-suite reference pack (role FULL)")
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


SIGNERS = reference.SIGNERS


def test_the_roles_name_the_packs_they_describe():
    """tests/reference.py finds each role from the packs' pack.json; the packs it names are what the role says."""
    from evpack.cli import build_parser

    assert build_parser().parse_args(["evidence"]).suite == reference.DEFAULT_SUITE
    assert reference.COMPAT is not None and reference.info(reference.COMPAT).schema == 1
    assert not reference.info(reference.COMPAT).signed
    if reference.FULL:
        f = reference.info(reference.FULL)
        assert f.signed and f.suite == "full" and f.carried == 0
        assert f.schema == max(p.schema for p in reference.ALL if p.signed and p.suite == "full")
    if reference.DEFAULT:
        assert reference.info(reference.DEFAULT).suite == "quick" and not reference.info(reference.DEFAULT).carried
    if reference.INCREMENTAL:
        pj = reference.pack_json(reference.INCREMENTAL)
        assert pj["incremental"]["carried"], "INCREMENTAL carried nothing"
    assert all(reference.info(p).signed for p in reference.SIGNED_ALL)
    assert reference.SIGNED in (*reference.SIGNED_ALL, None)
    assert reference.UNSIGNED is None or not reference.info(reference.UNSIGNED).signed


NEWEST = reference.FULL
needs_full = reference.needs("FULL", "SIGNERS")


def _verify_cli(*args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "evpack", "verify", *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO)


@needs_full
def test_newest_reference_pack_is_signed_by_an_allowed_signer():
    """Issue 14's acceptance: the newest H200 pack passes --require-signature against the committed key."""
    import shutil

    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen (OpenSSH) is not installed: signatures cannot be checked here")
    ok = _verify_cli(str(NEWEST), "--allowed-signers", str(SIGNERS), "--require-signature")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # signed by the run (--sign-key) or after it (evpack sign): either names the signer first
    said = [line.split(" by ", 1)[1] for line in ok.stdout.splitlines()
            if line.startswith(("provenance: signed by ", "provenance: signed after the run by "))]
    assert len(said) == 1 and said[0].split()[0] in reference.signer_names(), ok.stdout


@needs_full
@reference.needs("UNSIGNED")
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
    old = _verify_cli(str(reference.UNSIGNED), "--allowed-signers", str(SIGNERS), "--require-signature")
    assert old.returncode == 1 and "MISMATCH signature: unsigned pack" in old.stdout


@needs_full
def test_newest_reference_pack_holds_the_evidence_the_issues_ask_for():
    pj = json.loads((NEWEST / "pack.json").read_text())
    assert pj["schema_version"] >= 2 and pj["label"] == "evidence:complete"
    comment = (NEWEST / "comment.md").read_text()
    assert len(comment) <= 10_000 and "evidence:complete" in comment
    ab = read_member_json(NEWEST / "bench", "ab.json")
    assert ab["status"] == "pass" and not ab["regressions"]
    assert ab["base_commit"] == pj["options"]["baseline"]["commit"] and ab["counts"]["SLOWER"] == 0
    canaries = json.loads((NEWEST / "canaries" / "outcome.json").read_text())["data"]["matrix"]
    assert len(canaries) >= 13 and all(c["caught"] for c in canaries)
