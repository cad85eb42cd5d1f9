"""The scripts of the trusted workflows, run as GitHub runs them (`bash --noprofile --norc -eo pipefail`),
on hostile inputs: what a fork's run can upload and report, with a fake `gh` standing in for the API.

Each step's `run:` text is taken from the workflow file itself and its `env:` is resolved from the
expressions named here (a step that starts reading another expression fails the test until it is
named). `python -m evpack verify` and `merge` are the real ones, on copies of the committed reference
packs; `python -m evpack sign` is a stand-in that records how it was called (the command itself is
tested with the package).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import reference

yaml = pytest.importorskip("yaml", reason="PyYAML (the test extra) parses the workflows")

REPO = Path(__file__).resolve().parents[1]
WF_DIR = REPO / ".github" / "workflows"
UNSIGNED = reference.COMPAT  # schema 1, unsigned, verifies
UNSIGNED_COMMIT = reference.pack_json(UNSIGNED)["git"]["commit"] if UNSIGNED else "0" * 40
# signed by the committed allowed_signers' key, each verifying alone (a job brings one pack, not its sources)
SIGNED = list(reference.SIGNED_WHOLE)
SAME_COMMIT_SIGNED = reference.SIGNED_ONE_COMMIT  # a merged verdict covers one commit
needs_two_signed = pytest.mark.skipif(len(SAME_COMMIT_SIGNED) < 2,
                                      reason="needs two signed reference packs of one commit (SIGNED_ONE_COMMIT)")
needs_signed = reference.needs("SIGNED")
OTHER_SHA = "1" * 40
HEX32 = re.compile(r"^::stop-commands::([0-9a-f]{32})$")


@pytest.fixture(autouse=True)
def _runner_tools():
    """The tools the scripts call on the hosted runner (ubuntu-latest has them all)."""
    missing = [t for t in ("bash", "jq", "tar", "cmp", "find", "ssh-keygen") if shutil.which(t) is None]
    if missing:
        msg = f"the workflow scripts need {', '.join(missing)} on PATH"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)


def workflow(name: str) -> dict:
    return yaml.safe_load((WF_DIR / name).read_text())


def find_step(wf: dict, job: str, name: str) -> dict:
    for st in wf["jobs"][job]["steps"]:
        if st.get("id") == name or name in str(st.get("name", "")):
            return st
    raise AssertionError(f"no step {name!r} in job {job}")


FAKE_GH = textwrap.dedent(r'''
    #!/usr/bin/env python3
    """A fake `gh api`: logs each call (JSON a line), answers from FAKE_GH_STATE."""
    import json, os, re, sys
    args = sys.argv[1:]
    with open(os.environ["FAKE_GH_LOG"], "a") as log:
        log.write(json.dumps(args) + "\n")
    state = json.load(open(os.environ["FAKE_GH_STATE"]))
    if args[:1] != ["api"]:
        sys.exit(f"fake gh: unexpected call {args}")
    if "--method" in args:
        sys.exit(0)
    path = next(a for a in args[1:] if a.startswith("repos/"))
    jq = args[args.index("--jq") + 1] if "--jq" in args else None
    m = re.fullmatch(r"repos/owner/repo/actions/runs/(\d+)/artifacts", path)
    if m and jq == ".artifacts[].name":
        print("\n".join(state.get("artifacts", [])))
        sys.exit(0)
    m = re.fullmatch(r"repos/owner/repo/pulls/(\d+)", path)
    if m:
        pr = state.get("pulls", {}).get(m.group(1))
        if pr is None:
            sys.exit("gh: Not Found (HTTP 404)")
        print(pr["head"]["sha"] if jq == ".head.sha" else json.dumps(pr))
        sys.exit(0)
    m = re.fullmatch(r"repos/owner/repo/issues/(\d+)/labels", path)
    if m and jq == ".[].name":
        print("\n".join(state.get("labels", [])))
        sys.exit(0)
    sys.exit(f"fake gh: unexpected call {args}")
''').lstrip()

# `python`: the test's interpreter, except `-m evpack sign`, a stand-in that records its call.
PYTHON_SHIM = textwrap.dedent('''
    #!/usr/bin/env bash
    if [ "$1 $2 $3" = "-m evpack sign" ]; then
        [ "$#" -eq 6 ] && [ "$5" = --key ] || {{ echo "stand-in sign: unexpected call: $*" >&2; exit 2; }}
        key=$6
        {{
            printf '%s\\n' "$*"
            printf 'mode=%s\\n' "$(stat -c %a "$key")"
            printf 'key=%s\\n' "$(tr '\\n' '|' <"$key")"
            printf 'env_key=%s\\n' "${{SIGNING_KEY:-unset}}"
        }} >>"$SIGN_LOG"
        [ "$4" != "" ] && [ ! -e "$4/REFUSE_ME" ]
        exit $?
    fi
    exec {python} "$@"
''').lstrip()


class Runner:
    """Runs one step's script with the runner's variables, a fake gh and the python shim on PATH."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.temp = tmp / "runner-temp"
        self.temp.mkdir()
        self.bin = tmp / "bin"
        self.bin.mkdir()
        (self.bin / "gh").write_text(FAKE_GH)
        (self.bin / "python").write_text(PYTHON_SHIM.format(python=sys.executable))
        for f in ("gh", "python"):
            (self.bin / f).chmod(0o755)
        self.gh_log = tmp / "gh.log"
        self.sign_log = tmp / "sign.log"
        self.state = tmp / "gh-state.json"
        self.state.write_text("{}")
        self.output = tmp / "github-output"

    def gh(self, **state) -> None:
        self.state.write_text(json.dumps(state))

    def gh_calls(self) -> list[list[str]]:
        return [json.loads(x) for x in self.gh_log.read_text().splitlines()] if self.gh_log.exists() else []

    def outputs(self) -> dict[str, str]:
        if not self.output.exists():
            return {}
        return dict(line.split("=", 1) for line in self.output.read_text().splitlines() if "=" in line)

    def run(self, wf_name: str, job: str, step: str, values: dict[str, str]) -> subprocess.CompletedProcess:
        wf = workflow(wf_name)
        st = find_step(wf, job, step)
        env_spec = {**(wf.get("env") or {}), **(wf["jobs"][job].get("env") or {}), **(st.get("env") or {})}
        env = {"PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}", "HOME": str(self.tmp), "LANG": "C.UTF-8",
               "RUNNER_TEMP": str(self.temp), "GITHUB_OUTPUT": str(self.output), "GITHUB_REPOSITORY": "owner/repo",
               "GITHUB_WORKSPACE": str(REPO), "FAKE_GH_LOG": str(self.gh_log), "FAKE_GH_STATE": str(self.state),
               "SIGN_LOG": str(self.sign_log)}
        for key, spec in env_spec.items():
            spec = str(spec)
            if "${{" in spec:
                exprs = re.findall(r"\$\{\{.*?\}\}", spec)
                missing = [e for e in exprs if e not in values]
                assert not missing, f"step {step!r} reads {missing}: name a value for it in the test"
                for e in exprs:
                    spec = spec.replace(e, values[e])
            env[key] = spec
        script = self.tmp / "step.sh"
        script.write_text(st["run"])
        self.output.unlink(missing_ok=True)
        return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=300)


@pytest.fixture()
def runner(tmp_path):
    return Runner(tmp_path)


BASE_VALUES = {
    "${{ github.workspace }}": str(REPO),
    "${{ vars.EVPACK_GPUS || '[\"h200\", \"h100\"]' }}": '["h200", "h100"]',
    "${{ github.token }}": "fake-token",
    "${{ github.event.workflow_run.id }}": "777",
    "${{ github.event.workflow_run.head_repository.full_name }}": "fork-owner/repo",
}


def values(head_sha: str = UNSIGNED_COMMIT, **more: str) -> dict[str, str]:
    return {**BASE_VALUES, "${{ github.event.workflow_run.head_sha }}": head_sha, **more}


def pull(number: int = 42, *, sha: str = UNSIGNED_COMMIT, state: str = "open", repo: str = "fork-owner/repo",
         labels=("run-evidence",)) -> dict:
    return {str(number): {"number": number, "state": state, "head": {"sha": sha, "repo": {"full_name": repo}},
                          "labels": [{"name": n} for n in labels]}}


# ------------------------------------------------------------------ pr: the untrusted number
def write_meta(runner: Runner, content: bytes) -> Path:
    meta = runner.temp / "meta"
    meta.mkdir(exist_ok=True)
    (meta / "pr").write_bytes(content)
    return meta / "pr"


def test_pr_number_accepted_when_the_api_confirms_it(runner):
    write_meta(runner, b"42\n")
    runner.gh(pulls=pull())
    r = runner.run("evidence-sign.yml", "pr", "pr", values())
    assert r.returncode == 0, r.stdout + r.stderr
    assert runner.outputs() == {"number": "42"}
    assert runner.gh_calls() == [["api", "repos/owner/repo/pulls/42"]]


@pytest.mark.parametrize("content", [
    b"42", b"042\n", b"0\n", b"-1\n", b"+42\n", b"4 2\n", b"42\n43\n", b"42;id\n", b"$(id)\n", b"../42\n",
    b"42\r\n", b"\n42\n", b"42 \n", b"1234567890123\n", b"", b"\n", b"4\x002\n", "\uff14\uff12\n".encode(),
    b"0x2a\n", b"42\n\n",
], ids=repr)
def test_pr_number_that_is_not_exactly_digits_is_refused_before_any_api_call(runner, content):
    write_meta(runner, content)
    runner.gh(pulls=pull())
    r = runner.run("evidence-sign.yml", "pr", "pr", values())
    assert r.returncode == 1 and "::error::evidence-meta" in r.stdout, r.stdout + r.stderr
    assert "number" not in runner.outputs()
    assert runner.gh_calls() == []


@pytest.mark.parametrize("shape", ["symlink", "folder", "missing", "fifo"])
def test_pr_file_that_is_not_a_regular_file_is_refused(runner, tmp_path, shape):
    meta = runner.temp / "meta"
    meta.mkdir()
    if shape == "symlink":
        (tmp_path / "elsewhere").write_bytes(b"42\n")
        (meta / "pr").symlink_to(tmp_path / "elsewhere")
    elif shape == "folder":
        (meta / "pr").mkdir()
    elif shape == "fifo":
        os.mkfifo(meta / "pr")
    runner.gh(pulls=pull())
    r = runner.run("evidence-sign.yml", "pr", "pr", values())
    assert r.returncode == 1 and "no regular file" in r.stdout, r.stdout + r.stderr
    assert runner.gh_calls() == [] and "number" not in runner.outputs()


@pytest.mark.parametrize(("case", "pr", "rc", "says"), [
    ("head moved on", pull(sha=OTHER_SHA), 0, "stale or foreign run"),
    ("another PR's number (its head differs)", pull(sha="2" * 40), 0, "stale or foreign run"),
    ("closed", pull(state="closed"), 0, "is closed"),
    ("approval withdrawn", pull(labels=("bug",)), 0, "no longer carries run-evidence"),
    ("head from another repository", pull(repo="someone/else"), 1, "head repository is not the run's"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_pr_not_confirmed_is_not_signed(runner, case, pr, rc, says):
    write_meta(runner, b"42\n")
    runner.gh(pulls=pr)
    r = runner.run("evidence-sign.yml", "pr", "pr", values())
    assert r.returncode == rc and says in r.stdout, (case, r.stdout, r.stderr)
    assert "number" not in runner.outputs()


def test_pr_number_of_a_missing_pull_request_fails(runner):
    write_meta(runner, b"43\n")
    runner.gh(pulls=pull(42))
    r = runner.run("evidence-sign.yml", "pr", "pr", values())
    assert r.returncode != 0 and "number" not in runner.outputs()


def test_run_head_that_is_not_a_commit_id_is_refused(runner):
    write_meta(runner, b"42\n")
    runner.gh(pulls=pull())
    r = runner.run("evidence-sign.yml", "pr", "pr", values(head_sha="main; id"))
    assert r.returncode == 1 and runner.gh_calls() == []


@pytest.mark.parametrize(("artifacts", "gpu"), [(["evidence-meta", "evidence-gpu-h200"], "true"),
                                                (["evidence-cpu-x", "test-artifacts-1-1"], None),
                                                (["evidence-meta-x", "xevidence-meta"], None)])
def test_only_a_run_with_evidence_meta_is_a_gpu_run(runner, artifacts, gpu):
    runner.gh(artifacts=artifacts)
    r = runner.run("evidence-sign.yml", "pr", "run", values())
    assert r.returncode == 0, r.stdout + r.stderr
    assert runner.outputs().get("gpu") == gpu


# ------------------------------------------------------------------ label reset
@pytest.mark.parametrize(("labels", "removed"), [(["bug", "run-evidence"], True), (["bug", "run-evidence-x"], False),
                                                 ([], False)])
def test_label_reset_removes_run_evidence_only(runner, labels, removed):
    runner.gh(labels=labels)
    r = runner.run("evidence-label-reset.yml", "remove-run-evidence", "Remove run-evidence",
                   {"${{ github.token }}": "t", "${{ github.event.pull_request.number }}": "42"})
    assert r.returncode == 0, r.stdout + r.stderr
    deletes = [c for c in runner.gh_calls() if "--method" in c]
    assert deletes == ([["api", "--method", "DELETE", "repos/owner/repo/issues/42/labels/run-evidence"]]
                       if removed else [])


def test_label_reset_refuses_a_pr_number_that_is_not_one(runner):
    r = runner.run("evidence-label-reset.yml", "remove-run-evidence", "Remove run-evidence",
                   {"${{ github.token }}": "t", "${{ github.event.pull_request.number }}": "42/../../x"})
    assert r.returncode == 1 and runner.gh_calls() == []


# ------------------------------------------------------------------ sign job: intake of the packs
def stage(runner: Runner, gpu: str, pack: Path = UNSIGNED, *, name: str | None = None) -> Path:
    folder = runner.temp / "untrusted" / f"evidence-gpu-{gpu}"
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / (name or pack.name)
    shutil.copytree(pack, dest, symlinks=True)
    return dest


def intake(runner: Runner, head_sha: str = UNSIGNED_COMMIT) -> subprocess.CompletedProcess:
    return runner.run("evidence-sign.yml", "sign", "Take in each GPU type's pack", values(head_sha))


def assert_commands_stopped(stdout: str) -> None:
    """Pack-made text reaches stdout only while workflow commands are off (::stop-commands::TOKEN ... ::TOKEN::)."""
    lines = stdout.splitlines()
    m = HEX32.match(lines[0]) if lines else None
    assert m, stdout[:300]
    assert lines[-1] == f"::{m.group(1)}::" and stdout.count(m.group(1)) == 2


def signed_of(runner: Runner, gpu: str) -> list[str]:
    folder = runner.temp / "signed" / gpu
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_intake_verifies_and_takes_a_clean_pack(runner):
    stage(runner, "h200")
    r = intake(runner)
    assert r.returncode == 0, r.stdout + r.stderr
    assert signed_of(runner, "h200") == [UNSIGNED.name]
    assert (runner.temp / "refused").read_text() == ""
    log = (runner.temp / "signed" / "intake.log").read_text()
    assert f"verified h200: {UNSIGNED.name}" in log and "missing h100: no evidence-gpu-h100 artifact" in log
    assert_commands_stopped(r.stdout)


def _symlink_inside(p: Path, tmp: Path) -> None:
    (p / "build" / "extra.log").symlink_to("/etc/hostname")


def _planted_module_inside(p: Path, tmp: Path) -> None:
    (p / "evpack").mkdir()
    (p / "evpack" / "__init__.py").write_text(f"open({str(tmp / 'EXECUTED')!r}, 'w')\n")


def _planted_module_beside(p: Path, tmp: Path) -> None:
    (p.parent / "evpack").mkdir()
    (p.parent / "evpack" / "__init__.py").write_text(f"open({str(tmp / 'EXECUTED')!r}, 'w')\n")


def _second_pack(p: Path, tmp: Path) -> None:
    shutil.copytree(p, p.parent / ("20200101T000000Z" + p.name[16:]))  # another pack id of the same commit


def _presigned(p: Path, tmp: Path) -> None:
    if not SIGNED:
        pytest.skip("no signed reference pack (role SIGNED) to take a signature from")
    shutil.copy(SIGNED[0] / "provenance.json.sig", p / "provenance.json.sig")


def _dirty(p: Path, tmp: Path) -> None:
    pj = json.loads((p / "pack.json").read_text())
    pj["git"]["dirty"] = True
    (p / "pack.json").write_text(json.dumps(pj))


def _git_not_an_object(p: Path, tmp: Path) -> None:
    pj = json.loads((p / "pack.json").read_text())
    pj["git"] = f"{UNSIGNED_COMMIT}/false"
    (p / "pack.json").write_text(json.dumps(pj))


def _tampered(p: Path, tmp: Path) -> None:
    log = next(p.glob("build/*.log"))
    log.write_bytes(log.read_bytes() + b"one more line\n")


def _no_pack_json(p: Path, tmp: Path) -> None:
    (p / "pack.json").unlink()


def _fifo_inside(p: Path, tmp: Path) -> None:
    os.mkfifo(p / "build" / "pipe")


INTAKE_ATTACKS = {
    "symlink inside the pack": _symlink_inside,
    "python module planted inside the pack": _planted_module_inside,
    "python module planted beside the pack": _planted_module_beside,
    "two packs in one artifact": _second_pack,
    "a signature made by the untrusted job": _presigned,
    "a dirty tree": _dirty,
    "git recorded as a string": _git_not_an_object,
    "a file changed after the pack was made": _tampered,
    "no pack.json": _no_pack_json,
    "a fifo inside the pack": _fifo_inside,
}


@pytest.mark.parametrize("attack", sorted(INTAKE_ATTACKS))
def test_intake_refuses(runner, tmp_path, attack):
    INTAKE_ATTACKS[attack](stage(runner, "h200"), tmp_path)
    r = intake(runner)
    assert r.returncode == 0, r.stdout + r.stderr  # refusals are recorded; the job fails at its last step
    assert signed_of(runner, "h200") == []
    assert (runner.temp / "refused").read_text() == "h200\n"
    assert "refused h200: " in (runner.temp / "signed" / "intake.log").read_text()
    assert not (tmp_path / "EXECUTED").exists()  # nothing from the artifact ran
    assert_commands_stopped(r.stdout)


@pytest.mark.parametrize("name", ["evpack", "latest", "20261121T142018Z-b40b5c2fd4c6\n::error::x", "..pack",
                                  "20261121T142018Z-B40B5C2FD4C6"], ids=repr)
def test_intake_refuses_a_folder_not_named_by_a_pack_id(runner, name):
    stage(runner, "h200", name=name)
    r = intake(runner)
    assert r.returncode == 0 and signed_of(runner, "h200") == []
    assert (runner.temp / "refused").read_text() == "h200\n"


def test_intake_refuses_a_pack_of_another_commit(runner):
    stage(runner, "h200")
    r = intake(runner, head_sha=OTHER_SHA)
    assert r.returncode == 0 and signed_of(runner, "h200") == []
    assert "not a clean build of the run's head commit" in (runner.temp / "signed" / "intake.log").read_text()


def test_intake_refuses_a_file_where_the_pack_folder_should_be(runner):
    folder = runner.temp / "untrusted" / "evidence-gpu-h200"
    folder.mkdir(parents=True)
    (folder / UNSIGNED.name).write_text("not a folder\n")
    r = intake(runner)
    assert r.returncode == 0 and signed_of(runner, "h200") == []
    assert (runner.temp / "refused").read_text() == "h200\n"


def test_intake_ignores_an_artifact_folder_that_is_a_link_and_gpu_types_not_in_the_matrix(runner, tmp_path):
    real = tmp_path / "real"
    shutil.copytree(UNSIGNED, real / UNSIGNED.name)
    (runner.temp / "untrusted").mkdir()
    (runner.temp / "untrusted" / "evidence-gpu-h200").symlink_to(real)
    stage(runner, "b200")  # a GPU type nobody asked for
    r = intake(runner)
    assert r.returncode == 0
    assert signed_of(runner, "h200") == [] and signed_of(runner, "b200") == []
    log = (runner.temp / "signed" / "intake.log").read_text()
    assert "missing h200" in log and "b200" not in log


def test_intake_refuses_a_gpu_list_that_is_not_names(runner):
    stage(runner, "h200")
    bad = values(**{"${{ vars.EVPACK_GPUS || '[\"h200\", \"h100\"]' }}": '["h200", "../x"]'})
    r = runner.run("evidence-sign.yml", "sign", "Take in each GPU type's pack", bad)
    assert r.returncode != 0 and signed_of(runner, "h200") == []


# ------------------------------------------------------------------ sign job: the key
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot a real key\n-----END OPENSSH PRIVATE KEY-----"


def verified(runner: Runner, gpu: str, pack_id: str, refuse: bool = False) -> Path:
    p = runner.temp / "signed" / gpu / pack_id
    p.mkdir(parents=True)
    (p / "pack.json").write_text("{}\n")
    if refuse:
        (p / "REFUSE_ME").write_text("")
    (runner.temp / "signed" / "intake.log").touch()
    (runner.temp / "refused").touch()
    return p


def test_sign_step_signs_each_verified_pack_with_a_private_key_file_then_removes_it(runner):
    good = verified(runner, "h200", "20261121T142018Z-b40b5c2fd4c6")
    bad = verified(runner, "h100", "20261121T142707Z-b40b5c2fd4c6", refuse=True)
    r = runner.run("evidence-sign.yml", "sign", "Sign each verified pack",
                   values(**{"${{ secrets.EVPACK_SIGNING_KEY }}": KEY}))
    assert r.returncode == 0, r.stdout + r.stderr
    calls = runner.sign_log.read_text()
    key_file = runner.temp / "evpack-signing-key"
    assert f"-m evpack sign {good} --key {key_file}\n" in calls and f"-m evpack sign {bad} --key {key_file}\n" in calls
    assert calls.count("mode=600\n") == 2 and calls.count("key=" + KEY.replace("\n", "|") + "|\n") == 2
    assert calls.count("env_key=unset\n") == 2  # the key is not in the environment of what runs
    assert not key_file.exists()
    assert good.exists() and not bad.exists()
    assert (runner.temp / "refused").read_text() == "h100\n"
    log = (runner.temp / "signed" / "intake.log").read_text()
    assert f"signed h200: {good.name}" in log and f"refused h100: python -m evpack sign refused {bad.name}" in log
    assert KEY.splitlines()[1] not in r.stdout + r.stderr + log


def test_sign_step_without_the_secret_fails_and_signs_nothing(runner):
    verified(runner, "h200", "20261121T142018Z-b40b5c2fd4c6")
    r = runner.run("evidence-sign.yml", "sign", "Sign each verified pack",
                   values(**{"${{ secrets.EVPACK_SIGNING_KEY }}": ""}))
    assert r.returncode == 1 and "no secret EVPACK_SIGNING_KEY" in r.stdout
    assert not runner.sign_log.exists() and not (runner.temp / "evpack-signing-key").exists()


def test_key_file_is_removed_when_signing_breaks(runner):
    verified(runner, "h200", "20261121T142018Z-b40b5c2fd4c6")
    (runner.bin / "python").write_text("#!/usr/bin/env bash\nkill -TERM $PPID\nexit 3\n")
    r = runner.run("evidence-sign.yml", "sign", "Sign each verified pack",
                   values(**{"${{ secrets.EVPACK_SIGNING_KEY }}": KEY}))
    assert r.returncode != 0
    assert not (runner.temp / "evpack-signing-key").exists()


def test_archive_step_archives_each_signed_pack_by_gpu_and_id(runner):
    verified(runner, "h200", "20261121T142018Z-b40b5c2fd4c6")
    r = runner.run("evidence-sign.yml", "sign", "archive", values())
    assert r.returncode == 0, r.stderr
    assert runner.outputs() == {"any": "true"}
    tgz = runner.temp / "signed" / "h200" / "evidence-h200-20261121T142018Z-b40b5c2fd4c6.tar.gz"
    names = subprocess.run(["tar", "-tzf", str(tgz)], capture_output=True, text=True, check=True).stdout.split()
    assert "20261121T142018Z-b40b5c2fd4c6/pack.json" in names


def test_fail_step_fails_the_job_when_a_pack_was_refused(runner):
    (runner.temp / "refused").write_text("h100\n")
    r = runner.run("evidence-sign.yml", "sign", "Fail when a pack was refused", values())
    assert r.returncode == 1 and "::error::the pack of h100 was refused" in r.stdout
    (runner.temp / "refused").write_text("")
    assert runner.run("evidence-sign.yml", "sign", "Fail when a pack was refused", values()).returncode == 0


# ------------------------------------------------------------------ merge and publish
@needs_two_signed
def test_merge_step_merges_signed_packs_against_the_committed_allowed_signers(runner):
    for gpu, pack in zip(("h200", "h100"), SAME_COMMIT_SIGNED[:2], strict=True):
        shutil.copytree(pack, runner.temp / "signed" / gpu / pack.name)
    (runner.temp / "signed" / "intake.log").write_text("verified h200\n")
    r = runner.run("evidence-sign.yml", "merge", "merge", values(SAME_COMMIT_SIGNED[0].name[-12:]))
    assert r.returncode == 0, r.stdout + r.stderr
    out = runner.outputs()
    assert out.get("made") == "true" and out.get("status") in ("0", "1"), (out, r.stdout)
    assert (runner.temp / "merged" / "verdict" / "merged.json").exists()
    assert (runner.temp / "merged" / "intake.log").read_text() == "verified h200\n"
    assert "signature verified" in (runner.temp / "merged" / "merge.log").read_text()
    assert_commands_stopped(r.stdout)


@needs_signed
def test_merge_step_says_which_gpu_brought_no_signed_pack(runner):
    shutil.copytree(SIGNED[0], runner.temp / "signed" / "h200" / SIGNED[0].name)
    r = runner.run("evidence-sign.yml", "merge", "merge", values())
    assert r.returncode == 0 and runner.outputs() == {"status": "2"}
    assert "no signed pack of: h100" in (runner.temp / "merged" / "merge.log").read_text()


@needs_signed
def test_merge_step_refuses_an_unsigned_member(runner):
    shutil.copytree(SIGNED[0], runner.temp / "signed" / "h200" / SIGNED[0].name)
    shutil.copytree(UNSIGNED, runner.temp / "signed" / "h100" / UNSIGNED.name)
    r = runner.run("evidence-sign.yml", "merge", "merge", values())
    assert r.returncode == 0 and runner.outputs().get("status") == "2" and "made" not in runner.outputs()


PUBLISH_VALUES = {"${{ github.token }}": "t", "${{ needs.pr.outputs.number }}": "42",
                  "${{ github.server_url }}": "https://github.com", "${{ github.repository }}": "owner/repo",
                  "${{ github.run_id }}": "9"}


def test_publish_publishes_nothing_when_the_pull_request_moved_on(runner):
    runner.gh(pulls=pull(sha=OTHER_SHA))
    r = runner.run("evidence-sign.yml", "publish", "current", values(**PUBLISH_VALUES))
    assert r.returncode == 0 and "current" not in runner.outputs() and "nothing published" in r.stdout
    runner.gh(pulls=pull())
    r = runner.run("evidence-sign.yml", "publish", "current", values(**PUBLISH_VALUES))
    assert r.returncode == 0 and runner.outputs() == {"current": "true"}


def test_failed_comment_quotes_pack_made_logs_inertly(runner, tmp_path):
    merged = runner.temp / "merged"
    merged.mkdir()
    (merged / "merge.log").write_text("refused: x\n```\n<img src=x onerror=alert(1)>\n~~~\n[link](https://evil)\x1b[31m\n")
    (merged / "intake.log").write_text("refused h200: `whoami`\n")
    gh = runner.bin / "gh"  # pr-evidence.sh needs `pr view`, `label list`, `pr edit` and comment posting
    gh.write_text(textwrap.dedent(f'''
        #!/usr/bin/env bash
        printf '%s\\n' "$*" >>{tmp_path / "gh-all.log"}
        for a in "$@"; do case $a in body=@*) cp "${{a#body=@}}" {tmp_path / "body.md"} ;; esac; done
        exit 0
    ''').lstrip())
    r = runner.run("evidence-sign.yml", "publish", "Label evidence:failed", values(**PUBLISH_VALUES))
    assert r.returncode == 1 and "labelled evidence:failed" in r.stdout, r.stdout + r.stderr
    body = (tmp_path / "body.md").read_text()
    fences = [ln for ln in body.splitlines() if ln.startswith("```")]
    assert len(fences) == 4 and body.count("`") == 4 * 3 + 2  # the fences, and `python -m evpack merge`
    assert "~" not in body and "\x1b" not in body
    assert "<img src=x onerror=alert(1)>" in body.split("```")[3]  # only inside a code block
    assert "pr edit 42" in (tmp_path / "gh-all.log").read_text()


# A gh for pr-evidence.sh's labels: the PR carries a stale evidence:complete; the call named FAIL
# fails as an API outage would. Every call is logged, a line each.
LABELS_GH = textwrap.dedent(r'''
    #!/usr/bin/env bash
    printf '%s\n' "$*" >>{log}
    [ "$1 $2" != {fail} ] || {{ echo "HTTP 502: Bad Gateway (https://api.github.com/graphql)" >&2; exit 1; }}
    case "$1 $2" in
    "pr view") printf '%s\n' evidence:complete tensor-cores-verified ;;
    "label list") printf '%s\n' evidence:complete evidence:partial evidence:failed tensor-cores-verified ;;
    esac
    exit 0
''').lstrip()


@pytest.mark.parametrize("fail", ["nothing", "pr view", "label list"])
def test_labels_are_left_alone_when_the_current_ones_cannot_be_read(runner, tmp_path, fail):
    """pr-evidence.sh reads the PR's labels (and the repository's) before it edits them: when a read
    fails it stops, and never adds evidence:failed beside a stale evidence:complete."""
    log = tmp_path / "gh-all.log"
    (runner.bin / "gh").write_text(LABELS_GH.format(log=shlex.quote(str(log)), fail=shlex.quote(fail)))
    r = runner.run("evidence-sign.yml", "publish", "Label evidence:failed", values(**PUBLISH_VALUES))
    edits = [ln for ln in log.read_text().splitlines() if ln.startswith("pr edit ")]
    if fail == "nothing":
        assert r.returncode == 1 and "labelled evidence:failed" in r.stdout, r.stdout + r.stderr
        assert len(edits) == 1 and "--add-label evidence:failed" in edits[0], edits
        assert "--remove-label evidence:complete" in edits[0], edits
        return
    assert not edits, f"`gh {fail}` failed, yet pr-evidence.sh went on and edited the labels: {edits}"
    assert r.returncode == 2 and "pr-evidence: cannot read the labels of " in r.stderr, (r.returncode, r.stderr)
    assert "labelled evidence:failed" not in r.stdout
