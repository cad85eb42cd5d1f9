"""scripts/gpu-session against a real OpenSSH server on 127.0.0.1.

The "GPU host" is this machine through a throwaway sshd on the loopback; the "remote
checkout" is a temp folder. The evidence command is a stub that writes a fake pack slowly,
so a run can be interrupted, followed, fetched and guarded. The session commands are read
from docs/cloud-gpu-sessions.md
and run as written, with only option values replaced: the doc cannot drift from the tests.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import GIT_AS_TESTER  # noqa: E402
from ssh_helpers import LOOPBACK, SshServer, free_port, start_sshd, stop_sshd  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CLOUD_DOC = REPO / "docs" / "cloud-gpu-sessions.md"
PACK_ID = "20250101T000000Z-0123456789ab"
STAGE_LINES = [f"stage {i}" for i in range(1, 9)]
HELD_AFTER = 3  # the stub prints this many lines, then waits for the test's release file

FAKE_EVIDENCE = f"""#!/usr/bin/env bash
# Stub for `nox -s evidence`: some output, a wait for $RELEASE (so the test decides when the
# run ends, whatever the machine's load), the rest, then a pack folder and packs/latest.
set -euo pipefail
lines=({' '.join(repr(s) for s in STAGE_LINES)})
for line in "${{lines[@]:0:{HELD_AFTER}}}"; do echo "$line"; sleep 0.1; done
for _ in $(seq 1 600); do [ -e "$RELEASE" ] && break; sleep 0.1; done
for line in "${{lines[@]:{HELD_AFTER}}}"; do echo "$line"; sleep 0.1; done
tmp=artifacts/packs/.{PACK_ID}.tmp
mkdir -p "$tmp"
echo '{{"schema_version": 1, "pack_id": "{PACK_ID}", "label": "evidence:partial"}}' > "$tmp/pack.json"
echo '{{"gpu_name": "stub"}}' > "$tmp/env.json"
echo '{{"files": {{}}}}' > "$tmp/index.json"
mv "$tmp" artifacts/packs/{PACK_ID}
ln -sfn {PACK_ID} artifacts/packs/latest
echo "pack written"
"""

VERIFY_STUB = """import pathlib, sys
pack = pathlib.Path(sys.argv[1])
ok = (pack / "index.json").is_file() and (pack / "pack.json").is_file()
pathlib.Path(sys.argv[0]).with_name("verified").write_text(f"{pack} {ok}\\n")
sys.exit(0 if ok else 1)
"""

HOOK = """provider_stop() {{ echo "stop $EVPACK_HOST:$EVPACK_PORT" >> {marker}; }}
provider_start() {{ echo "start $EVPACK_HOST" >> {marker}; }}
"""


# ------------------------------------------------------------------ the doc's commands
def doc_commands() -> list[str]:
    """The scripts/... lines of the fenced bash blocks in the cloud-GPU doc."""
    section = CLOUD_DOC.read_text()
    cmds = []
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
        cmds += [ln.strip() for ln in block.splitlines() if ln.strip().startswith("scripts/")]
    return cmds


class Doc:
    """Hands out the doc's commands with option values replaced, and records which ran."""

    def __init__(self) -> None:
        self.commands = doc_commands()
        self.used: set[str] = set()

    def argv(self, line: str, **values: str) -> list[str]:
        """The documented command `line` (exactly as written), with some option values replaced."""
        assert line in self.commands, f"the cloud-GPU doc has no command {line!r}: {self.commands}"
        self.used.add(line)
        argv = shlex.split(line)
        for opt, value in values.items():
            flag = "--" + opt.replace("_", "-")
            assert flag in argv, f"{flag} is not in the documented command {line!r}"
            argv[argv.index(flag) + 1] = value
        return argv


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    stop_sshd(server.proc)


@pytest.fixture()
def world(tmp_path, sshd: SshServer):
    """A fake checkout (a git repo with this repo's scripts/), a remote folder, stubs."""
    co = tmp_path / "checkout"
    shutil.copytree(REPO / "scripts", co / "scripts")
    (co / "fake_evidence.sh").write_text(FAKE_EVIDENCE)
    shutil.copy(REPO / ".gitignore", co / ".gitignore")
    (co / "build").mkdir()
    (co / "build" / "junk.o").write_text("build output, never synced")
    (co / "kernel.so").write_text("not synced either")
    git = [*GIT_AS_TESTER, "-C", str(co)]
    subprocess.run(["git", "init", "-q", str(co)], check=True, timeout=20)
    subprocess.run([*git, "add", "scripts", "fake_evidence.sh", ".gitignore"], check=True, timeout=20)
    subprocess.run([*git, "commit", "-q", "-m", "fake checkout"], check=True, timeout=20)
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "verify.py").write_text(VERIFY_STUB)
    marker = tmp_path / "provider-calls"
    (stubs / "hook.sh").write_text(HOOK.format(marker=shlex.quote(str(marker))))
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVPACK_")}
    env.update(
        EVPACK_SSH_OPTS=sshd.ssh_opts,
        EVPACK_REMOTE_CMD=f"RELEASE={shlex.quote(str(tmp_path / 'release'))} bash fake_evidence.sh",
        EVPACK_HEARTBEAT_S="1",
        EVPACK_VERIFY_CMD=f"{sys.executable} {stubs / 'verify.py'}",
        EVPACK_SSH_CONNECT_TIMEOUT="5",
        TMPDIR=str(tmp_path),  # what a killed gpu-session leaves (the dropped follow) stays in the test's folder
    )
    return dict(co=co, remote=tmp_path / "remote", env=env, marker=marker, stubs=stubs, sshd=sshd,
                release=tmp_path / "release")


def gs(world, argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=world["co"], env=world["env"], capture_output=True, text=True,
                          timeout=timeout)


def init_argv(doc: Doc, world) -> list[str]:
    s: SshServer = world["sshd"]
    assert s.host == LOOPBACK
    (line,) = [c for c in doc.commands if c.startswith("scripts/gpu-session init ")]
    return doc.argv(line, host=LOOPBACK, port=str(s.port), user=s.user,
                    identity=str(s.client_key), remote_dir=str(world["remote"]), rate="2.40",
                    provider_hook=str(world["stubs"] / "hook.sh"))


def ok(r: subprocess.CompletedProcess, code: int = 0) -> str:
    assert r.returncode == code, f"exit {r.returncode} (wanted {code})\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout + r.stderr


def wait_for(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def provider_calls(world) -> list[str]:
    m = world["marker"]
    return m.read_text().splitlines() if m.exists() else []


# ------------------------------------------------------------------ the whole session
def test_session_sync_run_drop_follow_fetch_guard(world):
    doc = Doc()
    co, remote, sshd = world["co"], world["remote"], world["sshd"]

    ok(gs(world, init_argv(doc, world)))
    session = (co / ".gpu-session").read_text()
    assert f"host={LOOPBACK}" in session and "rate=2.40" in session
    assert re.search(r"^started_at=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", session, flags=re.M)

    ok(gs(world, doc.argv("scripts/gpu-session sync")))
    assert (remote / "fake_evidence.sh").is_file() and (remote / ".git").is_dir()
    assert not (remote / "build").exists() and not (remote / "kernel.so").exists()
    assert not (remote / ".gpu-session").exists()

    out = ok(gs(world, doc.argv("scripts/gpu-session run")))
    assert "started run" in out
    assert ok(gs(world, doc.argv("scripts/gpu-session status"))).startswith("running")
    # A second run is refused while the first is alive; so is the idle guard, whatever N.
    assert "already active" in ok(gs(world, doc.argv("scripts/gpu-session run")), 3)
    assert "refusing to stop" in ok(gs(world, doc.argv("scripts/idle-guard --minutes 30", minutes="0")), 3)
    assert provider_calls(world) == []

    # follow, then drop the connection mid-stream (kill the local ssh and all its pipeline).
    mirror = co / ".gpu-session.d"
    follow = subprocess.Popen(doc.argv("scripts/gpu-session follow"), cwd=co, env=world["env"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_for(lambda: any(p.read_text().count("\n") >= 2 for p in mirror.glob("log-*")), 15,
                 "two log lines through follow")
    finally:
        os.killpg(follow.pid, signal.SIGKILL)
        follow.communicate(timeout=10)
    assert follow.returncode == -signal.SIGKILL
    (log_copy,) = mirror.glob("log-*")
    got_before = log_copy.read_text()
    assert got_before.startswith("stage 1\nstage 2\n")

    # The run survived the drop; reconnect and pick up where the dropped follow stopped.
    status = ok(gs(world, doc.argv("scripts/gpu-session status")))
    assert status.startswith("running"), status
    world["release"].touch()  # let the stub finish
    r = gs(world, doc.argv("scripts/gpu-session follow"), timeout=30)
    out = ok(r)
    assert "picking up" in r.stderr and "exit code 0" in r.stderr
    remote_log = (remote / ".evpack-run" / "log").read_text()
    assert log_copy.read_text() == remote_log == "\n".join(STAGE_LINES + ["pack written"]) + "\n"
    assert got_before + r.stdout == remote_log  # nothing repeated, nothing lost
    assert ok(gs(world, doc.argv("scripts/gpu-session status"))).startswith("done rc=0")
    # The session's own files on the host (.evpack-run/, the pack) do not make the tree dirty.
    porcelain = subprocess.run(["git", "-C", str(remote), "status", "--porcelain", "--untracked-files=normal"],
                               capture_output=True, text=True, timeout=20, check=True).stdout
    assert porcelain == "", porcelain

    out = ok(gs(world, doc.argv("scripts/gpu-session fetch")))
    pack = co / "artifacts" / "packs" / PACK_ID
    assert (pack / "index.json").is_file() and (pack / "pack.json").is_file()
    assert os.readlink(co / "artifacts" / "packs" / "latest") == PACK_ID
    # Verified in its .partial folder before it was moved into place; nothing else left behind.
    checked, ok_word = (world["stubs"] / "verified").read_text().split()
    assert ok_word == "True" and Path(checked).name == PACK_ID, checked
    assert Path(checked).parent.name.startswith(f".{PACK_ID}.partial."), checked
    assert sorted(p.name for p in (co / "artifacts" / "packs").iterdir()) == [PACK_ID, "latest"]
    # Fetching the same pack again never replaces it.
    r = gs(world, doc.argv("scripts/gpu-session fetch"))
    assert ok(r, 8) and "already here" in r.stderr

    # Idle guard after the run: not idle for 30 minutes yet -> nothing; idle -> warn or stop.
    out = ok(gs(world, doc.argv("scripts/idle-guard --minutes 30")))
    assert "nothing to do" in out and provider_calls(world) == []
    time.sleep(1.3)  # the host's clock counts whole seconds
    out = ok(gs(world, doc.argv("scripts/idle-guard --minutes 30 --warn-only", minutes="0.01")))
    assert "WARNING" in out and provider_calls(world) == []
    out = ok(gs(world, doc.argv("scripts/idle-guard --minutes 30 --every 60", minutes="0.01"), timeout=20))
    assert "stopping it" in out
    assert provider_calls(world) == [f"stop {LOOPBACK}:{sshd.port}"]
    assert "stopped_at=" in (co / ".gpu-session").read_text()

    cost = ok(gs(world, doc.argv("scripts/gpu-session cost")))
    m = re.match(r"cost: (\d+\.\d+) h x 2\.40 USD/h = (\d+\.\d\d) USD since \S+ \(stopped\)", cost)
    assert m, cost
    assert float(m.group(1)) < 0.1 and float(m.group(2)) < 0.25

    ok(gs(world, doc.argv("scripts/gpu-session stop")))
    assert provider_calls(world) == [f"stop {LOOPBACK}:{sshd.port}"] * 2

    # start: provider_start, and the cost clock starts again.
    ok(gs(world, ["scripts/gpu-session", "start"]))
    assert provider_calls(world)[-1] == f"start {LOOPBACK}"
    assert "(running)" in ok(gs(world, doc.argv("scripts/gpu-session cost")))

    missing = set(doc.commands) - doc.used
    assert not missing, f"documented commands the test did not run: {sorted(missing)}"


# ------------------------------------------------------------------ errors
def test_missing_session_file_is_a_clear_error(world):
    r = gs(world, ["scripts/gpu-session", "status"])
    assert r.returncode == 2 and "no session file" in r.stderr and "init --host" in r.stderr


def test_unknown_verb_and_option(world):
    r = gs(world, ["scripts/gpu-session", "launch"])
    assert r.returncode == 2 and "unknown verb 'launch'" in r.stderr
    r = gs(world, ["scripts/gpu-session", "init", "--hots", LOOPBACK])
    assert r.returncode == 2 and "unknown option '--hots'" in r.stderr
    r = gs(world, ["scripts/gpu-session"])
    assert r.returncode == 2 and "no verb" in r.stderr


def init_loopback(world, *extra: str) -> subprocess.CompletedProcess:
    s = world["sshd"]
    return gs(world, ["scripts/gpu-session", "init", "--host", LOOPBACK, "--port", str(s.port), "--user", s.user,
                      "--identity", str(s.client_key), "--remote-dir", str(world["remote"]), *extra])


def test_unreachable_host(world):
    closed = free_port()  # nothing listens there: the connection is refused on the loopback
    r = gs(world, ["scripts/gpu-session", "init", "--host", LOOPBACK, "--port", str(closed)])
    assert r.returncode == 5 and f"cannot reach {LOOPBACK}:{closed}" in r.stderr, (r.returncode, r.stderr)
    assert not (world["co"] / ".gpu-session").exists()  # nothing written when the host is not there
    ok(init_loopback(world))
    sf = world["co"] / ".gpu-session"
    sf.write_text(re.sub(r"^port=\d+$", f"port={closed}", sf.read_text(), flags=re.M))
    for verb in ("status", "sync", "run", "idle-guard --minutes 1", "fetch"):
        r = gs(world, ["scripts/gpu-session", *verb.split()])
        assert r.returncode == 5, (verb, r.stdout, r.stderr)
        assert f"cannot reach {LOOPBACK}:{closed}" in r.stderr
    assert provider_calls(world) == []


def test_init_refuses_to_overwrite_and_session_file_option(world):
    sf = world["co"] / "other-session"
    ok(init_loopback(world, "--session-file", str(sf)))
    assert "already exists" in ok(init_loopback(world, "--session-file", str(sf)), 2)
    token = re.search(r"^token=([0-9a-f]{32})$", sf.read_text(), flags=re.M).group(1)
    # --force for the same host and folder: the folder is this session's (its marker holds the
    # token of the session file being replaced), so it is kept, with the same token.
    out = ok(init_loopback(world, "--session-file", str(sf), "--force"))
    assert "is this session's folder already" in out, out
    assert f"token={token}" in sf.read_text()
    assert (world["remote"] / ".evpack-session").read_text() == f"evpack-session {token}\n"
    assert not (world["co"] / ".gpu-session").exists()
    # Without the session file that made it, the folder is one init did not create: refused.
    r = init_loopback(world)
    assert r.returncode == 2 and "exists already" in r.stderr, r.stderr
    assert not (world["co"] / ".gpu-session").exists()


def test_nothing_to_follow_or_fetch_and_no_hook(world):
    ok(init_loopback(world))
    assert ok(gs(world, ["scripts/gpu-session", "status"])).startswith("idle")
    ok(gs(world, ["scripts/gpu-session", "sync"]))
    assert "no run" in ok(gs(world, ["scripts/gpu-session", "follow"]), 4)
    assert "no pack" in ok(gs(world, ["scripts/gpu-session", "fetch"]), 4)
    assert "no provider hook" in ok(gs(world, ["scripts/gpu-session", "stop"]), 2)
    # Just synced: the sync counts as activity, so a 1-minute guard leaves the host alone.
    assert "nothing to do" in ok(gs(world, ["scripts/gpu-session", "idle-guard", "--minutes", "1"]))


def test_stale_run_is_not_active(world):
    """A run whose heartbeat stopped (killed machine, OOM) does not block the guard."""
    s = world["sshd"]
    ok(init_loopback(world, "--provider-hook", str(world["stubs"] / "hook.sh")))
    run = world["remote"] / ".evpack-run"
    run.mkdir(parents=True)
    (run / "state").write_text("running\n")
    (run / "heartbeat_s").write_text("1\n")
    (run / "log").write_text("half a log\n")
    (run / "run_id").write_text("crashed\n")
    old = time.time() - 600
    for name in ("state", "heartbeat_s", "log", "run_id"):
        os.utime(run / name, (old, old))
    (run / "heartbeat").touch()
    os.utime(run / "heartbeat", (old, old))
    assert ok(gs(world, ["scripts/gpu-session", "status"])).startswith("stale")
    assert "died" in ok(gs(world, ["scripts/gpu-session", "follow"]), 6)
    out = ok(gs(world, ["scripts/gpu-session", "idle-guard", "--minutes", "5"]))
    assert "stopping it" in out and provider_calls(world) == [f"stop {LOOPBACK}:{s.port}"]
