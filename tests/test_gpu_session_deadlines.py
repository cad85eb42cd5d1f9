"""scripts/gpu-session never waits forever on a host.

Hosts that take the connection and then never answer, all on 127.0.0.1 and started here:
a listener that accepts and stays silent, one that sends an SSH banner and then nothing
(key exchange never ends), a real sshd whose every command sleeps, one whose rsync sleeps,
and a real session whose sshd is frozen (SIGSTOP) mid-`follow`. Each verb must give up
within its deadline (set short through the environment here) with one line that names the
verb and the host, exit 5, and leave no ssh behind.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ssh_helpers import LOOPBACK, fake_home_command, start_sshd, stop_sshd  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEADLINE = 3  # seconds, EVPACK_TIMEOUT_S in these tests
SLACK = 15  # what a loaded test machine may add: kill-after (5 s), process start, ssh's own exit
PACK_ID = "20250101T000000Z-0123456789ab"
TOKEN = "0123456789abcdef" * 2


# ------------------------------------------------------------------ hosts that never answer
class Listener:
    """127.0.0.1:<port> that accepts every connection and keeps it open without a word
    (or after an SSH banner), until the test ends."""

    def __init__(self, banner: bytes = b"") -> None:
        self.banner = banner
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((LOOPBACK, 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            if self.banner:
                conn.sendall(self.banner)
            self.conns.append(conn)  # held open, never read, never answered

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.fixture()
def silent():
    lst = Listener()
    yield lst
    lst.close()


@pytest.fixture()
def banner_only():
    lst = Listener(b"SSH-2.0-OpenSSH_9.2p1\r\n")
    yield lst
    lst.close()


@pytest.fixture(scope="module")
def sleepy_sshd(tmp_path_factory):
    """A real sshd: authentication works, then every command sleeps (bounded: 30 s)."""
    server = start_sshd(tmp_path_factory.mktemp("sleepy"), force_command="exec sleep 30")
    yield server
    stop_sshd(server.proc)


@pytest.fixture(scope="module")
def rsync_sleepy_sshd(tmp_path_factory):
    """A real sshd with a fake home whose remote.sh answers, but whose rsync sleeps."""
    tmp = tmp_path_factory.mktemp("rsync-sleepy")
    home_file = tmp / "home"
    home_file.write_text("/nonexistent\n")
    cmd = 'case "$SSH_ORIGINAL_COMMAND" in *" --server "*) exec sleep 30 ;; esac; ' + fake_home_command(home_file)
    server = start_sshd(tmp / "server", force_command=cmd)
    server.home_file = home_file  # type: ignore[attr-defined]
    yield server
    stop_sshd(server.proc)


# ------------------------------------------------------------------ a checkout and a session file
class Local:
    def __init__(self, tmp: Path, port: int, user: str = "nobody", identity: Path | None = None,
                 remote_dir: Path | None = None, known_hosts: Path | None = None) -> None:
        self.tmp = tmp
        self.co = tmp / "checkout"
        shutil.copytree(REPO / "scripts", self.co / "scripts")
        self.calls = tmp / "provider-calls"
        self.hook = tmp / "hook.sh"
        self.hook.write_text(f"provider_stop() {{ echo stop >> {self.calls}; }}\n")
        self.remote = remote_dir or tmp / "host" / "evidence-pack"
        lines = [f"host={LOOPBACK}", f"port={port}", f"user={user}", f"remote_dir={self.remote}",
                 f"token={TOKEN}", "started_at=2025-01-01T00:00:00Z", f"started_epoch={int(time.time()) - 7200}",
                 f"provider_hook={self.hook}", "idle_action=stop"]
        if identity:
            lines.append(f"identity={identity}")
        (self.co / ".gpu-session").write_text("\n".join(lines) + "\n")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("EVPACK_")}
        self.env.update(EVPACK_TIMEOUT_S=str(DEADLINE), EVPACK_SSH_CONNECT_TIMEOUT="30",
                        EVPACK_SSH_OPTS=(f"-F /dev/null -o UserKnownHostsFile={known_hosts or tmp / 'known_hosts'} "
                                         "-o LogLevel=ERROR"))

    def gs(self, *argv: str, env: dict | None = None, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
        t0 = time.monotonic()
        r = subprocess.run(["scripts/gpu-session", *argv], cwd=self.co, env={**self.env, **(env or {})},
                           capture_output=True, text=True, timeout=timeout)
        return r, time.monotonic() - t0

    def provider_calls(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


def ssh_left(port: int) -> list[str]:
    """Command lines of processes still talking to 127.0.0.1:<port> (ssh, rsync, timeout)."""
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv if a]
        if any(w in ("ssh", "rsync") or w.endswith(("/ssh", "/rsync")) for w in words) and str(port) in words:
            left.append(" ".join(words))
    return left


def no_ssh_left(port: int, within: float = 12) -> None:
    deadline = time.monotonic() + within
    while ssh_left(port) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not ssh_left(port), ssh_left(port)


def gave_up(r: subprocess.CompletedProcess, took: float, verb: str, port: int) -> None:
    """Exit 5 after the deadline and before deadline + slack, with our one line, naming both."""
    assert r.returncode == 5, (verb, r.returncode, r.stdout, r.stderr)
    assert DEADLINE - 0.5 <= took < DEADLINE + SLACK, (verb, took, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert re.match(rf"gpu-session: {re.escape(verb)}: {LOOPBACK}:{port} did not answer within {DEADLINE}s ",
                    lines[0]), lines[0]


# ------------------------------------------------------------------ the verbs
VERBS = {"status": ["status"], "fetch": ["fetch"], "idle-guard": ["idle-guard", "--minutes", "1"],
         "follow": ["follow"], "stop": ["stop"], "sync": ["sync", "--delete"], "run": ["run"]}


@pytest.mark.parametrize("verb", sorted(VERBS))
@pytest.mark.parametrize("server", ["silent", "banner_only"])
def test_host_that_never_answers(tmp_path, request, server, verb):
    lst = request.getfixturevalue(server)
    local = Local(tmp_path, lst.port)
    r, took = local.gs(*VERBS[verb])
    gave_up(r, took, verb, lst.port)
    assert local.provider_calls() == []  # never stops a host it could not ask
    no_ssh_left(lst.port)


@pytest.mark.parametrize("verb", ["status", "fetch", "idle-guard", "sync"])
def test_host_whose_commands_never_return(tmp_path, sleepy_sshd, verb):
    s = sleepy_sshd
    local = Local(tmp_path, s.port, s.user, s.client_key, known_hosts=s.known_hosts)
    r, took = local.gs(*VERBS[verb])
    gave_up(r, took, verb, s.port)
    assert local.provider_calls() == []
    no_ssh_left(s.port)


def test_init_against_a_host_that_never_answers(tmp_path, sleepy_sshd):
    s = sleepy_sshd
    local = Local(tmp_path, s.port, known_hosts=s.known_hosts)
    (local.co / ".gpu-session").unlink()
    r, took = local.gs("init", "--host", LOOPBACK, "--port", str(s.port), "--user", s.user,
                       "--identity", str(s.client_key), "--remote-dir", "evidence-pack")
    gave_up(r, took, "init", s.port)
    assert not (local.co / ".gpu-session").exists()


@pytest.mark.parametrize("verb", ["fetch", "sync"])
def test_rsync_that_never_returns(tmp_path, rsync_sleepy_sshd, verb):
    """remote.sh answers; the rsync of the verb hangs: the rsync has the deadline too."""
    s = rsync_sleepy_sshd
    home = tmp_path / "home"
    remote = home / "evidence-pack"
    pack = remote / "artifacts" / "packs" / PACK_ID
    pack.mkdir(parents=True)
    (pack / "pack.json").write_text("{}\n")
    (remote / "artifacts" / "packs" / "latest").symlink_to(PACK_ID)
    (remote / ".evpack-session").write_text(f"evpack-session {TOKEN}\n")
    s.home_file.write_text(f"{home}\n")  # type: ignore[attr-defined]
    local = Local(tmp_path, s.port, s.user, s.client_key, remote_dir=remote, known_hosts=s.known_hosts)
    r, took = local.gs(*VERBS[verb])
    gave_up(r, took, verb, s.port)
    assert "rsync" in r.stderr, r.stderr
    no_ssh_left(s.port)
    packs = local.co / "artifacts" / "packs"
    assert not packs.exists() or not list(packs.iterdir()), list(packs.iterdir())  # no pack, no partial copy


def test_connect_timeout(tmp_path, silent):
    """With a connect timeout below the deadline, ssh itself gives up at the banner."""
    local = Local(tmp_path, silent.port)
    r, took = local.gs("status", env={"EVPACK_SSH_CONNECT_TIMEOUT": "1", "EVPACK_TIMEOUT_S": "60"})
    assert r.returncode == 5 and took < 1 + SLACK, (r.returncode, took, r.stderr)
    assert f"status: cannot reach {LOOPBACK}:{silent.port}" in r.stderr.splitlines()[-1], r.stderr


def test_per_verb_deadline_overrides_the_global_one(tmp_path, silent):
    local = Local(tmp_path, silent.port)
    r, took = local.gs("status", env={"EVPACK_TIMEOUT_S": "600", "EVPACK_TIMEOUT_STATUS_S": str(DEADLINE)})
    gave_up(r, took, "status", silent.port)
    r, took = local.gs("idle-guard", "--minutes", "1",
                       env={"EVPACK_TIMEOUT_S": "600", "EVPACK_TIMEOUT_IDLE_GUARD_S": str(DEADLINE)})
    gave_up(r, took, "idle-guard", silent.port)
    assert "EVPACK_TIMEOUT_IDLE_GUARD_S" in r.stderr


@pytest.mark.parametrize("value", ["0", "-1", "1e3", "soon", "1000000", "$(touch PWNED)"])
def test_deadline_values_are_checked(tmp_path, silent, value):
    local = Local(tmp_path, silent.port)
    for var in ("EVPACK_TIMEOUT_S", "EVPACK_TIMEOUT_STATUS_S", "EVPACK_SSH_ALIVE_S", "EVPACK_SSH_CONNECT_TIMEOUT"):
        r, _ = local.gs("status", env={var: value})
        assert r.returncode == 2 and var in r.stderr and r.stderr.count("\n") == 1, (var, value, r.stderr)
    assert not list(tmp_path.rglob("PWNED"))


def test_idle_guard_every_keeps_watching_a_silent_host(tmp_path, silent):
    """`--every`: a round that gets no answer ends that round only; the guard goes on."""
    local = Local(tmp_path, silent.port)
    err = tmp_path / "guard.err"
    with open(err, "w") as fh:
        p = subprocess.Popen(["scripts/gpu-session", "idle-guard", "--minutes", "1", "--every", "1"], cwd=local.co,
                             env={**local.env, "EVPACK_TIMEOUT_S": "2"}, stdout=subprocess.DEVNULL, stderr=fh,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while err.read_text().count("did not answer within 2s") < 2 and time.monotonic() < deadline:
            assert p.poll() is None, err.read_text()
            time.sleep(0.2)
        assert err.read_text().count("did not answer within 2s") >= 2, err.read_text()
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=20)
    assert local.provider_calls() == []
    no_ssh_left(silent.port)


def test_provider_hook_that_never_returns(tmp_path, silent):
    local = Local(tmp_path, silent.port)
    local.hook.write_text("provider_stop() { sleep 29.5; }\n")
    r, took = local.gs("stop", "--force", env={"EVPACK_TIMEOUT_HOOK_S": "2"})
    assert r.returncode == 1 and took < 2 + SLACK, (r.returncode, took, r.stderr)
    assert r.stderr.count("\n") == 1 and "provider_stop" in r.stderr and "within 2s" in r.stderr, r.stderr
    # The hook's children went with it (the hook runs in a process group of its own).
    time.sleep(0.5)
    left = [pid for pid in filter(str.isdigit, os.listdir("/proc"))
            if Path(f"/proc/{pid}/cmdline").exists() and b"29.5" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert not left, left
    assert "stopped_at" not in (local.co / ".gpu-session").read_text()
    for bad in ("0", "ten", "$(touch PWNED)"):
        r, _ = local.gs("stop", "--force", env={"EVPACK_TIMEOUT_HOOK_S": bad})
        assert r.returncode == 2 and "EVPACK_TIMEOUT_HOOK_S" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not list(tmp_path.rglob("PWNED"))


# ------------------------------------------------------------------ follow: the server stops answering
@pytest.fixture()
def live_sshd(tmp_path):
    home_file = tmp_path / "home-file"
    server = start_sshd(tmp_path / "sshd", home_file=home_file)
    server.home_file = home_file  # type: ignore[attr-defined]
    yield server
    thaw(server.proc.pid)
    stop_sshd(server.proc)


def thaw(root: int) -> None:
    """SIGCONT to every process below `root` (a test froze them); one that ended meanwhile is skipped."""
    for pid in descendants(root):
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def descendants(root: int) -> list[int]:
    parent: dict[int, int] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        parent[int(pid)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def test_follow_ends_when_the_host_stops_answering(tmp_path, live_sshd):
    """follow streams without an overall deadline, but ssh's ServerAlive ends it when the
    host no longer answers: here its sshd is frozen mid-stream (SIGSTOP)."""
    s = live_sshd
    home = tmp_path / "home"
    home.mkdir()
    s.home_file.write_text(f"{home}\n")  # type: ignore[attr-defined]
    local = Local(tmp_path, s.port, s.user, s.client_key, known_hosts=s.known_hosts)
    (local.co / ".gpu-session").unlink()
    env = {"EVPACK_TIMEOUT_S": "60", "EVPACK_HEARTBEAT_S": "1",
           "EVPACK_REMOTE_CMD": "for i in $(seq 1 600); do echo line $i; sleep 0.1; done"}
    r, _ = local.gs("init", "--host", LOOPBACK, "--port", str(s.port), "--user", s.user,
                    "--identity", str(s.client_key), "--remote-dir", "evidence-pack", env=env)
    assert r.returncode == 0, r.stderr
    r, _ = local.gs("run", env=env)
    assert r.returncode == 0, r.stderr
    mirror = local.co / ".gpu-session.d"
    p = subprocess.Popen(["scripts/gpu-session", "follow"], cwd=local.co,
                         env={**local.env, **env, "EVPACK_SSH_ALIVE_S": "1"},
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(m.read_text().count("\n") >= 3 for m in mirror.glob("log-*")):
            time.sleep(0.1)
        assert any(m.read_text().count("\n") >= 3 for m in mirror.glob("log-*")), "follow streamed nothing"
        frozen = []
        for pid in descendants(s.proc.pid):
            try:
                os.kill(pid, signal.SIGSTOP)
                frozen.append(pid)
            except ProcessLookupError:  # a short-lived child (the per-line shell's `sleep`) already gone
                pass
        assert frozen, "no sshd session to freeze"
        t0 = time.monotonic()
        _, err = p.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
        thaw(s.proc.pid)
        pid_file = home / "evidence-pack" / ".evpack-run" / "pid"
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGTERM)  # the run this test started
            except ProcessLookupError:
                pass
    assert p.returncode == 5, (p.returncode, err)
    assert took < 3 * 1 + SLACK, took  # ServerAliveInterval 1 s, 3 unanswered
    assert f"follow: cannot reach {LOOPBACK}:{s.port} over ssh, or it stopped answering" in err, err
