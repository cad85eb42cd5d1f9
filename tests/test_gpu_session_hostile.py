"""scripts/gpu-session against a hostile GPU host.

The host is outside the user's trust: it runs the code under test, and whoever controls it
can answer anything. Here the host is a stand-in: an `ssh` early on PATH that runs the
command on this machine in a fake home folder (so remote.sh and rsync run for real), or,
for one remote.sh verb, answers with canned bytes and an exit code of the test's choosing.
No sshd is needed; the last test repeats the main attack through a real OpenSSH server.

Every test checks that nothing changed outside the intended folder: the whole checkout
(scripts, python sources, reference packs, local packs, `latest`) is snapshotted before
and compared after, and no PWNED file appears anywhere.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference  # noqa: E402
from ssh_helpers import LOOPBACK, snapshot, start_sshd, stop_sshd  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
REF_ID = (reference.COMPAT or Path("20261121T142707Z-b40b5c2fd4c6")).name  # the compatibility pack: the smallest
HOST = "gpu.example"
VERBS = ("init", "sync", "run", "status", "follow", "fetch", "idle-guard", "stop", "start", "cost")
EXIT_REFUSED_HOST = 7  # the host's answer is not safe to use
EXIT_PACK_EXISTS = 8  # a local pack of that id exists: fetch never replaces one
# The stand-in host runs rsync for real: without it these tests say so and skip (.ci/run installs it).
needs_rsync = pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed (.ci/run installs it)")

STANDIN = r'''#!{python}
"""Stand-in for ssh: logs its argv, then runs the command here in the fake host's home (its
login folder and $HOME), or, when $STANDIN_CANNED/<verb>.out exists for a remote.sh verb,
answers with it."""
import json, os, shlex, subprocess, sys
VALUE_OPTS = set("BbcDEeFIiJLlmOoPpQRSWw")
args = sys.argv[1:]
with open(os.environ["STANDIN_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")
i = 0
while i < len(args):
    a = args[i]
    if a == "--":
        i += 1
        break
    if a.startswith("-") and len(a) > 1:
        i += 2 if len(a) == 2 and a[1] in VALUE_OPTS else 1
        continue
    break
command = " ".join(args[i + 1:])
verb = None
if command.startswith("bash -s -- "):
    verb = shlex.split(command)[3]
canned = os.path.join(os.environ["STANDIN_CANNED"], f"{{verb}}.out")
if verb and os.path.exists(canned):
    sys.stdin.buffer.read()
    with open(canned, "rb") as f:
        sys.stdout.buffer.write(f.read())
    sys.stdout.flush()
    rc = canned[:-4] + ".rc"
    sys.exit(int(open(rc).read()) if os.path.exists(rc) else 0)
home = os.environ["STANDIN_HOME"]
sys.exit(subprocess.run(["bash", "-c", command], cwd=home, env=dict(os.environ, HOME=home)).returncode)
'''

HOOK = """provider_stop() {{ echo stop >> {marker}; }}
provider_start() {{ echo start >> {marker}; }}
"""


# ------------------------------------------------------------------ helpers
def pwned(root: Path) -> list[Path]:
    return [p for p in root.rglob("*PWNED*")]


class World:
    """A checkout, a fake host home with the remote folder, the stand-in ssh, a session."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.co = tmp / "checkout"
        self.home = tmp / "host"
        self.remote = self.home / "evidence-pack"
        self.canned = tmp / "canned"
        self.marker = tmp / "provider-calls"
        self.log = tmp / "ssh-argv.log"
        self.pwn = tmp / "PWNED"
        shutil.copytree(REPO / "scripts", self.co / "scripts")
        shutil.copytree(REPO / "python", self.co / "python",
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        keep = self.co / "artifacts" / "reference" / "keep"
        keep.mkdir(parents=True)
        (keep / "pack.json").write_text('{"committed": true}\n')
        self.packs = self.co / "artifacts" / "packs"
        self.packs.mkdir(parents=True)
        self.host_packs = self.remote / "artifacts" / "packs"
        self.home.mkdir()
        self.canned.mkdir()
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        ssh = bin_dir / "ssh"
        ssh.write_text(STANDIN.format(python=sys.executable))
        ssh.chmod(0o755)
        hook = tmp / "hook.sh"
        hook.write_text(HOOK.format(marker=self.marker))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("EVPACK_") and k != "PYTHONPATH"}
        self.env.update(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", STANDIN_LOG=str(self.log),
                        STANDIN_HOME=str(self.home), STANDIN_CANNED=str(self.canned), EVPACK_HEARTBEAT_S="1")
        r = self.gs("init", "--host", HOST, "--remote-dir", str(self.remote), "--provider-hook", str(hook))
        assert r.returncode == 0, r.stderr
        self.fill_remote()

    def fill_remote(self) -> None:
        """What a synced checkout has on the host, besides the marker init wrote."""
        self.host_packs.mkdir(parents=True)
        (self.remote / ".evpack-run").mkdir()

    def gs(self, *argv: str, timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(["scripts/gpu-session", *argv], cwd=self.co, env=env or self.env,
                              capture_output=True, text=True, timeout=timeout)

    def can(self, verb: str, out: bytes | str, rc: int = 0) -> None:
        """The host answers remote.sh VERB with these bytes and this exit code."""
        data = out.encode() if isinstance(out, str) else out
        (self.canned / f"{verb}.out").write_bytes(data)
        (self.canned / f"{verb}.rc").write_text(str(rc))

    def host_pack(self, name: str = REF_ID, latest: bool = True) -> Path:
        """A copy of a committed reference pack on the host (verifies as it is)."""
        dst = self.host_packs / name
        shutil.copytree(reference.skip_unless(reference.COMPAT, "COMPAT"), dst, symlinks=True)
        if latest:
            link = self.host_packs / "latest"
            if link.is_symlink():
                link.unlink()
            link.symlink_to(name)
        return dst

    def provider_calls(self) -> list[str]:
        return self.marker.read_text().splitlines() if self.marker.exists() else []

    def state(self) -> dict[str, tuple]:
        return snapshot(self.co, skip=(".gpu-session.d",))


@pytest.fixture()
def world(tmp_path):
    return World(tmp_path)


def probe_lines(t: int, **over: str | None) -> str:
    """A well-formed probe answer (as remote.sh writes it), with some values replaced."""
    fields = dict(now=str(t), dir="present", state="done:0", state_mtime=str(t - 5000),
                  hb_mtime=str(t - 5000), sync_mtime=str(t - 5000), stale_after="35", run_id="r1",
                  log_size="10", pid_alive="0")
    fields.update(over)
    return "".join(f"{k}={v}\n" for k, v in fields.items() if v is not None)


def assert_untouched(world: World, before: dict, r: subprocess.CompletedProcess) -> None:
    assert not pwned(world.tmp), f"a host value ran a command here: {pwned(world.tmp)}\n{r.stderr}"
    assert world.state() == before, f"the checkout changed\nstdout:{r.stdout}\nstderr:{r.stderr}"
    assert world.provider_calls() == []


# ------------------------------------------------------------------ probe answers are data
EXPANSION = "S[$(touch {pwn})]"


def hostile_probes(pwn: Path, now: int) -> dict[str, str]:
    x = EXPANSION.format(pwn=pwn)
    return {
        "now": probe_lines(now, now=x),
        "hb_mtime": probe_lines(now, hb_mtime=x + "started_epoch"),
        "state_mtime": probe_lines(now, state_mtime=x),
        "sync_mtime": probe_lines(now, sync_mtime=x),
        "stale_after": probe_lines(now, stale_after=x),
        "extra_line_after_run_id": probe_lines(now, run_id="r1\nnow=" + x),
        "duplicate_key": probe_lines(now) + f"hb_mtime={now}\n",
        "unknown_key": probe_lines(now) + "evil=1\n",
        "state": probe_lines(now, state=f"done:$(touch {pwn})"),
        "run_id_path": probe_lines(now, run_id="../../../PWNED"),
        "missing_now": probe_lines(now, now=None),
        "float": probe_lines(now, hb_mtime="1e9"),
        "negative": probe_lines(now, hb_mtime="-5"),
        "huge": probe_lines(now, now="9" * 40),
        "no_equals": probe_lines(now) + "garbage\n",
    }


@pytest.mark.parametrize("case", sorted(hostile_probes(Path("/x"), 0)))
def test_probe_values_are_never_evaluated(world, case):
    now = int(time.time())
    world.can("probe", hostile_probes(world.pwn, now)[case])
    before = world.state()
    for verb in (["status"], ["follow"], ["fetch"], ["idle-guard", "--minutes", "1"], ["stop"]):
        r = world.gs(*verb)
        assert_untouched(world, before, r)
        assert r.returncode == EXIT_REFUSED_HOST, (case, verb, r.returncode, r.stdout, r.stderr)
        assert "refused" in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_leading_zeros_are_decimal(world):
    """`08` is a number to the host (stat never prints it, but it is digits): no octal error."""
    now = int(time.time())
    world.can("probe", probe_lines(now, now=f"0{now}", hb_mtime="0000000008"))
    r = world.gs("status")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("done rc=0"), r.stdout


def test_host_exit_codes_are_mapped(world):
    """A host cannot choose the local exit code (it could turn a failure into 0 or 3)."""
    world.can("probe", "", rc=42)
    r = world.gs("status")
    assert r.returncode == 1 and "42" in r.stderr, (r.returncode, r.stderr)
    world.can("probe", "", rc=0)
    r = world.gs("status")
    assert r.returncode == EXIT_REFUSED_HOST, (r.returncode, r.stderr)


def test_run_written_files_cannot_inject(world):
    """The issue's reproduction: the evidence run (PR code) writes .evpack-run/run_id."""
    pwn_host = world.tmp / "PWNED_HOST"
    x = EXPANSION.format(pwn=world.pwn)
    (world.remote / "evil.sh").write_text(
        "printf '%s\\n' r1 " + repr("now=" + x + "started_epoch") + " > .evpack-run/run_id\n"
        "printf '%s\\n' " + repr(EXPANSION.format(pwn=pwn_host)) + " > .evpack-run/heartbeat_s\n")
    env = dict(world.env, EVPACK_REMOTE_CMD="bash evil.sh")
    r = world.gs("run", env=env)
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 20
    state = world.remote / ".evpack-run" / "state"
    while time.monotonic() < deadline and state.read_text().strip() != "done:0":
        time.sleep(0.1)
    assert state.read_text().strip() == "done:0"
    before = world.state()
    r = world.gs("status")
    assert not pwned(world.tmp), r.stderr
    assert r.returncode == 0 and r.stdout.startswith("done rc=0") and "run r1)" in r.stdout, (r.stdout, r.stderr)
    for verb in (["follow"], ["idle-guard", "--minutes", "60"], ["fetch"]):
        r = world.gs(*verb)
        assert not pwned(world.tmp), (verb, r.stderr)
    assert world.state() == before


# ------------------------------------------------------------------ remote.sh prints data only
def test_remote_probe_sanitises_host_files(tmp_path):
    d = tmp_path / "rd"
    run = d / ".evpack-run"
    run.mkdir(parents=True)
    pwn = tmp_path / "PWNED"
    x = EXPANSION.format(pwn=pwn)
    (run / "state").write_text(f"done:0\nnow={x}\nstate=running\n")
    (run / "run_id").write_text(f"r1\nnow={x}\n")
    (run / "heartbeat_s").write_text(x + "\n")
    (run / "pid").write_text("$(touch " + str(pwn) + ")\n")
    r = subprocess.run(["bash", str(REPO / "scripts" / "lib" / "remote.sh"), "probe", str(d)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert not pwn.exists()
    keys = [ln.split("=", 1)[0] for ln in r.stdout.splitlines()]
    assert sorted(keys) == sorted(["now", "dir", "state", "state_mtime", "hb_mtime", "sync_mtime", "stale_after",
                                   "run_id", "log_size", "pid_alive"]), r.stdout
    got = dict(ln.split("=", 1) for ln in r.stdout.splitlines())
    # First lines only, and only in the form a run writes them; nothing else comes through.
    assert got["state"] == "done:0" and got["run_id"] == "r1" and got["stale_after"] == "35", got
    assert got["pid_alive"] == "0" and got["now"].isdigit(), got
    (run / "state").write_text(f"now={x}\n")
    r = subprocess.run(["bash", str(REPO / "scripts" / "lib" / "remote.sh"), "probe", str(d)],
                       capture_output=True, text=True, timeout=30)
    assert "state=unknown\n" in r.stdout and r.stdout.count("now=") == 1 and not pwn.exists(), r.stdout


# ------------------------------------------------------------------ fetch: names
BAD_NAMES = {
    "dotdot": "..",
    "dot": ".",
    "empty": "",
    "reference": "../reference",
    "python": "../../python",
    "python_slash": "/../../python",  # what the scripts of 965ad1b turned into rm -rf python/, then ran
    "reference_slash": "/../reference",
    "latest": "latest",
    "dirty_path": f"{REF_ID}/../../../python",
    "two_lines": f"../../python\n{REF_ID}",
    "expansion": "$(touch PWNED)",
    "absolute": "/etc",
    "suffix_junk": f"{REF_ID}-dirty-x",
}


@pytest.mark.parametrize("case", sorted(BAD_NAMES))
def test_fetch_refuses_names_that_are_not_pack_ids(world, case):
    name = BAD_NAMES[case]
    # Give the host's rsync something real at each of those paths, with a payload that would
    # run here if the copy replaced python/ and verify then ran it.
    evil_py = world.remote / "python" / "evpack"
    evil_py.mkdir(parents=True)
    (evil_py / "__init__.py").write_text("")
    (evil_py / "__main__.py").write_text(f"open({str(world.pwn)!r}, 'w').close()\n")
    (world.remote / "artifacts" / "reference").mkdir()
    (world.remote / "artifacts" / "reference" / "pack.json").write_text("{}")
    world.host_pack()
    before = world.state()
    world.can("latest", name + "\n")
    r = world.gs("fetch")
    assert_untouched(world, before, r)
    assert r.returncode == EXIT_REFUSED_HOST, (r.returncode, r.stdout, r.stderr)
    assert "not a pack id" in r.stderr


def test_fetch_refuses_symlinked_latest_outside_packs(world):
    """remote.sh itself (an honest host) refuses a `latest` that points out of the packs folder."""
    (world.remote / "python").mkdir()
    (world.remote / "python" / "pack.json").write_text("{}")
    (world.host_packs / "latest").symlink_to("../../python")
    before = world.state()
    r = world.gs("fetch")
    assert_untouched(world, before, r)
    assert r.returncode == 4, r.stderr


# ------------------------------------------------------------------ fetch: content
@needs_rsync
@pytest.mark.parametrize("kind", ["file_link", "dir_link", "latest_link_inside", "fifo"])
def test_fetch_refuses_links_and_special_files(world, kind):
    pack = world.host_pack()
    if kind == "file_link":
        (pack / "report.md").unlink()
        (pack / "report.md").symlink_to("/etc/passwd")
    elif kind == "dir_link":
        shutil.rmtree(pack / "bench")
        (pack / "bench").symlink_to(world.co / "python")
    elif kind == "latest_link_inside":
        (pack / "latest").symlink_to(".")
    else:
        os.mkfifo(pack / "pipe")
    before = world.state()
    r = world.gs("fetch")
    assert_untouched(world, before, r)
    assert r.returncode == EXIT_REFUSED_HOST, (r.returncode, r.stdout, r.stderr)
    assert "refused" in r.stderr and ("link" in r.stderr or "special" in r.stderr), r.stderr


@needs_rsync
def test_fetch_verifies_before_replacing_anything(world):
    """Good pack A here; the host's B fails verify: A, `latest` and the folder stay as they were."""
    good = world.host_pack()
    r = world.gs("fetch", timeout=120)
    assert r.returncode == 0, r.stderr
    assert os.readlink(world.packs / "latest") == REF_ID
    assert not list(world.packs.glob(".*"))

    other = REF_ID[:-1] + "0"  # another pack id, same shape
    assert other != REF_ID
    bad = world.host_pack(other)
    pj = json.loads((bad / "pack.json").read_text())
    pj["pack_id"] = other
    (bad / "pack.json").write_text(json.dumps(pj))  # the hashes in index.json no longer match
    before = world.state()
    r = world.gs("fetch", timeout=120)
    assert r.returncode == 1 and "verify" in r.stderr, (r.returncode, r.stdout, r.stderr)
    assert_untouched(world, before, r)

    # The same id again: never replaced (a fetch of what is already here is refused).
    (world.host_packs / "latest").unlink()
    (world.host_packs / "latest").symlink_to(REF_ID)
    (good / "report.md").write_text("replaced on the host\n")
    r = world.gs("fetch", timeout=120)
    assert r.returncode == EXIT_PACK_EXISTS and "already" in r.stderr, (r.returncode, r.stderr)
    assert_untouched(world, before, r)


def test_verify_runs_local_code_only(world):
    """The default verify runs python/ of this checkout, from inside it: a pack's files are data."""
    pack = world.host_pack()
    (pack / "evpack").mkdir()
    (pack / "evpack" / "__init__.py").write_text(f"open({str(world.pwn)!r}, 'w').close()\n")
    (pack / "evpack" / "__main__.py").write_text(f"open({str(world.pwn)!r}, 'w').close()\n")
    r = world.gs("fetch", timeout=120)
    assert not world.pwn.exists()
    # Extra files are not in index.json: verify refuses the pack, nothing is moved into place.
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert not (world.packs / REF_ID).exists() and not (world.packs / "latest").exists()


# ------------------------------------------------------------------ ssh argv
@needs_rsync
def test_ssh_gets_double_dash_before_the_host(world):
    world.host_pack()
    assert world.gs("status").returncode == 0
    r = world.gs("fetch", timeout=120)
    assert r.returncode == 0, r.stderr
    calls = [json.loads(ln) for ln in world.log.read_text().splitlines()]
    assert len(calls) >= 4  # probe, probe, latest, rsync
    for argv in calls:
        i = argv.index(HOST)
        assert argv[i - 1] == "--", argv


@pytest.mark.parametrize("opt,value", [("--host", "-oProxyCommand=touch {pwn}"),
                                       ("--host", "-F/dev/null"),
                                       ("--host", "user@host"),
                                       ("--host", "a b"),
                                       ("--user", "-oProxyCommand=touch {pwn}"),
                                       ("--user", "a b"),
                                       ("--remote-dir", "-rf"),
                                       ("--port", "0"),
                                       ("--port", "99999")])
def test_init_refuses_option_like_values(tmp_path, opt, value):
    w = World(tmp_path)
    sf = w.co / "other-session"
    value = value.format(pwn=w.pwn)
    argv = ["--session-file", str(sf), "init", "--host", "h", opt, value]
    r = w.gs(*argv)
    if r.returncode == 0:  # show what the accepted value does with the real ssh
        env = dict(w.env, PATH=os.environ["PATH"], EVPACK_SSH_CONNECT_TIMEOUT="2")
        w.gs("--session-file", str(sf), "status", env=env, timeout=30)
    assert not pwned(tmp_path)
    assert r.returncode == 2 and opt in r.stderr, (r.returncode, r.stderr)
    assert not sf.exists()


def test_hand_edited_session_file_is_checked(world):
    sf = world.co / ".gpu-session"
    text = sf.read_text()
    for bad in (f"host=-oProxyCommand=touch {world.pwn}", "port=22; touch PWNED", "evil=1",
                "started_epoch=S[$(touch PWNED)]"):
        key = bad.split("=", 1)[0]
        lines = [ln for ln in text.splitlines() if not ln.startswith(key + "=")] + [bad]
        sf.write_text("\n".join(lines) + "\n")
        for verb in ("status", "cost"):
            r = world.gs(verb)
            assert r.returncode == 2 and "session file" in r.stderr, (bad, r.returncode, r.stderr)
    assert not pwned(world.tmp)
    sf.write_text(text + text.splitlines()[1] + "\n")  # a key twice
    r = world.gs("cost")
    assert r.returncode == 2 and "twice" in r.stderr, r.stderr


# ------------------------------------------------------------------ init: the host's resolve answer
def remote_verbs(world: World) -> list[str]:
    """The remote.sh verbs the stand-in was asked for, in order."""
    verbs = []
    for line in world.log.read_text().splitlines():
        cmd = json.loads(line)[-1]
        if cmd.startswith("bash -s -- "):
            verbs.append(cmd.split()[3])
    return verbs


def resolve_answer(world: World, **over: str | None) -> str:
    fields = dict(path=str(world.home / "new"), home=str(world.home), login=str(world.home), exists="0")
    fields.update(over)
    return "".join(f"{k}={v}\n" for k, v in fields.items() if v is not None)


def hostile_resolves(world: World) -> dict[str, tuple[str, int]]:
    """A lying or broken host's answer to `resolve`, and the exit code init must give."""
    h = str(world.home)
    x = EXPANSION.format(pwn=world.pwn)
    return {
        "root": (resolve_answer(world, path="/"), 2),
        "home": (resolve_answer(world, path=h), 2),
        "home_parent": (resolve_answer(world, path=str(world.home.parent)), 2),
        "login_parent": (resolve_answer(world, login=f"{h}/new/deeper"), 2),
        "etc": (resolve_answer(world, path="/etc/evidence-pack"), 2),
        "exists": (resolve_answer(world, exists="1"), 2),
        "relative": (resolve_answer(world, path="evidence-pack"), EXIT_REFUSED_HOST),
        "dotdot": (resolve_answer(world, path=f"{h}/new/../.."), EXIT_REFUSED_HOST),
        "trailing_slash": (resolve_answer(world, path=f"{h}/new/"), EXIT_REFUSED_HOST),
        "empty_path": (resolve_answer(world, path=""), EXIT_REFUSED_HOST),
        "home_not_canonical": (resolve_answer(world, home=f"{h}/."), EXIT_REFUSED_HOST),
        "no_home": (resolve_answer(world, home=None), EXIT_REFUSED_HOST),
        "exists_other": (resolve_answer(world, exists="yes"), EXIT_REFUSED_HOST),
        "duplicate": (resolve_answer(world) + "path=/\n", EXIT_REFUSED_HOST),
        "unknown_key": (resolve_answer(world) + "evil=1\n", EXIT_REFUSED_HOST),
        "expansion_key": (resolve_answer(world) + f"{x}=1\n", EXIT_REFUSED_HOST),
        "newline_in_path": (resolve_answer(world, path=f"{h}/new\nexists=0"), EXIT_REFUSED_HOST),
    }


RESOLVE_CASES = ["root", "home", "home_parent", "login_parent", "etc", "exists", "relative", "dotdot",
                 "trailing_slash", "empty_path", "home_not_canonical", "no_home", "exists_other", "duplicate",
                 "unknown_key", "expansion_key", "newline_in_path"]


@pytest.mark.parametrize("case", RESOLVE_CASES)
def test_init_checks_the_hosts_resolve_answer(world, case):
    """The host says where the folder lands; a dangerous or malformed answer stops init
    before `create` is ever asked for, and no session file is written."""
    cases = hostile_resolves(world)
    assert sorted(cases) == sorted(RESOLVE_CASES)
    answer, code = cases[case]
    world.can("resolve", answer)
    world.log.unlink()
    sf = world.co / "other-session"
    before = snapshot(world.home)
    r = world.gs("--session-file", str(sf), "init", "--host", HOST, "--remote-dir", "new")
    assert r.returncode == code, (case, r.returncode, r.stderr)
    assert r.stderr.count("\n") == 1 and ("refused" in r.stderr), r.stderr
    assert remote_verbs(world) == ["resolve"], remote_verbs(world)
    assert not sf.exists() and not pwned(world.tmp)
    assert snapshot(world.home) == before


def test_init_checks_the_hosts_create_answer(world):
    world.can("create", "created=1\nevil=$(touch PWNED)\n")
    sf = world.co / "other-session"
    r = world.gs("--session-file", str(sf), "init", "--host", HOST, "--remote-dir", "new")
    assert r.returncode == EXIT_REFUSED_HOST and "create" in r.stderr, (r.returncode, r.stderr)
    assert not sf.exists() and not pwned(world.tmp)
    world.can("create", "", rc=9)  # the host refuses (a race: the folder appeared meanwhile)
    r = world.gs("--session-file", str(sf), "init", "--host", HOST, "--remote-dir", "new2")
    assert r.returncode == 2 and "refused to create" in r.stderr, (r.returncode, r.stderr)
    assert not sf.exists()


@needs_rsync
def test_rsync_guard_holds_when_the_marker_check_lies(world):
    """The host says the folder is this session's (the `own` check), but the marker there is
    another session's: the guard in rsync's own remote command refuses, nothing is deleted."""
    r = world.gs("sync")
    assert r.returncode == 0, r.stderr
    (world.remote / "only-on-the-host.txt").write_text("--delete would remove this\n")
    (world.remote / ".evpack-session").write_text(f"evpack-session {'f' * 32}\n")
    world.can("own", "")
    before = snapshot(world.home)
    r = world.gs("sync", "--delete")
    assert r.returncode == 1 and "refused on the host" in r.stderr, (r.returncode, r.stderr)
    assert snapshot(world.home) == before
    assert (world.remote / "only-on-the-host.txt").is_file()


# ------------------------------------------------------------------ usage
def test_session_file_in_a_missing_folder(world):
    sf = world.tmp / "no-such-folder" / "session"
    r = world.gs("--session-file", str(sf), "init", "--host", HOST)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.startswith("gpu-session: ") and r.stderr.count("\n") == 1, r.stderr
    assert "no-such-folder" in r.stderr and "does not exist" in r.stderr
    assert not sf.parent.exists()


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_help(tmp_path, verb):
    co = tmp_path / "co"
    shutil.copytree(REPO / "scripts", co / "scripts")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVPACK_")}
    for argv in ([verb, "--help"], [verb, "-h"], [verb, "--host", "h", "--help"] if verb == "init" else [verb, "-h"]):
        r = subprocess.run(["scripts/gpu-session", *argv], cwd=co, env=env, capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0 and r.stderr == "", (argv, r.returncode, r.stderr)
        assert f"scripts/gpu-session {verb}" in r.stdout, r.stdout
    assert not (co / ".gpu-session").exists()
    # After `--` it is an argument of the remote command, not a request for help.
    r = subprocess.run(["scripts/gpu-session", "run", "--", "--help"], cwd=co, env=env, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and "no session file" in r.stderr


# ------------------------------------------------------------------ the main attack over real ssh
def test_run_written_run_id_over_real_ssh(tmp_path):
    server = start_sshd(tmp_path / "sshd")
    try:
        w = World(tmp_path / "w")
        env = {k: v for k, v in w.env.items() if not k.startswith("STANDIN_")}
        env.update(PATH=os.environ["PATH"], EVPACK_SSH_OPTS=server.ssh_opts, EVPACK_SSH_CONNECT_TIMEOUT="5")
        sf = w.co / ".gpu-session"
        sf.unlink()
        shutil.rmtree(w.remote)  # a new session: init creates its folder again
        r = w.gs("init", "--host", LOOPBACK, "--port", str(server.port), "--user", server.user,
                 "--identity", str(server.client_key), "--remote-dir", str(w.remote), env=env)
        assert r.returncode == 0, r.stderr
        w.fill_remote()
        x = EXPANSION.format(pwn=w.pwn)
        env["EVPACK_REMOTE_CMD"] = ("printf '%s\\n' r1 " + repr("now=" + x + "started_epoch")
                                    + " > .evpack-run/run_id")
        assert w.gs("run", env=env).returncode == 0
        state = w.remote / ".evpack-run" / "state"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and state.read_text().strip() != "done:0":
            time.sleep(0.1)
        w.host_pack()
        before = w.state()
        for verb in (["status"], ["follow"], ["idle-guard", "--minutes", "60"]):
            r = w.gs(*verb, env=env)
            assert not pwned(tmp_path), (verb, r.stderr)
            assert r.returncode == 0, (verb, r.returncode, r.stderr)
        assert w.state() == before
        r = w.gs("fetch", env=env, timeout=120)
        assert r.returncode == 0 and not pwned(tmp_path), r.stderr
        assert os.readlink(w.packs / "latest") == REF_ID
    finally:
        stop_sshd(server.proc)
