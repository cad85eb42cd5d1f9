"""Bad input: one clear line, a non-zero exit, nothing overwritten."""
from __future__ import annotations

import os

from conftest import copy_pack, fake_pack, run_cli


def _one_line_error(proc, needle):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0], proc.stderr


def test_missing_pack():
    _one_line_error(run_cli("verify", "/nonexistent/pack"), "no such pack")
    _one_line_error(run_cli("label", "/nonexistent/pack"), "no such pack")


def test_folder_that_is_not_a_pack(tmp_path):
    _one_line_error(run_cli("verify", str(tmp_path)), "not a finished pack")


def test_corrupt_pack_json(tmp_path, fake_env):
    env = fake_env({})
    pack = fake_pack(tmp_path / "p")
    bad = copy_pack(pack, tmp_path / "bad")
    (bad / "pack.json").write_text("{ not json")
    before = {p: p.read_bytes() for p in pack.rglob("*") if p.is_file()}
    proc = run_cli("verify", str(bad), env=env)
    assert proc.returncode == 1
    assert "MISMATCH hash mismatch: pack.json" in proc.stdout and "MISMATCH pack.json is corrupt" in proc.stdout
    lab = run_cli("label", str(bad), env=env)  # label verifies first: a pack that does not verify has no labels
    assert lab.returncode == 1 and lab.stdout == "" and "does not verify" in lab.stderr
    assert before == {p: p.read_bytes() for p in pack.rglob("*") if p.is_file()}


def test_unknown_stage():
    _one_line_error(run_cli("evidence", "--stages", "build,warp_drive"), "unknown stage 'warp_drive'")


def test_non_writable_output_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):  # root ignores permission bits: use a path under a file instead
            target = tmp_path / "file"
            target.write_text("x")
            _one_line_error(run_cli("evidence", "--packs-dir", str(target / "packs")), "cannot be created")
        else:
            _one_line_error(run_cli("evidence", "--packs-dir", str(ro)), "not writable")
        _one_line_error(run_cli("env", "--out-dir", str(tmp_path / "file2" / "x")) if (tmp_path / "file2").write_text("x")
                        else None, "cannot be created")
    finally:
        ro.chmod(0o700)


def test_report_refuses_to_write_into_the_pack(tmp_path, fake_env):
    env = fake_env({})
    pack = fake_pack(tmp_path / "p")
    _one_line_error(run_cli("report", str(pack), "--out", str(pack / "sub"), env=env), "inside the pack")
    ok = run_cli("report", str(pack), "--out", str(tmp_path / "r"), env=env)
    assert ok.returncode == 0 and (tmp_path / "r" / "report.html").exists()
    assert (tmp_path / "r" / "report.md").read_text() == (pack / "report.md").read_text()


def test_unknown_label_format():
    proc = run_cli("label", "x", "--format", "yaml")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
