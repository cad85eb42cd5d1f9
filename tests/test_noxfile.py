"""The noxfile's sessions: what each installs, the torch index of CPU virtualenvs, and the light commands.

nox itself is not needed: the noxfile is loaded with a stand-in `nox` module whose sessions record what
they would install and run.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import types
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import reference
import tomllib
from conftest import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SCHEMA1 = reference.COMPAT  # the compatibility pack (schema 1, unsigned)
SIGNED = reference.SIGNED  # a signed pack of a newer schema
HEAVY = ("torch", "numpy", "pandas", "matplotlib", "scipy", "triton")


def _load_noxfile(monkeypatch) -> types.ModuleType:
    stub = types.ModuleType("nox")
    stub.options = types.SimpleNamespace()
    stub.Session = object

    def session(*args, **kwargs):
        if args and callable(args[0]):
            return args[0]
        return lambda f: f

    stub.session = session
    monkeypatch.setitem(sys.modules, "nox", stub)
    spec = importlib.util.spec_from_file_location("evpack_noxfile_under_test", REPO / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeSession:
    """Records session.install / session.run instead of doing them."""

    def __init__(self, venv: Path, posargs: tuple[str, ...] = (), backend: str = "virtualenv") -> None:
        self.venv_backend = backend
        self.virtualenv = types.SimpleNamespace(location=str(venv))
        self.posargs = list(posargs)
        self.installs: list[tuple[str, ...]] = []
        self.runs: list[tuple[str, ...]] = []
        self.logs: list[str] = []

    def install(self, *args: str, **_kw) -> None:
        self.installs.append(args)

    def run(self, *args: str, **_kw) -> None:
        self.runs.append(args)

    def log(self, msg: str) -> None:
        self.logs.append(msg)

    def installed(self) -> list[str]:
        return [a for call in self.installs for a in call]


@pytest.fixture
def noxfile(monkeypatch):
    return _load_noxfile(monkeypatch)


def _names(reqs) -> set[str]:
    return {r.split("==")[0].split(">")[0].split("<")[0].split("[")[0].strip().lower() for r in reqs
            if not r.startswith("-") and "/" not in r}


@pytest.mark.parametrize("command", ["verify", "label", "compare", "history", "merge", "report"])
def test_the_light_sessions_install_no_torch(noxfile, tmp_path, command):
    assert command in noxfile.LIGHT
    s = FakeSession(tmp_path / "venv", ("some-pack",))
    getattr(noxfile, command)(s)
    assert not _names(s.installed()) & set(HEAVY), s.installs
    assert s.runs == [("python", "-m", "evpack", command, "some-pack")]
    assert ("--no-deps", "--no-build-isolation", "-e", str(REPO)) in s.installs


def test_history_adds_matplotlib_only_for_a_plot(noxfile, tmp_path):
    for posargs, wanted in (((), False), (("--plot", "t.png"), True), (("--plot=t.png",), True)):
        s = FakeSession(tmp_path / "venv", posargs)
        noxfile.history(s)
        assert ("matplotlib" in _names(s.installed())) is wanted, posargs


def test_the_light_extras_hold_only_what_their_commands_import():
    from evpack.reporting import RENDERER_PINS

    extras = PYPROJECT["project"]["optional-dependencies"]
    assert dict(r.split("==") for r in extras["report"]) == RENDERER_PINS
    assert _names(extras["plot"]) == {"matplotlib"}


def _poison(folder: Path) -> Path:
    for name in HEAVY:
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(f"raise ImportError('{name} must not be imported here')\n")
    return folder


# The reporter: the command runs as `python -m evpack`; at exit it names the third-party modules it loaded.
_RUN = """import atexit, runpy, sys
def _third_party():
    names = {m.split(".")[0] for m in sys.modules} - set(sys.stdlib_module_names) - {"evpack", "__main__"}
    print("THIRD-PARTY " + json.dumps(sorted(n for n in names if not n.startswith("_"))), file=sys.stderr)
import json
atexit.register(_third_party)
sys.argv = ["evpack", *sys.argv[1:]]
runpy.run_module("evpack", run_name="__main__")
"""


def _light(command: str, args: list, allowed: set, *roles: str):
    """One parameter; skipped, naming the role, when a reference pack it needs is not committed."""
    missing = [r for r in roles if getattr(reference, r) is None]
    marks = [pytest.mark.skip(reason=f"no reference pack of role {missing[0]}")] if missing else []
    return pytest.param(command, [str(a) for a in args], allowed, marks=marks)


@pytest.mark.parametrize("command,args,allowed", [
    _light("verify", [SCHEMA1], set(), "COMPAT"),
    _light("verify", [SIGNED, "--allowed-signers", reference.SIGNERS, "--require-signature"], set(), "SIGNED"),
    _light("label", [SIGNED, "--format", "json"], set(), "SIGNED"),
    _light("compare", [SIGNED, SCHEMA1], set(), "SIGNED", "COMPAT"),
    _light("history", ["--no-verify"], set()),
    _light("merge", [SIGNED, "--out", "{tmp}/merged"], set(), "SIGNED"),
    _light("report", [SIGNED, "--out", "{tmp}/report"], {"jinja2", "markdown_it", "markupsafe", "mdurl"}, "SIGNED"),
])
def test_the_light_commands_run_with_torch_unimportable(tmp_path, command, args, allowed):
    """Each light session's command, end to end in a fresh interpreter where torch, numpy, pandas and
    matplotlib raise on import: it runs to its result, and loads no third-party module but its extras' own.
    compare's result is a verdict on two packs of different commits and sessions: exit 0, or exit 1 with its
    REGRESSION line (its documented status for a row of ours slower beyond noise), never a traceback."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "PYTHONPATH": f"{_poison(tmp_path / 'poison')}:{REPO / 'python'}"}
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    out = subprocess.run([sys.executable, "-c", _RUN, command, *argv], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=600)
    verdict = command == "compare" and out.returncode == 1 and "REGRESSION: " in out.stderr
    assert out.returncode == 0 or verdict, out.stdout[-2000:] + out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    (line,) = [ln for ln in out.stderr.splitlines() if ln.startswith("THIRD-PARTY ")]
    assert set(json.loads(line.split(" ", 1)[1])) <= allowed, line


# ---- torch in a CPU virtualenv -------------------------------------------------------------------------

def test_the_torch_pin_is_met_by_the_cpu_build():
    packaging = pytest.importorskip("packaging.specifiers")
    (pin,) = [r for r in PYPROJECT["project"]["optional-dependencies"]["cpu"] if r.startswith("torch")]
    spec = packaging.SpecifierSet(pin.split("torch", 1)[1])
    assert spec.contains("2.13.0+cpu") and spec.contains("2.13.0") and not spec.contains("2.14.0")


def _urlopen_answering(calls: list):
    class Answer:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def urlopen(request, timeout):
        calls.append((request.full_url, request.get_method(), timeout))
        return Answer()

    return urlopen


def test_torch_comes_from_the_cpu_index_when_it_answers(noxfile, tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.delenv("EVPACK_TORCH_INDEX", raising=False)
    monkeypatch.setattr(urllib.request, "urlopen", _urlopen_answering(calls))
    s = FakeSession(tmp_path / "venv")
    noxfile.evidence(s)
    assert calls == [(noxfile.TORCH_CPU_INDEX + "/torch/", "HEAD", 5)]
    assert s.installs[0] == ("torch==2.13.0", "--extra-index-url", noxfile.TORCH_CPU_INDEX)
    assert "torch==2.13.0" in s.installs[1]  # the extra again: satisfied by the CPU build, nothing changes
    assert s.runs == [("python", "-m", "evpack", "evidence")]


def test_torch_comes_from_pips_index_when_the_cpu_index_does_not_answer(noxfile, tmp_path, monkeypatch):
    def unreachable(request, timeout):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.delenv("EVPACK_TORCH_INDEX", raising=False)
    monkeypatch.setattr(urllib.request, "urlopen", unreachable)
    s = FakeSession(tmp_path / "venv")
    noxfile.build(s)
    assert s.installs[0] == ("torch==2.13.0",)
    assert any("does not answer" in m and "CUDA build" in m for m in s.logs), s.logs


def test_no_probe_when_torch_is_there_or_the_index_is_turned_off(noxfile, tmp_path, monkeypatch):
    def never(request, timeout):
        raise AssertionError("the index was probed")

    monkeypatch.setattr(urllib.request, "urlopen", never)
    venv = tmp_path / "venv"
    (venv / "lib" / "python3.12" / "site-packages" / "torch-2.13.0+cpu.dist-info").mkdir(parents=True)
    s = FakeSession(venv)
    noxfile.sass(s)
    assert not any(call[0].startswith("torch") for call in s.installs[:1]) and len(s.installs) == 2
    monkeypatch.setenv("EVPACK_TORCH_INDEX", "none")
    s = FakeSession(tmp_path / "empty-venv")
    noxfile.ptxas(s)
    assert s.installs[0] == ("torch==2.13.0",)


def test_on_the_gpu_machine_nothing_is_downloaded(noxfile, tmp_path):
    for command in ("evidence", "verify", "report"):
        s = FakeSession(tmp_path / "venv", backend="none")
        getattr(noxfile, command)(s)
        assert s.installs == [], command  # only `pip install -e` of evpack into the running interpreter
        assert s.runs[0][:3] == (sys.executable, "-m", "pip") and "--no-deps" in s.runs[0]


def test_python_and_version_requirements_agree():
    packaging = pytest.importorskip("packaging.specifiers")
    requires = packaging.SpecifierSet(PYPROJECT["project"]["requires-python"])
    assert "3.11" in requires and "3.10" not in requires  # the noxfile imports tomllib (3.11)
    assert "import tomllib" in (REPO / "noxfile.py").read_text()
    from evpack import version

    assert PYPROJECT["project"]["version"] == version.__version__
    out = subprocess.run([sys.executable, "setup.py", "--version"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip().splitlines()[-1] == version.__version__, out.stderr
