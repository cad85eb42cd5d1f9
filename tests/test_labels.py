from __future__ import annotations

import json

import pytest
from conftest import fake_pack, run_cli

from evpack.labels import ALL_LABELS, decide, gh_args, main_label

ALL = ("build", "ptxas_resources", "sass_tensor_proof", "executed_tensor_work", "sanitizer_clean", "correctness",
       "stability", "gates_live", "performance", "one_binary")


def gates(**over):
    g = {name: "pass" for name in ALL}
    g.update(over)
    return g


def test_complete_only_when_every_gate_passed():
    assert main_label(gates()) == "evidence:complete"


@pytest.mark.parametrize("over", [{"sanitizer_clean": "skipped"}, {"performance": "skipped", "stability": "skipped"}])
def test_partial_when_none_failed_but_some_skipped(over):
    assert main_label(gates(**over)) == "evidence:partial"


@pytest.mark.parametrize("over", [{"correctness": "fail"}, {"gates_live": "error"},
                                  {"sanitizer_clean": "skipped", "build": "error"}])
def test_failed_when_any_failed_or_errored(over):
    assert main_label(gates(**over)) == "evidence:failed"


def test_no_gates_is_failed_never_complete():
    assert main_label({}) == "evidence:failed"


def test_finer_labels_come_from_the_same_gates():
    _, labels = decide(gates(executed_tensor_work="skipped"))
    assert "tensor-cores-verified" not in labels and "sanitizer-clean" in labels
    _, labels = decide(gates(gates_live="error"))
    assert "sanitizer-clean" not in labels
    _, labels = decide(gates(), perf_regression=True)
    assert labels[0] == "evidence:complete" and "perf-regression" in labels


def test_gh_args_add_current_and_remove_stale_labels():
    args = gh_args(["evidence:partial", "resources-clean"])
    assert args[:4] == ["--add-label", "evidence:partial", "--add-label", "resources-clean"]
    removed = {args[i + 1] for i in range(len(args)) if args[i] == "--remove-label"}
    assert removed == set(ALL_LABELS) - {"evidence:partial", "resources-clean"}


@pytest.mark.parametrize("plan,label", [({}, "evidence:complete"), ({"bench": "skipped"}, "evidence:partial"),
                                        ({"stability": "fail"}, "evidence:failed")])
def test_label_command_on_packs_of_each_outcome(tmp_path, fake_env, monkeypatch, plan, label):
    env = fake_env(plan)
    pack = fake_pack(tmp_path / "p")
    assert run_cli("label", str(pack), env=env).stdout.splitlines()[0] == label
    js = json.loads(run_cli("label", str(pack), "--format", "json", env=env).stdout)
    assert js["label"] == label and js["pack_id"] == pack.name
    gh = run_cli("label", str(pack), "--format", "gh-args", env=env).stdout
    assert f"--add-label {label}" in gh
    out, summary = tmp_path / "out", tmp_path / "summary"
    env.update(GITHUB_OUTPUT=str(out), GITHUB_STEP_SUMMARY=str(summary))
    assert run_cli("label", str(pack), "--format", "github", env=env).returncode == 0
    assert f"label={label}" in out.read_text() and label in summary.read_text()
