"""The real pipeline (runner, pack, gates, labels, report, verify) driven by stand-in stages."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, copy_pack, fake_pack, run_cli, verify_fake

from evpack.pack import PackError
from evpack.stages.base import read_json


def _run(tmp_path, fake_env, plan, **kw) -> Path:
    fake_env(plan)
    return fake_pack(tmp_path / "packs", **kw)


def test_all_gates_pass_gives_complete_and_verifies(tmp_path, fake_env):
    pack = _run(tmp_path, fake_env, {})
    pj = read_json(pack / "pack.json")
    assert pj["label"] == "evidence:complete"
    assert "tensor-cores-verified" in pj["labels"] and "sanitizer-clean" in pj["labels"]
    assert all(g["status"] == "pass" for g in pj["gates"].values())
    assert verify_fake(pack) == []
    assert (tmp_path / "packs" / "latest").resolve() == pack
    for f in ("pack.json", "env.json", "report.md", "report.html", "index.json", "bench/raw.json"):
        assert (pack / f).is_file(), f
    idx = read_json(pack / "index.json")["files"]
    assert "pack.json" in idx and "index.json" not in idx


def test_pack_json_carries_the_required_fields(tmp_path, fake_env):
    pj = read_json(_run(tmp_path, fake_env, {}) / "pack.json")
    for key in ("schema_version", "pack_id", "created_utc", "git", "toolchain", "stages", "gates", "label",
                "labels", "so_sha256", "timings"):
        assert key in pj, key
    assert set(pj["toolchain"]) >= {"nvcc", "ptxas", "cuobjdump", "compute-sanitizer", "driver", "torch"}
    assert {"commit", "dirty"} <= set(pj["git"])
    assert all({"status", "reason", "duration_s"} <= set(v) for v in pj["stages"].values())


@pytest.mark.parametrize("plan,label", [
    ({"sanitize": "skipped"}, "evidence:partial"),
    ({"correctness": "fail"}, "evidence:failed"),
    ({"sass": "error"}, "evidence:failed"),
    ({"sanitize": "skipped", "bench": "fail"}, "evidence:failed"),
])
def test_label_follows_the_gates(tmp_path, fake_env, plan, label):
    pack = _run(tmp_path, fake_env, plan)
    assert read_json(pack / "pack.json")["label"] == label
    assert verify_fake(pack) == []


def test_failed_build_skips_its_dependents_with_a_reason(tmp_path, fake_env):
    pj = read_json(_run(tmp_path, fake_env, {"build": "fail"}) / "pack.json")
    assert pj["stages"]["ptxas"]["status"] == "skipped"
    assert "needs build (fail)" in pj["stages"]["ptxas"]["reason"]
    assert pj["label"] == "evidence:failed"


@pytest.mark.parametrize("what,needle", [("crash", "exited with code -11"), ("hang", "timed out"),
                                         ("raise", "RuntimeError")])
def test_broken_stage_is_error_with_log_kept_and_pack_still_assembled(tmp_path, fake_env, monkeypatch, what,
                                                                      needle):
    monkeypatch.setattr("evpack.evidence.gpu_available", lambda: (True, ""))  # isolation path, as on a GPU box
    gpu = ["sanitize"] if what != "raise" else []
    pack = _run(tmp_path, fake_env, {"sanitize": what, "gpu": gpu, "timeout": 2})
    pj = read_json(pack / "pack.json")
    assert pj["stages"]["sanitize"]["status"] == "error"
    assert needle in pj["stages"]["sanitize"]["reason"]
    assert (pack / "sanitize" / "stage.log").exists()
    assert pj["stages"]["bench"]["status"] == "pass"  # later stages still ran
    assert pj["label"] == "evidence:failed"
    assert verify_fake(pack) == []


def test_binary_mismatch_fails_the_one_binary_gate(tmp_path, fake_env):
    pack = _run(tmp_path, fake_env, {"binary": {"bench": "cd" * 32}})
    pj = read_json(pack / "pack.json")
    assert pj["gates"]["one_binary"]["status"] == "fail"
    assert "bench=cdcdcdcdcdcd" in pj["gates"]["one_binary"]["reason"]
    assert pj["label"] == "evidence:failed"


@pytest.fixture
def good_pack(tmp_path, fake_env):
    return _run(tmp_path, fake_env, {})


def test_verify_catches_a_flipped_byte_in_any_file(good_pack, tmp_path):
    for rel in ("bench/tool.log", "pack.json", "env.json", "report.md"):
        pack = copy_pack(good_pack, tmp_path / f"flip-{rel.replace('/', '_')}")
        p = pack / rel
        data = bytearray(p.read_bytes())
        data[len(data) // 2] ^= 0x01
        p.write_bytes(bytes(data))
        problems = verify_fake(pack)
        assert any(f"hash mismatch: {rel}" in x for x in problems), (rel, problems)


def test_verify_catches_deleted_and_added_files(good_pack, tmp_path):
    pack = copy_pack(good_pack, tmp_path / "del")
    (pack / "ptxas" / "tool.log").unlink()
    assert "missing file: ptxas/tool.log" in verify_fake(pack)
    pack = copy_pack(good_pack, tmp_path / "add")
    (pack / "bench" / "extra.csv").write_text("x\n")
    assert "file not in index.json: bench/extra.csv" in verify_fake(pack)


def test_verify_rederives_results_even_when_the_index_is_rewritten(good_pack, tmp_path):
    """Editing a raw file and re-hashing the index still fails: the result is re-derived."""
    from evpack.pack import write_index

    pack = copy_pack(good_pack, tmp_path / "rederive")
    raw = read_json(pack / "correctness" / "raw.json")
    raw["plan"] = "fail"
    (pack / "correctness" / "raw.json").write_text(json.dumps(raw))
    write_index(pack)
    problems = verify_fake(pack)
    assert any(x.startswith("stage correctness:") for x in problems)
    assert any(x.startswith("label:") for x in problems)


def test_verify_cli_exit_codes(good_pack, tmp_path, fake_env):
    env = fake_env({})
    ok = run_cli("verify", str(good_pack), env=env)
    assert ok.returncode == 0 and "verified" in ok.stdout
    pack = copy_pack(good_pack, tmp_path / "cli")
    (pack / "env.json").write_text("{}")
    bad = run_cli("verify", str(pack), env=env)
    assert bad.returncode == 1 and "MISMATCH hash mismatch: env.json" in bad.stdout


def test_interrupted_run_leaves_nothing_that_verifies(tmp_path, fake_env):
    env = fake_env({"correctness": "sleep:60", "timeout": 120})
    packs = tmp_path / "packs"
    e = dict(env)
    e["PYTHONPATH"] = str(REPO / "tests")
    proc = subprocess.Popen([sys.executable, "-m", "evpack", "evidence", "--packs-dir", str(packs),
                             "--stage-package", "fakestages"], env=e,
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if list(packs.glob(".incomplete-*/correctness/raw.json")):
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    left = list(packs.iterdir())
    assert left and all(p.name.startswith(".incomplete-") for p in left)
    assert not (packs / "latest").exists()
    with pytest.raises(PackError):
        verify_fake(left[0])
    assert run_cli("verify", str(left[0]), env=env).returncode == 2


def test_gpu_stages_are_skipped_with_a_reason_without_a_gpu(tmp_path, fake_env, monkeypatch):
    monkeypatch.setattr("evpack.evidence.gpu_available", lambda: (False, "no CUDA device: test"))
    pack = _run(tmp_path, fake_env, {"gpu": ["sanitize", "bench"]})
    pj = read_json(pack / "pack.json")
    assert pj["stages"]["sanitize"] == {"status": "skipped", "reason": "no CUDA device: test",
                                        "duration_s": pj["stages"]["sanitize"]["duration_s"]}
    assert pj["label"] == "evidence:partial"
    assert verify_fake(pack) == []


def test_zero_delta_is_reported_for_identical_content(tmp_path, fake_env, caplog):
    first = _run(tmp_path, fake_env, {})
    time.sleep(1.1)  # pack ids have one-second resolution
    fake_env({})
    with caplog.at_level("INFO", logger="evpack"):
        second = fake_pack(tmp_path / "packs")
    lines = [r.getMessage() for r in caplog.records]
    zd = read_json(second / "pack.json")["zero_delta"]
    assert zd == {"previous_pack": first.name, "previous_digest": read_json(first / "pack.json")["content_digest"],
                  "same": True}
    assert any(line.startswith("zero-delta:") for line in lines)
    assert "zero-delta: same content as" in (second / "report.md").read_text()
    assert verify_fake(second) == []


def test_interpreter_pin_mismatch_warns(tmp_path, fake_env, monkeypatch, caplog):
    monkeypatch.setenv("EVPACK_EXPECT_PYTHON", "/nonexistent/python9")
    fake_env({})
    with caplog.at_level("INFO", logger="evpack"):
        pack = fake_pack(tmp_path / "packs")
    lines = [r.getMessage() for r in caplog.records]
    warnings = read_json(pack / "pack.json")["warnings"]
    assert warnings and "EVPACK_EXPECT_PYTHON" in warnings[0]
    assert any(line.startswith("WARNING: interpreter pin") for line in lines)


def test_report_html_is_self_contained(good_pack):
    html = (good_pack / "report.html").read_text()
    assert "<table>" in html and "http://" not in html and "https://" not in html
    md = (good_pack / "report.md").read_text()
    assert "evidence:complete" in md and "| one_binary | PASS |" in md


def test_benchmark_compares_against_the_newest_pack_with_bench_data(tmp_path, fake_env, monkeypatch):
    from evpack.evidence import previous_with_bench

    first = _run(tmp_path, fake_env, {})
    assert previous_with_bench(tmp_path / "packs") is None  # the fake bench writes no summary.json
    seen = {}
    monkeypatch.setattr("evpack.evidence.previous_with_bench", lambda root: first)
    import evpack.evidence as ev

    real = ev.run_stage

    def spy(name, pack_dir, repo, options, **kw):
        seen[name] = options.get("previous_pack")
        return real(name, pack_dir, repo, options, **kw)

    monkeypatch.setattr(ev, "run_stage", spy)
    time.sleep(1.1)
    second = _run(tmp_path, fake_env, {})
    assert seen["bench"] == str(first)
    assert read_json(second / "pack.json")["options"]["previous_pack"] == str(first)
