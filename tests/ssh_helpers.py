"""A throwaway OpenSSH server on 127.0.0.1 for the gpu-session tests.

Only the loopback is ever used: the server listens on 127.0.0.1 and clients are pointed
at 127.0.0.1. Keys, config, pid file and known_hosts all live in a temporary folder.
`start_sshd(tmp, home_file=F)` gives every session a fake home: the folder named in the file
F is its HOME and its login folder (a ForceCommand), so a test can aim `~` and relative paths
at a temporary folder instead of the real home (each test writes its own folder into F);
`force_command=` replaces the command altogether (a host that never answers). The server's
host key is pinned in its own known_hosts (gpu-session checks host keys strictly).
When sshd is missing or cannot start the tests skip with the reason, except under CI
(CI set in the environment), where the SSH tests are a deliverable and must run.
"""
from __future__ import annotations

import getpass
import hashlib
import os
import shlex
import shutil
import socket
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

LOOPBACK = "127.0.0.1"
SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd", "/usr/bin/sshd")


def missing(reason: str) -> None:
    """Skip locally; under CI the environment must provide the tool, so fail instead."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: install openssh-server, openssh-client and rsync)")
    pytest.skip(reason)


def find_sshd() -> str | None:
    found = shutil.which("sshd")
    if found:
        return found
    for cand in SSHD_CANDIDATES:
        if os.access(cand, os.X_OK):
            return cand
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _banner(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5) as s:
            return s.recv(4).startswith(b"SSH-")
    except OSError:
        return False


@dataclass
class SshServer:
    port: int
    user: str
    client_key: Path
    known_hosts: Path
    log: Path
    proc: subprocess.Popen

    @property
    def host(self) -> str:
        return LOOPBACK

    @property
    def ssh_opts(self) -> str:
        """Extra client options (EVPACK_SSH_OPTS): no user config, the known_hosts that pins this server."""
        return f"-F /dev/null -o UserKnownHostsFile={self.known_hosts} -o LogLevel=ERROR"

    def ssh(self, command: str, timeout: float = 20) -> subprocess.CompletedProcess:
        argv = ["ssh", "-p", str(self.port), "-l", self.user, "-i", str(self.client_key),
                "-o", "BatchMode=yes", *self.ssh_opts.split(), LOOPBACK, command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "evpack-test", "-f", str(path)],
                   check=True, capture_output=True, timeout=30)


def known_hosts_line(port: int, public_key: Path) -> str:
    """The known_hosts line that pins public_key (a .pub file) for 127.0.0.1:port."""
    key_type, key = public_key.read_text().split()[:2]
    return f"[{LOOPBACK}]:{port} {key_type} {key}\n"


def fake_home_command(home_file: Path) -> str:
    """A ForceCommand: the client's command, run in the folder named in home_file, as HOME."""
    f = shlex.quote(str(home_file))
    return f'h=$(cat {f}) && cd "$h" && HOME=$h exec bash -c "$SSH_ORIGINAL_COMMAND"'


def start_sshd(tmp: Path, home_file: Path | None = None, force_command: str | None = None) -> SshServer:
    """Start sshd on 127.0.0.1:<free port>; skips (or fails under CI) when it cannot.

    home_file: a file naming the folder every session starts in and sees as $HOME.
    force_command: the command every session runs instead of the client's."""
    sshd = find_sshd()
    if sshd is None:
        missing("sshd (OpenSSH server) not found")
    for tool in ("ssh", "ssh-keygen", "rsync"):
        if shutil.which(tool) is None:
            missing(f"{tool} not found")
    if os.geteuid() == 0 and not os.path.isdir("/run/sshd"):
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation dir
    tmp.mkdir(parents=True, exist_ok=True)
    host_key, client_key = tmp / "host_ed25519", tmp / "client_ed25519"
    _keygen(host_key)
    _keygen(client_key)
    authorized = tmp / "authorized_keys"
    authorized.write_text(Path(f"{client_key}.pub").read_text())
    authorized.chmod(0o600)
    user = getpass.getuser()
    log = tmp / "sshd.log"
    extra = []
    if home_file is not None:
        force_command = fake_home_command(home_file)
    if force_command is not None:
        extra.append(f"ForceCommand {force_command}")
    last_error = ""
    for _ in range(3):  # the free port can be taken between the probe and sshd's bind
        port = free_port()
        cfg = tmp / "sshd_config"
        cfg.write_text("\n".join([
            f"ListenAddress {LOOPBACK}",
            f"Port {port}",
            f"HostKey {host_key}",
            f"AuthorizedKeysFile {authorized}",
            f"PidFile {tmp / 'sshd.pid'}",
            "StrictModes no",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "PermitRootLogin prohibit-password",
            f"AllowUsers {user}",
            "X11Forwarding no",
            "AllowTcpForwarding no",
            "PrintMotd no",
            "LogLevel VERBOSE",
            *extra,
            "",
        ]))
        with open(log, "w") as err:
            proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(cfg)], stdout=err, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            if _banner(port):
                known_hosts = tmp / "known_hosts"
                known_hosts.write_text(known_hosts_line(port, Path(f"{host_key}.pub")))
                return SshServer(port, user, client_key, known_hosts, log, proc)
            time.sleep(0.1)
        stop_sshd(proc)
        last_error = log.read_text()[-2000:]
    missing(f"sshd did not start on {LOOPBACK}: {last_error.strip()}")
    raise AssertionError("unreachable")


def stop_sshd(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def snapshot(root: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple]:
    """Every entry under root: kind and content hash (files) or target (links)."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        for name in sorted(dirnames + filenames):
            path = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if rel in skip:
                if name in dirnames:
                    dirnames.remove(name)
                continue
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", hashlib.sha256(Path(path).read_bytes()).hexdigest())
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            else:
                out[rel] = ("other", stat.S_IFMT(st.st_mode))
    return out
