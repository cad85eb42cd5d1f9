"""The CLI contract: help everywhere, exit statuses, options checked before any stage runs,
pack ids and 'latest' wherever a pack is named, nothing written where it must not be."""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import reference
from conftest import REPO, build_outputs, copy_pack, fake_pack, run_cli, scratch_checkout

from evpack.cli import build_parser
from evpack.pack import reserve_pack_folder

# two reference packs with a benchmark: two runs of one commit while the schema-1 pair is in the tree, else the
# compatibility fixture and the newest full-suite pack
PAIR = reference.SAME_COMMIT_V1[:2] if len(reference.SAME_COMMIT_V1) >= 2 else (reference.COMPAT, reference.FULL)
needs_pair = pytest.mark.skipif(None in PAIR, reason="needs two reference packs with a benchmark (COMPAT and FULL)")


def _commands() -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "cmd")
    return sorted(sub.choices)


def test_top_level_help_lists_no_internal_command():
    out = run_cli("--help")
    assert out.returncode == 0
    assert "_run-stage" not in out.stdout and "SUPPRESS" not in out.stdout
    assert "exit status" in out.stdout


@pytest.mark.parametrize("cmd", [c for c in _commands() if not c.startswith("_")])
def test_every_command_has_full_help(cmd):
    out = run_cli(cmd, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage:") and "options:" in out.stdout
    assert len(out.stdout.splitlines()) > 3  # more than a usage line


@needs_pair
def test_compare_takes_pack_ids_and_three_formats():
    from evpack.timing import compare

    ids = tuple(p.name for p in PAIR)
    text = run_cli("compare", *ids)
    # 0: no row of ours slower beyond noise; 1: the regressions named (packs of other commits may have some)
    assert text.returncode == 0 or (text.returncode == 1 and "REGRESSION:" in text.stdout + text.stderr), text.stderr
    js = json.loads(run_cli("compare", *ids, "--format", "json").stdout)
    lib = compare.compare_rows(compare.load(PAIR[0])["rows"], compare.load(PAIR[1])["rows"])
    assert js == json.loads(json.dumps(lib.to_json())) and js["counts"] == lib.counts and len(lib.rows) > 0
    if PAIR == reference.SAME_COMMIT_V1[:2]:  # two full-suite runs of one binary
        assert js["counts"]["SAME"] >= 600 and len(js["rows"]) == 672
    md = run_cli("compare", *ids, "--format", "md", "--all").stdout
    assert md.splitlines()[0].startswith("| mark | impl |")


@needs_pair
def test_a_closed_pipe_is_a_quiet_exit():
    proc = subprocess.run(f"{sys.executable} -m evpack compare {PAIR[0].name} {PAIR[1].name} --all --format md | head -1",
                          shell=True, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.stdout.startswith("| mark")
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


@pytest.mark.parametrize("args,needle", [
    (["--shape", "garbage"], "expected KEY=VALUE"),
    (["--shape", "B=0,H=16,S=512,D=64,dtype=fp16,causal=0"], "B must be a positive integer"),
    (["--variants", "nope"], "unknown variant(s) 'nope'"),
    (["--cost-per-hour", "nan"], "finite number >= 0"),
    (["--cost-per-hour", "-1"], "finite number >= 0"),
    (["--suite", "adhoc"], "give at least one shape"),
    (["--stages", "build,warp"], "unknown stage 'warp'"),
    (["--previous-pack", "/nonexistent"], "no such pack"),
])
def test_bad_options_are_refused_before_any_stage_runs(tmp_path, args, needle):
    out = run_cli("evidence", "--packs-dir", str(tmp_path / "packs"), *args)
    assert out.returncode == 2, out.stdout + out.stderr
    err = out.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0], out.stderr
    assert not (tmp_path / "packs").exists() or not any((tmp_path / "packs").iterdir())


def test_unknown_requirement_is_a_usage_error(tmp_path):
    out = run_cli("evidence", "--require", "perfect", "--packs-dir", str(tmp_path))
    assert out.returncode == 2 and "invalid choice" in out.stderr


@pytest.mark.parametrize("plan,require,code", [
    ({}, None, 0),  # no GPU here: the default requirement is partial; a complete pack meets it
    ({"correctness": "fail"}, None, 1),
    ({"sanitize": "skipped"}, "complete", 1),
    ({"sanitize": "skipped"}, "partial", 0),
    ({"sass": "error"}, "partial", 1),
])
def test_exit_status_follows_the_requirement(tmp_path, fake_env, plan, require, code):
    env = fake_env(plan)
    args = ["evidence", "--packs-dir", str(tmp_path / "packs")] + (["--require", require] if require else [])
    out = run_cli(*args, env=env)
    assert out.returncode == code, out.stdout + out.stderr
    assert "verify: OK" in out.stdout  # the pack is written and verified whatever the exit status
    assert list((tmp_path / "packs").glob("2*"))


SHA = "ab" * 32  # the stand-in build's binary (tests/fakestages/_fake.py)


@pytest.mark.parametrize("args,plan,require,code,needle", [
    # `nox -s bench` on a GPU: build and bench passed, bench loaded the build's binary; the pack is partial
    (["bench"], {"binary": {"bench": SHA}}, "complete", 0, "met by evidence:partial"),
    (["evidence", "--stages", "bench"], {"binary": {"bench": SHA}}, "complete", 0, "met by evidence:partial"),
    (["bench"], {"binary": {"bench": SHA}, "bench": "fail"}, "complete", 1, "(performance fail)"),
    (["bench"], {"binary": {"bench": "cd" * 32}}, "complete", 1, "(one_binary fail)"),  # another binary timed
    (["bench"], {}, "complete", 1, "(one_binary skipped)"),  # bench recorded no binary: not proven
    (["bench"], {"bench": "skipped"}, "complete", 1, "(performance skipped, one_binary skipped)"),  # no GPU
    (["bench"], {"bench": "skipped"}, "partial", 0, "met by evidence:partial"),
    (["ptxas"], {}, "complete", 0, "gates build, ptxas_resources): met"),
    (["ptxas"], {"build": "error"}, "partial", 1, "(build error)"),
])
def test_a_stage_command_requires_what_it_ran(tmp_path, fake_env, args, plan, require, code, needle):
    out = run_cli(*args, "--packs-dir", str(tmp_path / "packs"), "--require", require, env=fake_env(plan))
    assert out.returncode == code, out.stdout + out.stderr
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("requirement ")]
    assert line.startswith(f"requirement {require} of the stages run (") and needle in line, line
    assert "verify: OK" in out.stdout


def test_the_gates_a_run_decides():
    from evpack.model import GATE_ORDER, STAGE_GATES
    from evpack.options import CROSS_GATE_FEEDERS, gates_of_run
    from evpack.stages.order import STAGE_ORDER, stage_module

    assert gates_of_run(["bench"]) == ("build", "performance", "one_binary")
    assert gates_of_run(["sass"]) == ("build", "sass_tensor_proof")  # SASS alone leaves one_binary undecided
    assert gates_of_run(None) == gates_of_run(list(STAGE_ORDER)) == GATE_ORDER
    assert "performance" not in gates_of_run(["oracles"]) and "gates_live" in gates_of_run(["oracles"])
    # every cross-stage gate names its feeders, and one_binary's are the stages that load the binary to run it
    assert set(CROSS_GATE_FEEDERS) == set(GATE_ORDER) - set(STAGE_GATES)
    runtime = {s for s in STAGE_ORDER if stage_module(s).NEEDS_GPU}
    assert set(CROSS_GATE_FEEDERS["one_binary"]) == runtime


def test_same_second_starts_get_distinct_pack_ids(tmp_path):
    pid = "20261122T120000Z-abcdef123456"
    first, second = reserve_pack_folder(tmp_path, pid), reserve_pack_folder(tmp_path, pid)
    assert first[0] == pid and second[0] == f"{pid}-2" and first[1] != second[1]
    (tmp_path / pid).mkdir()  # a finished pack of that id exists: the next run does not reuse it
    assert reserve_pack_folder(tmp_path, pid)[0] == f"{pid}-3"
    assert datetime.now(timezone.utc)


def test_writers_never_touch_a_pack_or_replace_files_without_force(tmp_path, fake_env):
    env = fake_env({})
    pack = fake_pack(tmp_path / "packs")
    before = {p: p.read_bytes() for p in pack.rglob("*") if p.is_file()}
    for args in (["env", "--out-dir", str(pack)], ["env", "--out-dir", str(pack / "bench")],
                 ["report", str(pack), "--out", str(pack)], ["report", str(pack), "--out", str(tmp_path / "packs")]):
        out = run_cli(*args, env=env)
        assert out.returncode == 2 and out.stderr.startswith("error:"), (args, out.stderr)
    assert before == {p: p.read_bytes() for p in pack.rglob("*") if p.is_file()}
    out_dir = tmp_path / "out"
    assert run_cli("env", "--out-dir", str(out_dir), env=env).returncode == 0
    again = run_cli("env", "--out-dir", str(out_dir), env=env)
    assert again.returncode == 2 and "--force" in again.stderr
    assert run_cli("env", "--out-dir", str(out_dir), "--force", env=env).returncode == 0
    plot = tmp_path / "trend.png"
    plot.write_bytes(b"keep me")
    hist = run_cli("history", "--plot", str(plot), env=env)
    assert hist.returncode == 2 and plot.read_bytes() == b"keep me"


def test_label_verifies_first_and_refuses_incomplete_folders(tmp_path, fake_env):
    env = fake_env({"sanitize": "skipped"})
    pack = fake_pack(tmp_path / "packs")
    ok = run_cli("label", str(pack), "--format", "gh-args", env=env)
    assert ok.returncode == 0 and "--add-label evidence:partial" in ok.stdout
    forged = copy_pack(pack, tmp_path / "forged")
    pj = json.loads((forged / "pack.json").read_text())
    pj["label"], pj["labels"] = "evidence:complete", ["evidence:complete"]
    (forged / "pack.json").write_text(json.dumps(pj))
    from evpack.pack import write_index

    write_index(forged)
    bad = run_cli("label", str(forged), "--format", "gh-args", env=env)
    assert bad.returncode == 1 and "evidence:complete" not in bad.stdout
    inc = tmp_path / "packs" / f".incomplete-{pack.name}-x"
    inc.mkdir()
    (inc / "index.json").write_text("{}")
    refused = run_cli("label", str(inc), env=env)
    assert refused.returncode == 2 and "interrupted" in refused.stderr


@pytest.mark.slow
def test_forced_spills_make_the_ptxas_command_exit_non_zero(tmp_path):
    """The exit-status contract end to end on a CPU: a real build with forced spills, the real PTXAS
    stage, a pack labelled failed, exit 1 (docs/running.md: `EVPACK_NVCC_FLAGS=... nox -s ptxas`). The build runs in a
    scratch copy of the checkout: this checkout's own _C and build/ are left as they are."""
    import os
    import shutil

    from evpack import tools

    if tools.cuda_home() is None or shutil.which("ninja") is None and not tools.find_tool("ninja"):
        pytest.skip("no CUDA toolkit (nvcc) or ninja: the build stage cannot run here")
    checkout = scratch_checkout(tmp_path / "checkout")
    before = build_outputs()
    env = dict(os.environ, EVPACK_NVCC_FLAGS="-maxrregcount=32 -Xptxas --override-directive-values",
               EVPACK_VARIANTS="scalar", EVPACK_CUDA_ARCHS="90", EVPACK_CANARIES="0")
    env.pop("FAKE_PLAN", None)
    out = run_cli("ptxas", "--require", "partial", "--packs-dir", str(tmp_path / "packs"), env=env, timeout=900,
                  repo=checkout)  # partial: the same requirement on a CPU and on a GPU machine
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    assert "requirement partial of the stages run (ptxas; gates build, ptxas_resources): NOT met by " \
           "evidence:failed (ptxas_resources fail)" in out.stdout
    pack = next((tmp_path / "packs").glob("2*"))
    pj = json.loads((pack / "pack.json").read_text())
    assert pj["gates"]["ptxas_resources"]["status"] == "fail"
    built = Path(json.loads((pack / "build" / "binary.json").read_text())["path"])
    assert built.is_relative_to(checkout) and build_outputs(checkout)
    assert build_outputs() == before


def test_dispatch_table_check_and_refusals(tmp_path, fake_env):
    newest = json.loads((REPO / "python" / "evpack" / "dispatch_table.json").read_text())["source_pack"]
    ok = run_cli("dispatch-table", newest, "--check")
    assert ok.returncode == 0 and "up to date" in ok.stdout
    stale = tmp_path / "table.json"
    stale.write_text("{}\n")
    assert run_cli("dispatch-table", reference.skip_unless(reference.FULL, "FULL").name, "--check", "--out",
                   str(stale)).returncode == 1
    env = fake_env({})
    pack = fake_pack(tmp_path / "packs")
    refused = run_cli("dispatch-table", str(pack), "--out", str(tmp_path / "t.json"), env=env)
    assert refused.returncode == 2 and refused.stderr.startswith("error:") and not (tmp_path / "t.json").exists()


def test_report_refuses_a_pack_that_does_not_verify(tmp_path, fake_env):
    env = fake_env({})
    pack = fake_pack(tmp_path / "packs")
    forged = copy_pack(pack, tmp_path / "forged")
    (forged / "env.json").write_text("{}\n")  # not re-hashed: a hash mismatch
    out = run_cli("report", str(forged), "--out", str(tmp_path / "r"), env=env)
    assert out.returncode == 1 and "does not verify" in out.stderr and not (tmp_path / "r").exists()
