"""What the commands write outside a pack: one clear line and exit 2 for an output that cannot be used,
nothing replaced without --force, never a file inside a pack, a merged verdict or a packs folder, no
stray temp file, no partial set; and a write never follows a link planted at its temporary name."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import reference
from conftest import REPO, TESTS, fake_pack, run_cli


def _snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(proc, needle: str = "") -> None:
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0], proc.stderr
    assert "internal error" not in proc.stderr, proc.stderr


@pytest.fixture
def pack(tmp_path, fake_env):
    fake_env({})
    return fake_pack(tmp_path / "packs")


def _ref() -> str:
    return reference.skip_unless(reference.FULL, "FULL").name


def _key(folder):
    key = folder / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


# ---- atomic writes: a link planted at a temporary name is never followed ----------------------------

def test_env_never_writes_through_a_planted_temp_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file\n")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(victim, out / ".env.json.tmp")
    assert run_cli("env", "--out-dir", str(out)).returncode == 0
    assert victim.read_text() == "someone else's file\n"
    assert (out / "env.json").is_file() and not (out / "env.json").is_symlink()


def test_report_never_writes_into_a_pack_through_a_planted_temp_link(tmp_path, pack, fake_env):
    before = _snapshot(pack)
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(pack / "env.json", out / ".report.md.tmp")
    assert run_cli("report", str(pack), "--out", str(out), env=fake_env({})).returncode == 0
    assert _snapshot(pack) == before
    assert sorted(p.name for p in out.iterdir()) == [".report.md.tmp", "comment.md", "report.html", "report.md"]


# ---- merge --force ------------------------------------------------------------------------------------

def test_merge_force_replaces_only_a_merged_verdict(tmp_path, pack, fake_env):
    env = fake_env({})
    proj = tmp_path / "project"
    (proj / "src").mkdir(parents=True)
    (proj / "merged.json").write_text('{"my": "config"}\n')
    (proj / "src" / "thesis.txt").write_text("months of work\n")
    _refused(run_cli("merge", str(pack), "--out", str(proj), "--force", env=env), "neither a merged verdict")
    assert (proj / "src" / "thesis.txt").is_file()
    verdict = tmp_path / "verdict"
    assert run_cli("merge", str(pack), "--out", str(verdict), env=env).returncode == 0
    (verdict / "notes.txt").write_text("mine\n")  # a verdict that holds something else is not replaced
    _refused(run_cli("merge", str(pack), "--out", str(verdict), "--force", env=env), "notes.txt")
    (verdict / "notes.txt").unlink()
    assert run_cli("merge", str(pack), "--out", str(verdict), "--force", env=env).returncode == 0


# ---- label --format github ------------------------------------------------------------------------------

@pytest.mark.parametrize("var", ["GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY"])
def test_label_never_appends_into_a_pack(pack, fake_env, var):
    before = _snapshot(pack)
    proc = run_cli("label", str(pack), "--format", "github", env=dict(fake_env({}), **{var: str(pack / "report.md")}))
    assert _snapshot(pack) == before
    _refused(proc, f"${var}")


def test_label_writes_no_step_output_when_the_other_cannot_be_written(tmp_path, pack, fake_env):
    out = tmp_path / "github_output"
    out.write_text("")
    created = tmp_path / "created_output"
    for target in (out, created):
        proc = run_cli("label", str(pack), "--format", "github",
                       env=dict(fake_env({}), GITHUB_OUTPUT=str(target),
                                GITHUB_STEP_SUMMARY=str(tmp_path / "no" / "summary.md")))
        _refused(proc, "$GITHUB_STEP_SUMMARY")
    assert out.read_text() == "" and not created.exists()


# ---- sign -------------------------------------------------------------------------------------------------

@pytest.mark.usefixtures("needs_ssh_keygen")
def test_sign_checks_the_allowed_signers_file_before_it_writes(tmp_path, pack, fake_env):
    proc = run_cli("sign", str(pack), "--key", str(_key(tmp_path)), "--allowed-signers", str(tmp_path / "missing"),
                   env=fake_env({}))
    _refused(proc, "allowed-signers")
    assert not (pack / "provenance.json.sig").exists()


@pytest.mark.usefixtures("needs_ssh_keygen")
def test_sign_never_modifies_a_merged_verdict_through_its_member(tmp_path, pack, fake_env):
    env = fake_env({})
    verdict = tmp_path / "verdict"
    assert run_cli("merge", str(pack), "--out", str(verdict), env=env).returncode == 0
    before = _snapshot(verdict)
    _refused(run_cli("sign", str(verdict / "members" / pack.name), "--key", str(_key(tmp_path)), env=env),
             "merged verdict")
    assert _snapshot(verdict) == before
    assert run_cli("verify", str(verdict), env=env).returncode == 0


# ---- dispatch-table --out and history --plot: the output guard ----------------------------------------

def test_dispatch_table_out_never_replaces_a_file_without_force(tmp_path):
    victim = tmp_path / "notes.txt"
    victim.write_text("precious, not a table\n")
    _refused(run_cli("dispatch-table", _ref(), "--out", str(victim)), "--force")
    assert victim.read_text() == "precious, not a table\n"
    assert run_cli("dispatch-table", _ref(), "--out", str(victim), "--force").returncode == 0
    assert victim.read_text().startswith("{")


def test_dispatch_table_out_inside_a_pack_is_refused(pack):
    before = _snapshot(pack)
    _refused(run_cli("dispatch-table", _ref(), "--out", str(pack / "table.json")), "inside the pack")
    assert _snapshot(pack) == before


@pytest.mark.parametrize("command", ["dispatch-table", "history"])
def test_an_output_that_is_a_folder_leaves_nothing_behind(tmp_path, command):
    out = tmp_path / "adir"
    out.mkdir()
    if command == "dispatch-table":
        proc = run_cli("dispatch-table", _ref(), "--out", str(out))
    else:
        proc = run_cli("history", "--no-verify", "--plot", str(out), "--force")
    _refused(proc, "folder")
    assert not proc.stdout  # refused before the table is printed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir"]


def test_history_plot_is_refused_under_a_packs_folder(tmp_path, pack, fake_env):
    packs = pack.parent
    proc = run_cli("history", "--artifacts", str(tmp_path), "--no-verify", "--plot", str(packs / "trend.png"),
                   env=fake_env({}))
    _refused(proc, "packs folder")
    assert not (packs / "trend.png").exists()


@pytest.mark.parametrize("args", [["history", "--no-verify", "--plot", "", "--force"],
                                  ["history", "--no-verify", "--plot", "/", "--force"],
                                  ["dispatch-table", "REF", "--out", ""],
                                  ["dispatch-table", "REF", "--out", "/"]])
def test_an_empty_or_root_output_path_is_one_clear_line(args):
    _refused(run_cli(*[_ref() if a == "REF" else a for a in args]), "no file name")


def test_dispatch_table_check_against_a_missing_table_is_bad_input(tmp_path):
    _refused(run_cli("dispatch-table", _ref(), "--check", "--out", str(tmp_path / "no" / "table.json")),
             "no such table file")


def test_dispatch_table_names_a_merged_verdict(tmp_path, pack, fake_env):
    env = fake_env({})
    verdict = tmp_path / "verdict"
    assert run_cli("merge", str(pack), "--out", str(verdict), env=env).returncode == 0
    _refused(run_cli("dispatch-table", str(verdict), env=env), "is a merged verdict, not a pack")


# ---- report --out: all three files or none --------------------------------------------------------------

def test_an_interrupted_report_leaves_no_partial_set(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "evpack", "report", _ref(), "--out", str(out)], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline and not any(out.rglob("report.md")):
        time.sleep(0.001)
    proc.send_signal(signal.SIGINT)  # report.md is written; report.html is being rendered
    _, err = proc.communicate(timeout=60)
    left = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    assert left in ([], ["comment.md", "report.html", "report.md"]), f"exit {proc.returncode}: left {left} ({err!r})"


@pytest.mark.parametrize("var,value", [("EVPACK_CUDA_ARCHS", "garbage"), ("EVPACK_VARIANTS", "nope"),
                                       ("EVPACK_COMPILER_CACHE", "bogus")])
def test_a_bad_build_variable_is_refused_before_any_stage(tmp_path, var, value):
    """Before: the build stage failed on it, an evidence:failed pack was written and the exit was 1."""
    packs = tmp_path / "packs"
    env = {k: v for k, v in os.environ.items() if k != "FAKE_PLAN"}
    proc = run_cli("evidence", "--stages", "build", "--packs-dir", str(packs), env={**env, var: value}, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {var}"), proc.stderr
    assert not packs.exists() or not any(packs.iterdir())


@reference.needs("DEFAULT")
@pytest.mark.parametrize("command", ["verify", "label"])
def test_carried_from_must_be_a_folder(tmp_path, command):
    """Before: a --carried-from that names no folder was reported as a mismatch of the pack (exit 1)."""
    pack = reference.DEFAULT
    proc = run_cli(command, str(pack), "--carried-from", str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"error: --carried-from {tmp_path / 'nowhere'}: no such folder (give the packs folder or the source pack)"]
