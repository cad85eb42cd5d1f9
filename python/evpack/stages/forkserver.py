"""A fork server per GPU for oracle cells: torch imported once, one child process per cell.

Most of a correctness or stability cell's time was its process starting (Python, then torch). The
server imports torch (CPU side only: it never touches CUDA, so a child may initialise CUDA itself) and
forks one child per cell. The child is a process of its own: a session and process group of its own,
its own log, its own CUDA context, created by itself, so a crash or a hang loses that cell alone; on
timeout the client kills the child's process group, as run_isolated does. Nothing else is shared: the
child imports evpack, the extension and the oracle fresh, so a server started before the build loads
the binary the build made.

Protocol (a Unix socket in the run's slot folder, one connection per cell): the client sends one JSON
line {"cmd": [python, script, args...], "cwd", "log"}; the server answers {"pid"} once the child runs
and {"returncode"} (negative: killed by that signal) when it ended. Only cells that need no environment
of their own are forked: variables such as CUDA_LAUNCH_BLOCKING are read when CUDA or torch start.

    python -m evpack.stages.forkserver SOCKET      (the run starts one per GPU; procs.SlotPool.fork)
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys
import time
from pathlib import Path

from ..records.bench import GpuRef
from ..records.procs import CellRequest, ForkReply

FORKED, PROCESS = "forked", "process"


def _child(req: CellRequest, listener: socket.socket, conns: list[socket.socket], sel) -> None:
    """In the forked child: become the cell's process, run the oracle as `python script args`, exit."""
    code = 1
    try:
        sel.close()
        listener.close()
        for c in conns:  # this cell's and the other cells' connections are the server's, not the child's
            c.close()
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        fd = os.open(req.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        os.chdir(req.cwd)
        script = os.path.abspath(req.cmd[1])
        sys.argv = [script, *req.cmd[2:]]
        sys.path[0] = os.path.dirname(script)  # as `python script` has it
        import runpy  # noqa: PLC0415

        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: BLE001 - the cell's own failure, shown in its log as python would
            import traceback  # noqa: PLC0415

            traceback.print_exc()
            code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _valid(req) -> bool:
    r = CellRequest.from_json(req)
    return (isinstance(req, dict) and isinstance(r.cmd, list) and len(r.cmd) >= 2
            and all(isinstance(a, str) for a in r.cmd) and r.cmd[1].endswith(".py")
            and isinstance(r.cwd, str) and isinstance(r.log, str))


def serve(sock_path: Path) -> None:
    """Accept cells until the parent (the run) is gone or SIGTERM; fork one child per cell."""
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock_path))
    listener.listen(128)  # bound before torch loads: a client that comes early waits in the backlog
    import torch  # noqa: F401, PLC0415 - the point of the server: imported once (CPU side only)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    waiting: dict[int, socket.socket] = {}  # child pid -> its client's connection
    while os.getppid() == parent:
        for _key, _ in sel.select(timeout=0.05):
            conn, _ = listener.accept()
            try:
                conn.settimeout(10)
                req = json.loads(conn.makefile("rb").readline() or b"null")
            except (OSError, ValueError):
                conn.close()
                continue
            if not _valid(req):
                conn.sendall(b'{"error": "bad request"}\n')
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                _child(CellRequest.from_json(req), listener, [conn, *waiting.values()], sel)
            waiting[pid] = conn
            _send(conn, {"pid": pid})
        _reap(waiting)
    for conn in waiting.values():
        conn.close()


def _send(conn: socket.socket, msg: dict) -> None:
    try:
        conn.sendall(json.dumps(msg).encode() + b"\n")
    except OSError:
        pass  # the client is gone; the child still runs to its end and is reaped


def _reap(waiting: dict[int, socket.socket]) -> None:
    while waiting:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is not None:
            _send(conn, {"returncode": os.waitstatus_to_exitcode(status)})
            conn.close()


class _Lines:
    """JSON lines from a socket (the pid and the return code may arrive in one read)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf = sock, b""

    def next(self, timeout_s: float):
        """The next JSON line; TimeoutError after timeout_s without one; None at end of stream."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
            chunk = self.sock.recv(4096)  # TimeoutError when nothing came
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


def run_forked(sock_path: Path, cmd: list[str], log_path: Path, *, cwd: Path, timeout_s: float,
               connect_s: float = 60.0) -> dict | None:
    """Run one cell through the server at sock_path: {"returncode", "timed_out", "duration_s"} as
    run_isolated gives, or None when no server answers (the caller then starts a process itself).
    On timeout the child's process group gets SIGKILL."""
    t0 = time.monotonic()
    deadline = t0 + connect_s
    while True:
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(str(sock_path))
            break
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.1)
        except OSError:
            sock.close()
            return None
    with sock:
        reader = _Lines(sock)
        try:
            sock.sendall(json.dumps({"cmd": cmd, "cwd": str(cwd), "log": str(log_path)}).encode() + b"\n")
            first = reader.next(connect_s)
        except (OSError, ValueError):
            return None  # the server is not there (or not well): nothing ran
        first = ForkReply.from_json(first)  # a line that is no object: no pid
        if not isinstance(first.pid, int):
            return None
        t0, pid, timed_out = time.monotonic(), first.pid, False
        try:
            rc = reader.next(max(0.001, timeout_s))
        except TimeoutError:
            timed_out = True
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                rc = reader.next(30)
            except (OSError, ValueError):
                rc = None
        except (OSError, ValueError):
            rc = None
    returncode = ForkReply.from_json(rc).returncode
    if returncode is None:  # the server went away with the cell: recorded as a failed cell
        with open(log_path, "a", encoding="utf-8") as f:
            f.write("\nevpack: the fork server went away before this cell ended\n")
        returncode = -1
    return {"returncode": returncode, "timed_out": timed_out, "duration_s": time.monotonic() - t0}


def socket_path(folder: Path, gpu: dict | None) -> Path:
    return Path(folder) / f"fork-{'-' if gpu is None else GpuRef.from_json(gpu).index}.sock"


def start(folder: Path, gpus, repo: Path) -> list:
    """One server per GPU (CUDA_VISIBLE_DEVICES: its UUID), or one for the default device; their output
    goes to fork-*.log in `folder` (the run's slot folder, outside the pack)."""
    import subprocess  # noqa: PLC0415

    servers = []
    for gpu in list(gpus) if gpus else [None]:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = GpuRef.from_json(gpu).uuid

        sock = socket_path(folder, gpu)
        with open(sock.with_suffix(".log"), "wb") as log:
            servers.append(subprocess.Popen([sys.executable, "-m", "evpack.stages.forkserver", str(sock)], cwd=repo,
                                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    return servers


def stop(servers: list) -> None:
    for proc in servers:
        proc.terminate()
    for proc in servers:
        try:
            proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 - a server that does not stop is killed
            proc.kill()
            proc.wait()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m evpack.stages.forkserver SOCKET", file=sys.stderr)
        return 2
    serve(Path(argv[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
