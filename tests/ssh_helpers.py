"""A throwaway OpenSSH server on 127.0.0.1 for the gpu-session tests.

Only the loopback is ever used: the server listens on 127.0.0.1 and clients are pointed
at 127.0.0.1. Keys, config, pid file and known_hosts all live in a temporary folder.
When sshd is missing or cannot start the tests skip with the reason, except under CI
(CI set in the environment), where the SSH tests are a deliverable and must run.
"""
from __future__ import annotations

import getpass
import os
import shutil
import socket
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
        """Extra client options (EVPACK_SSH_OPTS): no user config, throwaway known_hosts."""
        return (f"-F /dev/null -o StrictHostKeyChecking=no -o UserKnownHostsFile={self.known_hosts} "
                "-o LogLevel=ERROR")

    def ssh(self, command: str, timeout: float = 20) -> subprocess.CompletedProcess:
        argv = ["ssh", "-p", str(self.port), "-l", self.user, "-i", str(self.client_key),
                "-o", "BatchMode=yes", *self.ssh_opts.split(), LOOPBACK, command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "evpack-test", "-f", str(path)],
                   check=True, capture_output=True, timeout=30)


def start_sshd(tmp: Path) -> SshServer:
    """Start sshd on 127.0.0.1:<free port>; skips (or fails under CI) when it cannot."""
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
            "",
        ]))
        with open(log, "w") as err:
            proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(cfg)], stdout=err, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            if _banner(port):
                return SshServer(port, user, client_key, tmp / "known_hosts", log, proc)
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
