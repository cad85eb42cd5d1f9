"""scripts/gpu-session cannot be pointed at a folder of the host that is not its own.

Attacks on `init --remote-dir` and on `sync --delete`, through a real OpenSSH server on
127.0.0.1 whose sessions see a temporary folder as their home and login folder (so `~`, `.`
and relative paths land there, never in the real home), and a heartbeat dated in the future.
Every refusal is checked for what it leaves behind: the host's files exactly as they were.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ssh_helpers import LOOPBACK, SshServer, snapshot, start_sshd, stop_sshd  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MARKER = ".evpack-session"
TOKEN_RE = re.compile(r"^token=([0-9a-f]{32})$", flags=re.M)
HOOK = "provider_stop() {{ echo stop >> {calls}; }}\nprovider_start() {{ echo start >> {calls}; }}\n"


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sshd")
    home_file = tmp / "home-of-this-test"
    home_file.write_text("/nonexistent\n")
    server = start_sshd(tmp / "server", home_file=home_file)
    server.home_file = home_file  # type: ignore[attr-defined]
    yield server
    stop_sshd(server.proc)


class Host:
    """A checkout here, a fake home on the host (this test's own), a session against it."""

    def __init__(self, tmp: Path, sshd: SshServer) -> None:
        self.tmp = tmp
        self.sshd = sshd
        self.home = tmp / "host" / "home" / "u"
        self.home.mkdir(parents=True)
        sshd.home_file.write_text(f"{self.home}\n")  # type: ignore[attr-defined]
        self.co = tmp / "checkout"
        shutil.copytree(REPO / "scripts", self.co / "scripts")
        shutil.copy(REPO / ".gitignore", self.co / ".gitignore")
        (self.co / "kept.txt").write_text("a file of the checkout\n")
        self.session = self.co / ".gpu-session"
        self.calls = tmp / "provider-calls"
        self.hook = tmp / "hook.sh"
        self.hook.write_text(HOOK.format(calls=self.calls))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("EVPACK_")}
        self.env.update(EVPACK_SSH_OPTS=sshd.ssh_opts, EVPACK_SSH_CONNECT_TIMEOUT="10", EVPACK_TIMEOUT_S="60")

    def gs(self, *argv: str, timeout: float = 90) -> subprocess.CompletedProcess:
        return subprocess.run(["scripts/gpu-session", *argv], cwd=self.co, env=self.env, capture_output=True,
                              text=True, timeout=timeout)

    def init(self, remote_dir: str, *extra: str) -> subprocess.CompletedProcess:
        s = self.sshd
        return self.gs("init", "--host", LOOPBACK, "--port", str(s.port), "--user", s.user,
                       "--identity", str(s.client_key), "--remote-dir", remote_dir,
                       "--provider-hook", str(self.hook), *extra)

    def logins(self) -> int:
        """How many sessions the sshd has accepted so far."""
        return self.sshd.log.read_text().count("Accepted publickey")

    def token(self) -> str:
        m = TOKEN_RE.search(self.session.read_text())
        assert m, self.session.read_text()
        return m.group(1)

    def set_session(self, key: str, value: str | None) -> None:
        """Hand-edit one key of the session file (None: remove it)."""
        lines = [ln for ln in self.session.read_text().splitlines() if not ln.startswith(f"{key}=")]
        if value is not None:
            lines.append(f"{key}={value}")
        self.session.write_text("\n".join(lines) + "\n")

    def provider_calls(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


@pytest.fixture()
def host(tmp_path, sshd):
    return Host(tmp_path, sshd)


def done(r: subprocess.CompletedProcess, code: int = 0) -> str:
    assert r.returncode == code, f"exit {r.returncode} (wanted {code})\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout + r.stderr


# ------------------------------------------------------------------ init: the folder
# Refused on their text alone, before any connection.
BY_TEXT = {
    "root": "/", "root_twice": "//", "root_dot": "/.", "root_dot_slash": "/./",
    "tilde": "~", "tilde_slash": "~/", "dot": ".", "dot_slash": "./", "dot_dot_slash": "./.",
    "dotdot": "..", "dotdot_sibling": "../elsewhere", "dotdot_inside": "sub/../..", "dotdot_harmless": "sub/../x",
    "tilde_dotdot": "~/..", "tilde_dotdot_x": "~/../x", "other_user_home": "~root/x",
    "slash_root": "/root", "slash_home": "/home", "usr": "/usr", "etc": "/etc", "var": "/var", "tmp": "/tmp",
    "opt": "/opt", "srv": "/srv", "var_tmp": "/var/tmp", "var_lib": "/var/lib", "usr_local": "/usr/local/evp",
    "etc_sub": "/etc/evp", "proc": "/proc/evp", "abs_dotdot": "/tmp/../etc/evp", "option": "-rf",
}


@pytest.mark.parametrize("case", sorted(BY_TEXT))
def test_init_refuses_dangerous_text_without_connecting(host, case):
    remote_dir = BY_TEXT[case]
    before, logins = snapshot(host.tmp / "host"), host.logins()
    marked_before = {d for d in ("/", "/root", "/home", "/usr", "/etc", "/var", "/tmp", "/opt", "/srv", "/var/tmp")
                     if os.path.exists(os.path.join(d, MARKER))}
    r = host.init(remote_dir)
    out = done(r, 2)
    assert "--remote-dir" in r.stderr and "refused" in r.stderr and r.stderr.count("\n") == 1, out
    assert not host.session.exists()
    assert snapshot(host.tmp / "host") == before
    assert host.logins() == logins, "init connected to the host before refusing the text"
    marked = {d for d in ("/", "/root", "/home", "/usr", "/etc", "/var", "/tmp", "/opt", "/srv", "/var/tmp")
              if os.path.exists(os.path.join(d, MARKER))}
    assert marked == marked_before


def test_init_refuses_empty_remote_dir(host):
    r = host.init("")
    assert r.returncode == 2 and "--remote-dir" in r.stderr, r.stderr
    assert not host.session.exists()


def by_resolution(host: Host) -> dict[str, str]:
    """--remote-dir texts that look harmless and are refused for where they land on the host."""
    h = host.home
    (h / "existing").mkdir()
    (h / "existing" / "precious.txt").write_text("not ours\n")
    outside = host.tmp / "host" / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("not ours either\n")
    (h / "link-home").symlink_to(h)
    (h / "link-root").symlink_to("/")
    (h / "link-etc").symlink_to("/etc")
    (h / "link-tmp").symlink_to("/tmp")
    (h / "link-outside").symlink_to(outside)
    (h / "link-parent").symlink_to(h.parent)
    return {
        "home_absolute": str(h), "home_absolute_slash": f"{h}/", "home_parent": str(h.parent),
        "home_grandparent": str(h.parent.parent), "link_to_home": "link-home", "link_to_home_tilde": "~/link-home",
        "link_to_root": "link-root", "into_etc": "link-etc/evp", "link_to_tmp": "link-tmp",
        "existing": "existing", "existing_tilde": "~/existing", "existing_absolute": str(h / "existing"),
        "link_to_existing": "link-outside", "existing_outside": str(outside), "link_to_parent": "link-parent",
    }


RESOLUTION_CASES = ["home_absolute", "home_absolute_slash", "home_parent", "home_grandparent", "link_to_home",
                    "link_to_home_tilde", "link_to_root", "into_etc", "link_to_tmp", "existing", "existing_tilde",
                    "existing_absolute", "link_to_existing", "existing_outside", "link_to_parent"]


@pytest.mark.parametrize("case", RESOLUTION_CASES)
def test_init_refuses_where_the_host_resolves_it(host, case):
    remote_dir = by_resolution(host)[case]
    before = snapshot(host.tmp / "host")
    etc_marked = os.path.exists(f"/etc/evp/{MARKER}") or os.path.exists("/etc/evp")
    r = host.init(remote_dir)
    out = done(r, 2)
    assert "--remote-dir" in r.stderr and "refused" in r.stderr and r.stderr.count("\n") == 1, out
    assert not host.session.exists()
    assert snapshot(host.tmp / "host") == before, "a refused init changed the host"
    assert (os.path.exists(f"/etc/evp/{MARKER}") or os.path.exists("/etc/evp")) == etc_marked


@pytest.mark.parametrize("remote_dir,where", [("evidence-pack", "evidence-pack"), ("~/a/b/ep", "a/b/ep"),
                                              ("{home}/abs", "abs")])
def test_init_creates_its_folder_with_the_marker(host, remote_dir, where):
    r = host.init(remote_dir.format(home=host.home))
    done(r)
    folder = host.home / where
    token = host.token()
    assert (folder / MARKER).read_text() == f"evpack-session {token}\n"
    assert sorted(p.name for p in folder.iterdir()) == [MARKER]
    assert f"remote_dir={folder}\n" in host.session.read_text()  # the host's canonical path
    # A second session for the same folder is refused: init never adopts a folder it did not create.
    host.session.unlink()
    done(host.init(remote_dir.format(home=host.home)), 2)
    assert (folder / MARKER).read_text() == f"evpack-session {token}\n"


def test_remote_sh_refuses_on_the_host_too(tmp_path):
    """remote.sh `create` checks again on the host (its own HOME and login folder): a path
    that gpu-session would never send is still refused there, and nothing is created."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "existing").mkdir()
    (home / "link").symlink_to(tmp_path / "elsewhere")
    (home / "linkdir").symlink_to(tmp_path)
    env = dict(os.environ, HOME=str(home))
    token = "0123456789abcdef" * 2
    bad = ["/", "/etc", "/tmp", "/home", "/usr/evp", "/var/tmp", str(home), str(tmp_path), "relative",
           f"{home}/../x", f"{home}//x", f"{home}/./x", f"{home}/x/", str(home / "existing"), str(home / "link"),
           str(home / "linkdir" / "new")]
    before = snapshot(tmp_path)
    system = ("/", "/etc", "/tmp", "/home", "/var/tmp")
    marked_before = {d for d in system if os.path.lexists(os.path.join(d, MARKER))}
    for path in bad:
        r = subprocess.run(["bash", str(REPO / "scripts" / "lib" / "remote.sh"), "create", path, token],
                           cwd=home, env=env, capture_output=True, text=True, timeout=30)
        assert r.returncode == 9 and "refused" in r.stderr, (path, r.returncode, r.stdout, r.stderr)
        assert r.stdout == "", (path, r.stdout)
    assert snapshot(tmp_path) == before
    assert {d for d in system if os.path.lexists(os.path.join(d, MARKER))} == marked_before
    # A token that is not 32 hex digits is refused before anything else.
    r = subprocess.run(["bash", str(REPO / "scripts" / "lib" / "remote.sh"), "create", str(home / "new"), "x;y"],
                       cwd=home, env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and not (home / "new").exists(), r.stderr


# ------------------------------------------------------------------ writes: only in the marked folder
def synced_session(host: Host) -> Path:
    done(host.init("evidence-pack"))
    folder = host.home / "evidence-pack"
    done(host.gs("sync"))
    assert (folder / "kept.txt").is_file() and (folder / "scripts" / "gpu-session").is_file()
    return folder


def test_sync_delete_refuses_a_folder_without_the_marker(host):
    folder = synced_session(host)
    token = host.token()
    # The session file pointed (by hand) at a folder init did not create: ~ and . are refused
    # when the file is read; any other folder (the home by its path too) fails the marker check.
    before = snapshot(host.tmp / "host")
    for value in ("~", ".", "/", "x/.."):
        host.set_session("remote_dir", value)
        r = host.gs("sync", "--delete")
        assert r.returncode == 2 and "session file" in r.stderr, (value, r.returncode, r.stderr)
    assert snapshot(host.tmp / "host") == before
    precious = host.home / "precious"
    precious.mkdir()
    (precious / "photo.jpg").write_text("keep me\n")
    (precious / ".evpack-run").mkdir()
    before = snapshot(host.tmp / "host")
    for value in (str(precious), str(host.home)):
        host.set_session("remote_dir", value)
        for argv in (["sync", "--delete"], ["sync"], ["run"]):
            r = host.gs(*argv)
            assert r.returncode == 9 and "not this session's folder" in r.stderr, (argv, r.returncode, r.stderr)
    assert snapshot(host.tmp / "host") == before
    host.set_session("remote_dir", str(folder))
    assert host.token() == token


@pytest.mark.parametrize("kind", ["wrong_token", "missing", "link", "folder", "two_tokens", "empty"])
def test_sync_delete_refuses_a_marker_that_is_not_this_sessions(host, kind):
    folder = synced_session(host)
    token = host.token()
    (folder / "only-on-the-host.txt").write_text("--delete would remove this\n")
    marker = folder / MARKER
    marker.unlink()
    if kind == "wrong_token":
        marker.write_text(f"evpack-session {'f' * 32}\n")
    elif kind == "link":  # a link to a file with the right text is not the marker
        (host.tmp / "host" / "elsewhere").write_text(f"evpack-session {token}\n")
        marker.symlink_to(host.tmp / "host" / "elsewhere")
    elif kind == "folder":
        marker.mkdir()
    elif kind == "two_tokens":
        marker.write_text(f"evpack-session {token}\nevpack-session {'f' * 32}\n")
    elif kind == "empty":
        marker.write_text("")
    before = snapshot(host.tmp / "host")
    r = host.gs("sync", "--delete")
    assert r.returncode == 9 and "not this session's folder" in r.stderr, (r.returncode, r.stderr)
    assert snapshot(host.tmp / "host") == before
    assert (folder / "only-on-the-host.txt").is_file()


def test_sync_delete_runs_in_the_marked_folder_and_keeps_the_marker(host):
    """The control: with the right marker --delete does delete, and never the marker."""
    folder = synced_session(host)
    token = host.token()
    (folder / "only-on-the-host.txt").write_text("--delete removes this\n")
    (host.co / MARKER).write_text(f"evpack-session {'f' * 32}\n")  # a checkout cannot replace the marker
    done(host.gs("sync", "--delete"))
    assert not (folder / "only-on-the-host.txt").exists()
    assert (folder / MARKER).read_text() == f"evpack-session {token}\n"
    assert (folder / "kept.txt").is_file()
    # The marker is git-ignored: the host's checkout does not turn dirty because of it.
    assert re.search(r"^/\.evpack-session$", (REPO / ".gitignore").read_text(), flags=re.M)


def test_session_without_token_writes_nothing(host):
    folder = synced_session(host)
    (folder / "only-on-the-host.txt").write_text("--delete would remove this\n")
    host.set_session("token", None)
    before = snapshot(host.tmp / "host")
    for argv in (["sync", "--delete"], ["run"]):
        r = host.gs(*argv)
        assert r.returncode == 9 and "no marker token" in r.stderr, (argv, r.returncode, r.stderr)
    assert snapshot(host.tmp / "host") == before
    host.set_session("token", "not-hex")
    r = host.gs("sync")
    assert r.returncode == 2 and "token" in r.stderr, r.stderr


# ------------------------------------------------------------------ a heartbeat from the future
def plant_run(folder: Path, state: str, stamps: dict[str, float]) -> None:
    run = folder / ".evpack-run"
    run.mkdir(exist_ok=True)
    (run / "state").write_text(f"{state}\n")
    (run / "heartbeat_s").write_text("1\n")
    (run / "run_id").write_text("r1\n")
    (run / "log").write_text("a log\n")
    for name in ("heartbeat", "synced"):
        (run / name).touch()
    old = time.time() - 3600
    for name in ("state", "heartbeat", "synced", "heartbeat_s", "run_id", "log"):
        t = stamps.get(name, old)
        os.utime(run / name, (t, t))


@pytest.mark.parametrize("stamp,state", [("heartbeat", "running"), ("synced", "done:0"), ("state", "done:0")])
def test_future_stamp_is_no_sign_of_life(host, stamp, state):
    folder = synced_session(host)
    host.set_session("started_epoch", str(int(time.time()) - 7200))
    plant_run(folder, state, {stamp: time.time() + 3600})
    status = done(host.gs("status"))
    if stamp == "heartbeat":
        assert status.startswith("stale") and "in the future" in status, status
        r = host.gs("follow", timeout=60)
        assert r.returncode == 6 and "future" in r.stderr, (r.returncode, r.stderr)
    out = done(host.gs("idle-guard", "--minutes", "5"))
    assert "stopping it" in out and host.provider_calls() == ["stop"], out


def test_heartbeat_within_the_clock_skew_allowance_is_alive(host):
    folder = synced_session(host)
    plant_run(folder, "running", {"heartbeat": time.time() + 60})
    assert done(host.gs("status")).startswith("running")
    r = host.gs("idle-guard", "--minutes", "0")
    assert r.returncode == 3 and "refusing to stop" in r.stderr, (r.returncode, r.stderr)
    assert host.provider_calls() == []
    # Well past the allowance, the same run is stale and the guard stops the host.
    plant_run(folder, "running", {"heartbeat": time.time() + 600})
    assert done(host.gs("status")).startswith("stale")
    assert "stopping it" in done(host.gs("idle-guard", "--minutes", "0"))
    assert host.provider_calls() == ["stop"]


def test_safe_dir_rules_pass_shellcheck():
    """lib/safe-dir.sh is sourced, not run: `shellcheck -x` of gpu-session does not report on
    it (tests/test_workflow_lint.py lists the scripts it runs), so it is checked here."""
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck not found (apt-get install shellcheck)")
    lib = REPO / "scripts" / "lib" / "safe-dir.sh"
    r = subprocess.run([shellcheck, "-x", str(lib)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
