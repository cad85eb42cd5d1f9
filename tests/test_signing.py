"""Signed provenance with real OpenSSH `ssh-keygen -Y`: keys are generated here, into tmp_path.

Packs come from the real pipeline on the stand-in stages (tests/fakestages), signed by
`run_evidence(..., sign_key=...)`; one test signs a copy of the committed H200 reference pack.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import reference
from conftest import FAKE, GIT_AS_TESTER, REPO, copy_pack, fake_pack, run_cli, verify_fake

from evpack.pack import write_index
from evpack.provenance.attest import SigningFailed, collect_run_facts, tree_digest, write_provenance
from evpack.provenance.signing import SigningError, allowed_signers_line, load_signing_key, sign
from evpack.provenance.statement import PREDICATE_TYPE, STATEMENT_TYPE, parse_gpu_query
from evpack.reporting.write import write_reports
from evpack.stages.base import read_json, write_json
from evpack.verify import verify_pack, verify_provenance

REFERENCE = reference.COMPAT  # an older real H200 pack: schema 1, no provenance statement
needs_compat = reference.needs("COMPAT")


pytestmark = pytest.mark.usefixtures("needs_ssh_keygen")


def keygen(folder: Path, name: str, comment: str, passphrase: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    key = folder / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", comment, "-f", str(key)],
                   check=True, capture_output=True, stdin=subprocess.DEVNULL)
    return key


def allowed(folder: Path, entries: list[tuple[str, Path]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "allowed_signers"
    path.write_text("# principal namespaces=... key\n" + "".join(
        allowed_signers_line(who, load_signing_key(key).public_key) for who, key in entries))
    return path


@pytest.fixture
def keys(tmp_path):
    k = tmp_path / "keys"
    alice, mallory = keygen(k, "alice", "alice@example.org"), keygen(k, "mallory", "mallory@example.org")
    return {"alice": alice, "mallory": mallory, "allowed": allowed(k, [("alice@example.org", alice)])}


def make_pack(tmp_path, fake_env, sign_key: Path | None, plan: dict | None = None) -> Path:
    fake_env(plan or {})
    return fake_pack(tmp_path / "packs", sign_key=sign_key)


@pytest.fixture
def signed(tmp_path, fake_env, keys):
    return make_pack(tmp_path, fake_env, keys["alice"])


def problems_of(pack: Path, allowed_signers: Path | None, require: bool = True) -> list[str]:
    return verify_fake(pack) + list(verify_provenance(pack, allowed_signers=allowed_signers,
                                                      require_signature=require).problems)


def resign(pack: Path, statement: dict, key: Path) -> None:
    """A forger who holds `key`: rewrite provenance.json and sign it again."""
    data = (json.dumps(statement, indent=2) + "\n").encode()
    (pack / "provenance.json").write_bytes(data)
    (pack / "provenance.json.sig").write_bytes(sign(key, data))


def test_signed_pack_verifies_and_names_the_signer(signed, keys, fake_env):
    st = read_json(signed / "provenance.json")
    assert st["_type"] == STATEMENT_TYPE and st["predicateType"] == PREDICATE_TYPE
    names = {s["name"]: s["digest"]["sha256"] for s in st["subject"]}
    from evpack.binary import sha256_file

    assert names["index.json"] == sha256_file(signed / "index.json")
    assert names["python/evpack/_C.so"] == read_json(signed / "build" / "binary.json")["sha256"]
    assert [s["name"] for s in st["subject"]][0] == "index.json" and len(names) == len(st["subject"])
    listed = read_json(signed / "index.json")["files"]
    assert "provenance.json" not in listed and "provenance.json.sig" not in listed
    assert st["predicate"]["source"]["commit"] == read_json(signed / "pack.json")["git"]["commit"]
    assert "signed by `alice@example.org` with ED25519 key `SHA256:" in (signed / "report.md").read_text()
    proc = run_cli("verify", str(signed), "--allowed-signers", str(keys["allowed"]), "--require-signature",
                   env=fake_env({}))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "provenance: signed by alice@example.org (ED25519 key SHA256:" in proc.stdout
    assert proc.stdout.strip().endswith("verified")


def test_flipped_byte_fails_on_the_signature_or_the_hash(signed, keys, tmp_path):
    for rel, needle in (("provenance.json", "signature: not valid"), ("provenance.json.sig", "signature: "),
                        ("env.json", "hash mismatch: env.json")):
        pack = copy_pack(signed, tmp_path / f"flip-{rel}")
        p = pack / rel
        data = bytearray(p.read_bytes())
        data[len(data) // 2] ^= 0x01
        p.write_bytes(bytes(data))
        problems = problems_of(pack, keys["allowed"])
        assert any(needle in x for x in problems), (rel, problems)


def _forge_gpu(pack: Path, name: str = "NVIDIA B200") -> None:
    """Edit env.json, re-render the reports and re-hash index.json, as a forger would."""
    env = read_json(pack / "env.json")
    env["gpu_name"] = name
    write_json(pack / "env.json", env)
    write_reports(pack)
    write_index(pack)


def test_rehashed_forgery_fails_on_the_digest_then_on_the_signature(signed, keys, tmp_path, fake_env):
    pack = copy_pack(signed, tmp_path / "forged")
    _forge_gpu(pack)
    assert verify_pack(pack, stages=FAKE) == []  # self-consistent: only the statement (and its signature) tells
    problems = problems_of(pack, keys["allowed"])
    assert any(x.startswith("provenance digest: index.json has sha256") and "changed after the statement" in x
               for x in problems), problems
    proc = run_cli("verify", str(pack), "--allowed-signers", str(keys["allowed"]), "--require-signature",
                   env=fake_env({}))
    assert proc.returncode == 1 and "MISMATCH provenance digest: index.json" in proc.stdout
    # The forger also rewrites the statement (digest and GPU) but has no allowed key: the signature fails.
    st = read_json(pack / "provenance.json")
    from evpack.binary import sha256_file

    st["subject"][0]["digest"]["sha256"] = sha256_file(pack / "index.json")
    st["predicate"]["gpu"]["name"] = "NVIDIA B200"
    (pack / "provenance.json").write_text(json.dumps(st, indent=2) + "\n")
    problems = problems_of(pack, keys["allowed"])
    assert not any(x.startswith("provenance digest:") for x in problems), problems
    assert any(x.startswith("signature: not valid for provenance.json") for x in problems), problems


def test_wrong_signer_is_rejected(signed, keys, tmp_path):
    only_mallory = allowed(tmp_path / "m", [("alice@example.org", keys["mallory"])])
    problems = problems_of(signed, only_mallory)
    assert any(x.startswith("signature: not valid") and "is not in the allowed signers" in x for x in problems), \
        problems
    # Mallory re-signs alice's untouched statement with her own key.
    pack = copy_pack(signed, tmp_path / "resigned")
    resign(pack, read_json(pack / "provenance.json"), keys["mallory"])
    problems = problems_of(pack, keys["allowed"])
    assert any("is not in the allowed signers" in x for x in problems), problems
    both = allowed(tmp_path / "b", [("alice@example.org", keys["alice"]), ("mallory@example.org", keys["mallory"])])
    problems = problems_of(pack, both)
    assert any("signature: made with key" in x and "pack.json records key" in x for x in problems), problems


def test_signature_for_another_namespace_is_rejected(signed, keys, tmp_path):
    pack = copy_pack(signed, tmp_path / "ns")
    sig = subprocess.run(["ssh-keygen", "-Y", "sign", "-n", "git", "-f", str(keys["alice"])],
                         input=(pack / "provenance.json").read_bytes(), capture_output=True, check=True).stdout
    (pack / "provenance.json.sig").write_bytes(sig)
    assert any(x.startswith("signature: not valid") for x in problems_of(pack, keys["allowed"]))


def test_statement_whose_subject_digest_does_not_match(signed, keys, tmp_path):
    """Validly signed by an allowed key, yet it names another binary: the digest check catches it."""
    pack = copy_pack(signed, tmp_path / "subject")
    st = read_json(pack / "provenance.json")
    so = next(s for s in st["subject"] if s["name"] == "python/evpack/_C.so")
    so["digest"]["sha256"] = "cd" * 32
    resign(pack, st, keys["alice"])
    problems = problems_of(pack, keys["allowed"])
    assert any(x.startswith("provenance digest: python/evpack/_C.so has sha256 abababababab but the statement says cdcdcdcdcdcd")
               for x in problems), problems
    assert not any(x.startswith("signature:") for x in problems), problems


def test_statement_facts_must_match_the_pack(signed, keys, tmp_path):
    pack = copy_pack(signed, tmp_path / "facts")
    st = read_json(pack / "provenance.json")
    st["predicate"]["gpu"]["name"] = "NVIDIA B200"
    st["predicate"]["source"]["dirty"] = not st["predicate"]["source"]["dirty"]
    resign(pack, st, keys["alice"])
    problems = problems_of(pack, keys["allowed"])
    assert "provenance facts: the statement and the pack's files differ in gpu.name, source.dirty" in problems


def test_unsigned_pack_needs_no_key_but_fails_require_signature(tmp_path, fake_env, keys):
    pack = make_pack(tmp_path, fake_env, None)
    assert (pack / "provenance.json").is_file() and not (pack / "provenance.json.sig").exists()
    assert "- signature: unsigned" in (pack / "report.md").read_text()
    env = fake_env({})
    ok = run_cli("verify", str(pack), "--allowed-signers", str(keys["allowed"]), env=env)
    assert ok.returncode == 0 and "provenance: unsigned" in ok.stdout, ok.stdout + ok.stderr
    bad = run_cli("verify", str(pack), "--allowed-signers", str(keys["allowed"]), "--require-signature", env=env)
    assert bad.returncode == 1
    assert "MISMATCH signature: unsigned pack (no provenance.json.sig) and --require-signature was given" in bad.stdout


@needs_compat
def test_older_reference_pack_is_unsigned_and_rejected_only_when_a_signature_is_required(keys):
    ok = run_cli("verify", str(REFERENCE), timeout=300)
    assert ok.returncode == 0 and "provenance: unsigned (no provenance statement)" in ok.stdout
    bad = run_cli("verify", str(REFERENCE), "--allowed-signers", str(keys["allowed"]), "--require-signature",
                  timeout=300)
    assert bad.returncode == 1 and "MISMATCH signature: unsigned pack" in bad.stdout


@needs_compat
def test_signed_copy_of_the_reference_pack_and_its_forgery(tmp_path, keys):
    """A real H200 pack (two shared objects, bench clocks) signed by a test helper, then forged."""
    pack = copy_pack(REFERENCE, tmp_path / "ref")
    signer = load_signing_key(keys["alice"])
    pj = read_json(pack / "pack.json")
    pj["signing"] = signer.record()
    write_json(pack / "pack.json", pj)
    write_reports(pack)
    write_index(pack)
    assert write_provenance(pack, collect_run_facts(REPO), signer) is None
    st = read_json(pack / "provenance.json")
    assert [s["name"] for s in st["subject"]] == ["index.json", "python/evpack/_C.cpython-312-x86_64-linux-gnu.so",
                                                   "python/evpack/_canaries.cpython-312-x86_64-linux-gnu.so"]
    assert st["predicate"]["bench_clocks"]["before"]["sm_mhz"] == 1980
    assert st["predicate"]["gpu"]["name"] == "NVIDIA H200"
    good = run_cli("verify", str(pack), "--allowed-signers", str(keys["allowed"]), "--require-signature",
                   timeout=300)
    assert good.returncode == 0 and "provenance: signed by alice@example.org" in good.stdout, good.stdout
    _forge_gpu(pack)
    bad = run_cli("verify", str(pack), "--allowed-signers", str(keys["allowed"]), "--require-signature",
                  timeout=300)
    assert bad.returncode == 1 and "MISMATCH provenance digest: index.json" in bad.stdout, bad.stdout
    assert "MISMATCH provenance facts: the statement and the pack's files differ in gpu.name" in bad.stdout


def test_failed_signing_keeps_the_evidence_unsigned(tmp_path, fake_env, keys, monkeypatch):
    def broken(key, data):
        raise SigningError("ssh-keygen -Y sign failed: simulated")

    monkeypatch.setattr("evpack.provenance.attest.sign", broken)
    with pytest.raises(SigningFailed) as exc:
        make_pack(tmp_path, fake_env, keys["alice"])
    pack = exc.value.pack
    assert "signing failed" in str(exc.value) and str(pack) in str(exc.value)
    assert pack.is_dir() and not pack.name.startswith(".incomplete-")
    assert (pack / "provenance.json").is_file() and not (pack / "provenance.json.sig").exists()
    assert verify_pack(pack, stages=FAKE) == []  # every evidence file is there, as written
    problems = problems_of(pack, keys["allowed"], require=False)
    assert any(x.startswith("signature: pack.json records signing with key SHA256:") for x in problems), problems


def test_removed_signature_is_noticed(signed, keys, tmp_path):
    pack = copy_pack(signed, tmp_path / "stripped")
    (pack / "provenance.json.sig").unlink()
    assert any("there is no provenance.json.sig" in x for x in problems_of(pack, keys["allowed"], require=False))


def test_extra_unlisted_file_is_still_rejected(signed, tmp_path):
    pack = copy_pack(signed, tmp_path / "extra")
    (pack / "provenance.json.bak").write_text("x")
    (pack / "build" / "provenance.json").write_text("{}")
    problems = verify_fake(pack)
    assert "file not in index.json: provenance.json.bak" in problems
    assert "file not in index.json: build/provenance.json" in problems


def _one_line_error(proc, needle):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0], proc.stderr


def test_bad_signing_input_is_one_line_and_writes_nothing(tmp_path, fake_env, keys):
    env = fake_env({})
    packs = tmp_path / "out"
    locked = keygen(tmp_path / "k2", "locked", "locked@example.org", passphrase="secret words")
    cases = [
        (tmp_path / "nope", "signing key", "no such file"),
        (Path(str(keys["alice"]) + ".pub"), "has no private part (a public key)", "give the private key file"),
        (locked, "is passphrase-protected", "without a passphrase"),
    ]
    for key, needle, more in cases:
        proc = run_cli("evidence", "--packs-dir", str(packs), "--sign-key", str(key), env=env)
        _one_line_error(proc, needle)
        assert more in proc.stderr
    open_perms = tmp_path / "k3" / "open"
    shutil.copytree(keys["alice"].parent, open_perms.parent)
    (open_perms.parent / "alice").chmod(0o644)
    _one_line_error(run_cli("evidence", "--packs-dir", str(packs), env=dict(
        env, EVPACK_SIGNING_KEY=str(open_perms.parent / "alice"))), "permissions too open")
    assert not packs.exists() or not any(packs.iterdir())


def test_ssh_keygen_absent_is_a_clear_error(tmp_path, fake_env, keys):
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "git").symlink_to(shutil.which("git"))
    env = dict(fake_env({}), PATH=str(bare))
    _one_line_error(run_cli("evidence", "--packs-dir", str(tmp_path / "out"), "--sign-key", str(keys["alice"]),
                            env=env), "ssh-keygen not found on PATH")


def test_bad_verify_options(signed, tmp_path, keys):
    _one_line_error(run_cli("verify", str(signed), "--require-signature"), "needs --allowed-signers")
    _one_line_error(run_cli("verify", str(signed), "--allowed-signers", str(tmp_path / "none")), "no such file")
    _one_line_error(run_cli("verify", str(signed), "--allowed-signers", str(tmp_path)), "not a regular file")
    empty = tmp_path / "empty_signers"
    empty.write_text("# nobody\n")
    _one_line_error(run_cli("verify", str(signed), "--allowed-signers", str(empty)), "holds no signer line")


def test_signing_key_from_the_environment(tmp_path, fake_env, keys):
    env = dict(fake_env({}), EVPACK_SIGNING_KEY=str(keys["alice"]))
    proc = run_cli("evidence", "--packs-dir", str(tmp_path / "out"), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pack = (tmp_path / "out" / "latest").resolve()
    assert (pack / "provenance.json.sig").is_file()
    assert read_json(pack / "pack.json")["signing"]["key_comment"] == "alice@example.org"


def test_ci_identity_and_command_are_recorded(tmp_path, fake_env, keys, monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_REPOSITORY", "octo/evidence-pack")
    monkeypatch.setenv("GITHUB_RUN_ID", "123456")
    monkeypatch.setenv("GITHUB_WORKFLOW_REF", "octo/evidence-pack/.github/workflows/evidence.yml@refs/pull/7/merge")
    monkeypatch.setenv("RUNNER_NAME", "gpu-runner-1")
    pred = read_json(make_pack(tmp_path, fake_env, keys["alice"]) / "provenance.json")["predicate"]
    assert pred["ci"]["system"] == "github-actions"
    assert pred["ci"]["variables"]["GITHUB_RUN_ID"] == "123456"
    assert pred["ci"]["variables"]["RUNNER_NAME"] == "gpu-runner-1"
    assert pred["invocation"]["command"] and pred["invocation"]["options"] == {}


def test_tree_digest_is_the_documented_shell_pipeline():
    """sha256 of `git ls-files -z | xargs -0 sha256sum` over the working tree."""
    ours = tree_digest(REPO)
    if ours["missing"]:
        pytest.skip(f"tracked files deleted in this checkout: {ours['missing'][:3]}")
    shell = subprocess.run("git ls-files -z | xargs -0 sha256sum | sha256sum", shell=True, cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()[0]
    assert ours["sha256"] == shell and ours["error"] is None and ours["files"] > 100


def test_tree_digest_sees_working_tree_edits(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = list(GIT_AS_TESTER)
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    (repo / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "a.txt"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a"], cwd=repo, check=True)
    first = tree_digest(repo)
    (repo / "a.txt").write_text("two\n")
    (repo / "untracked.txt").write_text("not part of the tree\n")
    second = tree_digest(repo)
    assert first["files"] == second["files"] == 1 and first["sha256"] != second["sha256"]
    (repo / "a.txt").unlink()
    assert tree_digest(repo)["missing"] == ["a.txt"]


def test_gpu_query_parser_on_real_nvidia_smi_output():
    text = (REPO / "tests" / "fixtures" / "nvidia-smi" / "query-gpu-h100.csv").read_text()
    assert parse_gpu_query(text) == [{"index": 0, "name": "NVIDIA H100 80GB HBM3",
                                      "uuid": "GPU-74da891c-04b6-58bb-58cd-08d4ac45b3b5", "driver": "580.159.04"}]
    assert parse_gpu_query("No devices were found\n") == []


# --- `sign`: a signature added after the run (the CI's signing job), and `label` requiring a signer ------

def test_sign_adds_a_signature_to_a_verified_unsigned_pack(tmp_path, fake_env, keys):
    pack = make_pack(tmp_path, fake_env, None)
    env = fake_env({})
    before = {p: p.read_bytes() for p in pack.rglob("*") if p.is_file()}
    proc = run_cli("sign", str(pack), "--key", str(keys["alice"]), "--allowed-signers", str(keys["allowed"]),
                   env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "signed after the run by alice@example.org" in proc.stdout
    after = {p: p.read_bytes() for p in pack.rglob("*") if p.is_file()}
    assert set(after) - set(before) == {pack / "provenance.json.sig"}  # only the signature was added
    assert all(after[p] == before[p] for p in before)
    ok = run_cli("verify", str(pack), "--allowed-signers", str(keys["allowed"]), "--require-signature", env=env)
    assert ok.returncode == 0 and "provenance: signed after the run by alice@example.org" in ok.stdout, ok.stdout
    again = run_cli("sign", str(pack), "--key", str(keys["alice"]), env=env)
    assert again.returncode == 2 and "already holds provenance.json.sig" in again.stderr


def test_sign_refuses_a_pack_that_does_not_verify(tmp_path, fake_env, keys):
    pack = make_pack(tmp_path, fake_env, None)
    _forge_gpu(pack)
    (pack / "env.json").write_text((pack / "env.json").read_text() + " ")
    proc = run_cli("sign", str(pack), "--key", str(keys["alice"]), env=fake_env({}))
    assert proc.returncode == 1 and "does not verify" in proc.stderr and "it is not signed" in proc.stderr
    assert not (pack / "provenance.json.sig").exists()


def test_sign_with_a_key_that_is_not_allowed_leaves_no_signature(tmp_path, fake_env, keys):
    pack = make_pack(tmp_path, fake_env, None)
    proc = run_cli("sign", str(pack), "--key", str(keys["mallory"]), "--allowed-signers", str(keys["allowed"]),
                   env=fake_env({}))
    assert proc.returncode == 1 and "removed again" in proc.stderr, proc.stdout + proc.stderr
    assert not (pack / "provenance.json.sig").exists()


@needs_compat
def test_sign_refuses_bad_input_with_one_line(tmp_path, fake_env, keys):
    pack = make_pack(tmp_path, fake_env, None)
    env = fake_env({})
    for args, needle in (([str(pack), "--key", str(tmp_path / "nokey")], "no such file"),
                         ([str(REFERENCE), "--key", str(keys["alice"])], "no provenance.json"),
                         ([str(tmp_path / "nopack"), "--key", str(keys["alice"])], "no such pack")):
        proc = run_cli("sign", *args, env=env, timeout=300)
        assert proc.returncode == 2 and needle in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_run_signed_pack_whose_signature_is_replaced_by_another_key_fails(signed, keys, tmp_path, fake_env):
    """pack.json records the run's key: a signature by another (even allowed) key does not stand in for it."""
    pack = copy_pack(signed, tmp_path / "swap")
    (pack / "provenance.json.sig").unlink()
    both = allowed(tmp_path / "both", [("alice@example.org", keys["alice"]), ("mallory@example.org", keys["mallory"])])
    proc = run_cli("sign", str(pack), "--key", str(keys["mallory"]), "--allowed-signers", str(both),
                   env=fake_env({}))
    assert proc.returncode == 1 and "pack.json records signing with key" in proc.stderr, proc.stderr
    assert not (pack / "provenance.json.sig").exists()
    (pack / "provenance.json.sig").write_bytes(sign(keys["mallory"], (pack / "provenance.json").read_bytes()))
    problems = problems_of(pack, both)
    assert any("but pack.json records key" in p for p in problems), problems


def test_label_can_require_a_signer(tmp_path, fake_env, keys, signed):
    env = fake_env({})
    unsigned = make_pack(tmp_path / "u", fake_env, None)
    bad = run_cli("label", str(unsigned), "--allowed-signers", str(keys["allowed"]), "--require-signature", env=env)
    assert bad.returncode == 1 and "unsigned pack" in bad.stderr and not bad.stdout.strip()
    ok = run_cli("label", str(signed), "--allowed-signers", str(keys["allowed"]), "--require-signature",
                 "--format", "json", env=env)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["signer"] == "alice@example.org"
    assert "provenance: signed by alice@example.org" in ok.stderr
    usage = run_cli("label", str(signed), "--require-signature", env=env)
    assert usage.returncode == 2 and "needs --allowed-signers" in usage.stderr
