"""Merged verdicts (`merge PACK... --out DIR`, `verify DIR`): several GPUs' packs of one commit, one label.

Members are made by the real pipeline on the stand-in stages (tests/fakestages). Each gets a stand-in
GPU identity through the pipeline's own collectors (env.json's and the provenance statement's GPU
records), patched for the run: no tool output is typed here. Signing keys come from ssh-keygen, as in
tests/test_signing.py.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import reference
from conftest import GIT_AS_TESTER, REPO, copy_pack, fake_pack, run_cli
from ssh_helpers import missing
from test_signing import allowed, keygen

from evpack import envlock
from evpack.binary import sha256_file
from evpack.jsonio import read_json, write_json
from evpack.labels import COMPLETE, FAILED, PARTIAL, merged_label, merged_labels
from evpack.merge.record import device_used
from evpack.model import GATE_OF_STAGE
from evpack.reporting.common import MARKER

# name, UUID, compute capability: stand-ins, written into each pack through the collectors
GPUS = {
    "alpha": ("Stand-in GPU Alpha", "GPU-00000000-0000-4000-8000-00000000a1fa", "9.0"),
    "beta": ("Stand-in GPU Beta", "GPU-00000000-0000-4000-8000-00000000be7a", "10.0"),
}
SAME_COMMIT = reference.SAME_COMMIT_V1[:2]  # two schema-1 H200 packs of commit b40b5c2, while they are committed


@pytest.fixture
def member(tmp_path, fake_env, monkeypatch):
    """make(gpu, plan, sign_key, repo) -> a finished pack under tmp_path/packs made on that stand-in GPU."""
    real_env = envlock.collect_env

    def make(gpu: str = "alpha", plan: dict | None = None, sign_key: Path | None = None, repo: Path = REPO) -> Path:
        name, uuid, cc = GPUS[gpu]
        monkeypatch.setattr("evpack.evidence.collect_env", lambda r: dict(
            real_env(r), gpu_name=name, compute_capability=cc, driver_version="580.0"))
        monkeypatch.setattr("evpack.provenance.attest.gpu_devices", lambda: {
            "source": "nvidia-smi", "visible": None, "error": None,
            "devices": [{"index": 0, "name": name, "uuid": uuid, "driver": "580.0"}]})
        fake_env(plan or {})
        return fake_pack(tmp_path / "packs", sign_key=sign_key, repo=repo)

    return make


@pytest.fixture
def env(fake_env):
    return fake_env({})


def hashes(*folders: Path) -> dict[str, str]:
    return {str(p): sha256_file(p) for f in folders for p in sorted(f.rglob("*")) if p.is_file()}


def merge(env, *args: str):
    return run_cli("merge", *map(str, args), env=env)


def one_line_error(proc, needle: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0], proc.stderr


def with_keys(tmp_path) -> dict:
    if shutil.which("ssh-keygen") is None:
        missing("ssh-keygen not found on PATH (OpenSSH client): the signature tests need the real tool")
    k = tmp_path / "keys"
    alice, mallory = keygen(k, "alice", "alice@example.org"), keygen(k, "mallory", "mallory@example.org")
    return {"alice": alice, "mallory": mallory, "allowed": allowed(k, [("alice@example.org", alice)])}


# ------------------------------------------------------------------------------------------ the rule
def test_label_rule():
    assert merged_label([COMPLETE, COMPLETE]) == COMPLETE
    assert merged_label([COMPLETE, PARTIAL]) == PARTIAL
    assert merged_label([PARTIAL, FAILED, COMPLETE]) == FAILED
    assert merged_label([COMPLETE, COMPLETE], [True, False]) == PARTIAL  # signatures checked: one not verified
    assert merged_label([COMPLETE, COMPLETE], [True, True]) == COMPLETE
    assert merged_label([FAILED], [True]) == FAILED
    assert merged_label([]) == FAILED and merged_label(["evidence:perfect"]) == FAILED
    both = ["tensor-cores-verified", "resources-clean"]
    assert merged_labels([[COMPLETE, *both, "perf-regression"], [COMPLETE, "tensor-cores-verified"]], COMPLETE) == [
        COMPLETE, "tensor-cores-verified", "perf-regression"]


def test_the_device_the_stages_used():
    devs = [{"index": 0, "name": "A", "uuid": "GPU-aa11"}, {"index": 1, "name": "B", "uuid": "GPU-bb22"}]
    assert device_used(devs, None)["name"] == "A"
    assert device_used(devs, "1,0")["name"] == "B"
    assert device_used(devs, "GPU-bb")["name"] == "B"  # CUDA accepts a UUID prefix
    assert device_used(devs, "7") is None and device_used([], None) is None


# ------------------------------------------------------------------------------ merge, verify, label
def test_three_packs_on_two_gpu_types_merge_and_verify(member, env, tmp_path):
    a, b, c = member("alpha"), member("beta"), member("alpha")
    before = hashes(a, b, c)
    out = tmp_path / "out" / "verdict"
    proc = merge(env, a, b, c, "--out", out, "--require")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"WROTE {out}" in proc.stdout and "requirement complete: met by evidence:complete" in proc.stdout
    assert hashes(a, b, c) == before  # the members are only read

    rec = read_json(out / "merged.json")
    assert (rec["kind"], rec["schema"], rec["label"]) == ("evpack-merged-verdict", 1, COMPLETE)
    assert rec["labels"][0] == COMPLETE and "tensor-cores-verified" in rec["labels"]
    assert [(t["name"], t["members"]) for t in rec["gpu_types"]] == [
        (GPUS["alpha"][0], [a.name, c.name]), (GPUS["beta"][0], [b.name])]
    for m, pack, gpu in zip(rec["members"], (a, b, c), ("alpha", "beta", "alpha"), strict=True):
        assert m["pack_id"] == pack.name and m["label"] == COMPLETE
        assert (m["gpu"]["name"], m["gpu"]["uuid"], m["gpu"]["compute_capability"]) == GPUS[gpu]
        assert m["source"]["commit"] == read_json(pack / "pack.json")["git"]["commit"]
        assert m["signature"]["state"] == "unsigned"
        assert m["digests"]["index.json"] == sha256_file(pack / "index.json")
        assert m["digests"]["pack.json"] == sha256_file(pack / "pack.json")
        assert m["digests"]["provenance.json"] == sha256_file(pack / "provenance.json")
        copied = out / "members" / pack.name
        assert hashes(copied) == {k.replace(str(pack), str(copied)): v for k, v in hashes(pack).items()}
    assert sorted(read_json(out / "index.json")["files"]) == ["comment.md", "merged.json", "report.md"]

    report = (out / "report.md").read_text()
    header = next(line for line in report.splitlines() if line.startswith("|  |"))
    assert header == f"|  | {GPUS['alpha'][0]} #1 | {GPUS['beta'][0]} | {GPUS['alpha'][0]} #2 |"
    assert f"| GPU UUID | {GPUS['alpha'][1]} | {GPUS['beta'][1]} | {GPUS['alpha'][1]} |" in report
    assert "| gate correctness | PASS | PASS | PASS |" in report
    comment = (out / "comment.md").read_text()
    assert comment.startswith(MARKER + "\n# Evidence on 3 GPUs, one commit: **evidence:complete**")
    assert "Every gate passed on every GPU." in comment

    ok = run_cli("verify", str(out), env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.strip().endswith("verified (merged verdict of 3 pack(s): evidence:complete)")
    labels = run_cli("label", str(out), "--format", "json", env=env)
    assert labels.returncode == 0, labels.stderr
    assert json.loads(labels.stdout)["label"] == COMPLETE


@pytest.mark.parametrize("plans,label,require_partial", [
    (({}, {"sanitize": "skipped"}), PARTIAL, 0),
    (({}, {"correctness": "fail"}), FAILED, 1),
    (({"bench": "skipped"}, {"sanitize": "skipped"}), PARTIAL, 0),
])
def test_one_member_short_of_complete_decides_the_label(member, env, tmp_path, plans, label, require_partial):
    a, b = member("alpha", plans[0]), member("beta", plans[1])
    out = tmp_path / "verdict"
    no_require = merge(env, a, b, "--out", out)
    assert no_require.returncode == 0, no_require.stdout + no_require.stderr  # written: no requirement asked
    assert read_json(out / "merged.json")["label"] == label
    assert merge(env, a, b, "--out", out, "--force", "--require", "complete").returncode == 1
    assert merge(env, a, b, "--out", out, "--force", "--require", "partial").returncode == require_partial
    gates = read_json(out / "merged.json")["gates"]
    for stage, status in (*plans[0].items(), *plans[1].items()):  # each gate: its worst status over the members
        assert gates[GATE_OF_STAGE[stage]] == status
    assert run_cli("verify", str(out), env=env).returncode == 0


def test_signatures_against_allowed_signers(member, env, tmp_path):
    keys = with_keys(tmp_path)
    signed, unsigned, other = member("alpha", sign_key=keys["alice"]), member("beta"), member(
        "beta", sign_key=keys["mallory"])
    out = tmp_path / "verdict"
    # Without --allowed-signers a signature does not matter to the label.
    assert merge(env, signed, unsigned, "--out", out, "--require").returncode == 0
    assert [m["signature"]["state"] for m in read_json(out / "merged.json")["members"]] == ["unchecked", "unsigned"]
    # With it, an unsigned member keeps the verdict from complete.
    proc = merge(env, signed, unsigned, "--out", out, "--force", "--allowed-signers", keys["allowed"], "--require")
    assert proc.returncode == 1 and "requirement complete: NOT met by evidence:partial" in proc.stdout, proc.stdout
    rec = read_json(out / "merged.json")
    assert rec["rule"]["signatures_checked"] is True and rec["label"] == PARTIAL
    assert rec["members"][0]["signature"]["state"] == "verified"
    assert rec["members"][0]["signature"]["principal"] == "alice@example.org"
    assert rec["members"][1]["signature"]["state"] == "unsigned"
    assert "verified (`alice@example.org`)" in (out / "report.md").read_text()
    good = run_cli("verify", str(out), "--allowed-signers", str(keys["allowed"]), env=env)
    assert good.returncode == 0 and "provenance signed by alice@example.org" in good.stdout, good.stdout
    bare = run_cli("verify", str(out), env=env)  # the signers are not re-checked, the signatures are
    assert bare.returncode == 0 and "signers are taken as merged.json states them" in bare.stdout, bare.stdout
    # --require-signature refuses the unsigned member; a signer not in the file is refused too.
    refused = tmp_path / "refused"
    one_line_error(merge(env, signed, unsigned, "--out", refused, "--allowed-signers", keys["allowed"],
                         "--require-signature"), f"member {unsigned} does not verify")
    one_line_error(merge(env, signed, other, "--out", refused, "--allowed-signers", keys["allowed"]),
                   "is not in the allowed signers")
    one_line_error(merge(env, signed, "--out", refused, "--require-signature"), "needs --allowed-signers")
    assert not refused.exists()


def test_all_members_signed_by_allowed_keys_is_complete(member, env, tmp_path):
    keys = with_keys(tmp_path)
    a, b = member("alpha", sign_key=keys["alice"]), member("beta", sign_key=keys["alice"])
    out = tmp_path / "verdict"
    proc = merge(env, a, b, "--out", out, "--allowed-signers", keys["allowed"], "--require-signature", "--require")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert read_json(out / "merged.json")["label"] == COMPLETE
    assert run_cli("verify", str(out), "--allowed-signers", str(keys["allowed"]), "--require-signature",
                   env=env).returncode == 0


# ----------------------------------------------------------------------------------------- tampering
@pytest.fixture
def verdict(member, env, tmp_path) -> Path:
    a, b = member("alpha"), member("beta", {"sanitize": "skipped"})
    out = tmp_path / "verdict"
    assert merge(env, a, b, "--out", out).returncode == 0
    return out


def _mismatches(folder: Path, env) -> list[str]:
    proc = run_cli("verify", str(folder), env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return [line for line in proc.stdout.splitlines() if line.startswith("MISMATCH ")]


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _rehash(folder: Path) -> None:
    """A forger's last step: index.json made to match the edited files."""
    idx = read_json(folder / "index.json")
    idx["files"] = {f: sha256_file(folder / f) for f in idx["files"]}
    write_json(folder / "index.json", idx)


def test_a_changed_member_file_fails_verify(verdict, env, tmp_path):
    rec = read_json(verdict / "merged.json")
    first = rec["members"][0]["pack_id"]
    copy = tmp_path / "t1" / "verdict"
    shutil.copytree(verdict, copy)
    _flip(copy / "members" / first / "env.json")
    assert f"MISMATCH member {first}: hash mismatch: env.json" in _mismatches(copy, env)
    copy = tmp_path / "t2" / "verdict"
    shutil.copytree(verdict, copy)
    (copy / "members" / first / "provenance.json").write_text("{}\n")
    found = _mismatches(copy, env)
    assert any(m.startswith(f"MISMATCH members[0] ({first}).digests.provenance.json") for m in found), found


def test_a_changed_merged_json_fails_verify_even_rehashed(verdict, env, tmp_path):
    copy = tmp_path / "t" / "verdict"
    shutil.copytree(verdict, copy)
    rec = read_json(copy / "merged.json")
    assert rec["label"] == PARTIAL
    rec["label"], rec["labels"] = COMPLETE, [COMPLETE]
    rec["members"][1]["label"] = COMPLETE
    write_json(copy / "merged.json", rec)
    found = _mismatches(copy, env)
    assert "MISMATCH hash mismatch: merged.json" in found
    _rehash(copy)
    found = _mismatches(copy, env)
    assert "MISMATCH hash mismatch: merged.json" not in found
    assert any(m.startswith("MISMATCH label: merged.json says 'evidence:complete' but the files give "
                            "'evidence:partial'") for m in found), found
    assert any(m.startswith(f"MISMATCH members[1] ({rec['members'][1]['pack_id']}).label") for m in found), found


def test_members_folder_holds_exactly_the_members(verdict, env, tmp_path):
    copy = tmp_path / "t" / "verdict"
    shutil.copytree(verdict, copy)
    gone = read_json(copy / "merged.json")["members"][1]["pack_id"]
    shutil.rmtree(copy / "members" / gone)
    (copy / "members" / "stray").mkdir()
    (copy / "notes.txt").write_text("not in the index\n")
    found = _mismatches(copy, env)
    assert f"MISMATCH members/{gone}: missing (merged.json names it as a member)" in found
    assert "MISMATCH members/stray: not a member named by merged.json" in found
    assert "MISMATCH file not in index.json: notes.txt" in found


# ---------------------------------------------------------------------------------------- bad input
def _other_commit_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "other-repo"
    repo.mkdir()
    git = list(GIT_AS_TESTER)
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    (repo / "kernel.cu").write_text("// another commit\n")
    subprocess.run([*git, "add", "kernel.cu"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "other"], cwd=repo, check=True)
    return repo


def test_bad_input_is_refused_and_nothing_changes(member, env, tmp_path):
    a, b = member("alpha"), member("beta")
    other = member("beta", repo=_other_commit_repo(tmp_path))
    broken = copy_pack(b, tmp_path / "broken")
    _flip(broken / "env.json")
    twin = copy_pack(a, tmp_path / "twin")
    not_a_pack = tmp_path / "empty"
    not_a_pack.mkdir()
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("mine\n")
    before = hashes(a, b, other, broken, twin, existing)
    out = tmp_path / "out"
    cases = [
        ((a, other, "--out", out), "members come from different commits"),
        ((a, broken, "--out", out), f"member {broken} does not verify"),
        ((a, not_a_pack, "--out", out), "no index.json: not a finished pack"),
        ((a, existing / "keep.txt", "--out", out), "not a pack folder"),
        ((a, a, "--out", out), f"pack {a.name} is given twice (the same folder)"),
        ((a, twin, "--out", out), f"pack {a.name} is given twice"),
        ((a, b, "--out", existing), "already exists; pass --force"),
        ((a, b, "--out", existing, "--force"), "neither a merged verdict"),
        ((a, b, "--out", a / "merged"), f"is inside the member pack {a}"),
        ((a, b, "--out", a), f"is inside the member pack {a}"),
        ((a, b, "--out", a.parent), f"holds the member pack {a}"),
        ((a, b, "--out", tmp_path / "packs" / "elsewhere"), "under the packs folder"),
    ]
    for args, needle in cases:
        one_line_error(merge(env, *args), needle)
        assert not out.exists(), args
    assert hashes(a, b, other, broken, twin, existing) == before
    assert not [p for p in tmp_path.rglob(".incomplete-merge-*")]


def test_members_of_one_commit_with_other_uncommitted_changes_are_refused(member, env, tmp_path, monkeypatch):
    from evpack.provenance import attest

    a = member("alpha")
    real = attest.tree_digest
    monkeypatch.setattr("evpack.provenance.attest.tree_digest", lambda repo: dict(real(repo), sha256="0" * 64))
    b = member("beta")
    assert read_json(a / "pack.json")["git"]["commit"] == read_json(b / "pack.json")["git"]["commit"]
    one_line_error(merge(env, a, b, "--out", tmp_path / "out"), "members come from different source trees")
    assert not (tmp_path / "out").exists()


def test_a_merged_verdict_is_not_a_member_and_force_replaces_only_a_verdict(verdict, member, env, tmp_path):
    one_line_error(merge(env, verdict, "--out", tmp_path / "again"), "a merged verdict, not a pack")
    rec = read_json(verdict / "merged.json")
    members = [verdict / "members" / m["pack_id"] for m in rec["members"]]
    # A verdict's copied members merge again (they are packs), and --force replaces the old verdict.
    first = tmp_path / "packs" / rec["members"][0]["pack_id"]
    out = tmp_path / "second"
    assert merge(env, first, "--out", out).returncode == 0
    proc = merge(env, *members, "--out", out, "--force")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(read_json(out / "merged.json")["members"]) == 2
    assert run_cli("verify", str(out), env=env).returncode == 0


# ---------------------------------------------------------------------------- real packs, bare Python
@pytest.mark.parametrize("pack", reference.param(("COMPAT", reference.COMPAT), ("FULL", reference.FULL)))
def test_a_real_pack_merged_alone(tmp_path, pack):
    """A real H200 pack as the one member of a merged verdict: its label, GPU and id, and the verdict verifies."""
    out = tmp_path / "verdict"
    proc = run_cli("merge", str(pack), "--out", str(out), "--require", "partial", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rec = read_json(out / "merged.json")
    pj, env = read_json(pack / "pack.json"), read_json(pack / "env.json")
    assert rec["label"] == pj["label"] and [t["name"] for t in rec["gpu_types"]] == [env["gpu_name"]]
    assert [m["pack_id"] for m in rec["members"]] == [pack.name]
    ok = run_cli("verify", str(out), timeout=300)
    assert ok.returncode == 0, ok.stdout


@pytest.mark.skipif(len(SAME_COMMIT) < 2, reason="needs two schema-1 reference packs of one commit (SAME_COMMIT_V1)")
def test_the_two_reference_packs_of_one_commit(tmp_path):
    """Two real H200 packs of commit b40b5c2 (one complete, one partial): real headline numbers."""
    out = tmp_path / "verdict"
    proc = run_cli("merge", *map(str, SAME_COMMIT), "--out", str(out), "--require", "partial", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rec = read_json(out / "merged.json")
    assert rec["label"] == PARTIAL and [t["name"] for t in rec["gpu_types"]] == ["NVIDIA H200"]
    first = rec["members"][0]
    assert first["headline"]["best of ours"] == "mma/m64n64w4s2"
    assert first["headline"]["speedup vs SDPA default"] == pytest.approx(0.7309, abs=1e-4)
    assert first["gpu"]["uuid"] is None and first["gpu"]["devices_from"] is None  # packs before provenance
    report = (out / "report.md").read_text()
    assert "|  | NVIDIA H200 #1 | NVIDIA H200 #2 |" in report and "| speedup vs SDPA default | 0.73 | 0.73 |" in report
    ok = run_cli("verify", str(out), timeout=300)
    assert ok.returncode == 0, ok.stdout


def test_merge_and_its_check_run_on_a_bare_python():
    """The CI merge job runs on a runner's Python without the package's dependencies."""
    code = ("import sys, evpack.merge.verdict, evpack.merge.verify, evpack.merge.cli, evpack.cli\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "{'torch','numpy','pandas','matplotlib','jinja2','markdown_it','scipy'})\n"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(REPO / "python")))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
