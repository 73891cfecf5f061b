"""The ``llmrt`` command in processes forked from one warm interpreter: the CLI tests' runner.

A cold ``llmrt`` process spends about 0.3 s of CPU starting the interpreter
and importing llmrt before it does anything; the CLI tests start a few
hundred of them. `command` gives an argv prefix that runs ``llmrt`` as a
child of a warm server instead (one per test process, started on first
use, gone when the test process is): the server imports the CLI once, and
for each command forks a child that runs ``python -m llmrt.actors.app.cli``'s
``__main__`` as a fresh process would, on the caller's own standard
streams, working directory and environment.

The caller starts a small *shim* (``python -IS``, the standard library
only, about 15 ms), which hands its three standard file descriptors, argv,
environment and working directory to the server over a Unix socket, then
stands in for the child:

* signals sent to the shim (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1,
  SIGUSR2) are passed on to the child;
* the shim exits with the child's status, and a child killed by a signal
  kills the shim with the same signal, so ``returncode`` reads the same;
* a shim that dies (SIGKILL) closes its socket, and the server kills the
  child at once: nothing outlives the process the test started.

The child's streams, ``sys.argv``, ``os.environ`` and working directory are
its own; what it finds imported is llmrt (imported before any environment
was read), as the real command's first lines would import it. The start-up
itself (which modules a command loads, how fast it starts) is not what these
tests measure: ``tests/test_cli_startup.py`` runs the real console script.
"""

from __future__ import annotations

import atexit
import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["command", "shim"]

#: Imported by the server before any fork: what ``call``, ``serve`` and the rest load.
PRELOAD = (
    "llmrt.actors.app.cli",
    "llmrt.actors.app._setup",
    "llmrt.actors.app.config",
    "llmrt.actors.app.plugins",
    "llmrt.adapters.demo",
    "llmrt.adapters._anthropic_plugin",
    "llmrt.adapters._gemini_plugin",
    "llmrt.adapters._openai_chat_plugin",
    "llmrt.adapters._openai_responses_plugin",
    "llmrt.actors.gateway._server",
    "importlib.metadata",
    "tomllib",
)

_SERVER = r"""
import atexit, gc, importlib, io, json, os, runpy, selectors, signal, socket, sys, threading
import traceback

path, preload = sys.argv[1], sys.argv[2:]
for name in preload:
    importlib.import_module(name)
gc.collect()
gc.freeze()

listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(path)
listener.listen(128)
selector = selectors.DefaultSelector()
selector.register(listener, selectors.EVENT_READ, ("accept",))
selector.register(sys.stdin.buffer, selectors.EVENT_READ, ("parent",))
children = {}  # pid -> (conn, pidfd)
print("ready", flush=True)


def stream(fd, mode, env, errors):
    tty = os.isatty(fd)
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    raw = io.FileIO(fd, mode, closefd=False)
    encoding = env.get("PYTHONIOENCODING", "").partition(":")[0] or "utf-8"
    if mode == "r":
        return io.TextIOWrapper(io.BufferedReader(raw), encoding=encoding, line_buffering=tty)
    return io.TextIOWrapper(
        io.BufferedWriter(raw), encoding=encoding, errors=errors,
        line_buffering=tty, write_through=unbuffered,
    )


def child(job, fds):
    for n, fd in enumerate(fds):
        os.dup2(fd, n)
    os.closerange(3, 65536)
    os.environ.clear()
    os.environ.update(job["env"])
    os.chdir(job["cwd"])
    env = job["env"]
    sys.stdin = sys.__stdin__ = stream(0, "r", env, "strict")
    sys.stdout = sys.__stdout__ = stream(1, "w", env, "strict")
    sys.stderr = sys.__stderr__ = stream(2, "w", env, "backslashreplace")
    sys.argv = [job["main"], *job["argv"]]
    sys.path[0] = job["cwd"]  # as ``python -m`` puts it
    code, signum = 0, 0
    try:
        runpy.run_module("llmrt.actors.app.cli", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        # As the interpreter does: the traceback, then death by SIGINT.
        traceback.print_exc()
        signum = signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        threading._shutdown()
        atexit._run_exitfuncs()
    finally:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass
        if signum:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        os._exit(code & 0xFF)


def receive(conn):
    conn.settimeout(10)
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while not data.endswith(b"\n"):
        more = conn.recv(1 << 20)
        if not more:
            raise EOFError
        data += more
    conn.settimeout(None)
    return json.loads(data), fds


def reply(conn, message):
    try:
        conn.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        pass


def start(conn):
    try:
        job, fds = receive(conn)
    except (OSError, EOFError, ValueError):
        conn.close()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            listener.close()
            conn.close()
            child(job, fds)
        finally:
            os._exit(70)
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    children[pid] = (conn, pidfd)
    reply(conn, {"pid": pid})
    selector.register(pidfd, selectors.EVENT_READ, ("exit", pid))
    selector.register(conn, selectors.EVENT_READ, ("gone", pid))


def reap(pid):
    conn, pidfd = children.pop(pid)
    _, status = os.waitpid(pid, 0)
    selector.unregister(pidfd)
    os.close(pidfd)
    try:
        selector.unregister(conn)
    except KeyError:
        pass
    reply(conn, {"status": os.waitstatus_to_exitcode(status)})
    conn.close()


while True:
    for key, _ in selector.select():
        what = key.data
        if what[0] == "accept":
            conn, _ = listener.accept()
            start(conn)
        elif what[0] == "exit":
            reap(what[1])
        elif what[0] == "gone":
            # The shim closed its end: it was killed. So is its child.
            selector.unregister(key.fileobj)
            try:
                os.kill(what[1], signal.SIGKILL)
            except ProcessLookupError:
                pass
        elif what[0] == "parent":
            if not os.read(0, 4096):
                for pid in list(children):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    reap(pid)
                os._exit(0)
"""

_SHIM = r"""
import json, os, signal, socket, sys

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)
pending = []
child = [0]


def forward(signum, frame):
    if child[0]:
        try:
            os.kill(child[0], signum)
        except ProcessLookupError:
            pass
    else:
        pending.append(signum)


for signum in FORWARDED:
    signal.signal(signum, forward)
fds = []
for fd in (0, 1, 2):
    try:
        os.fstat(fd)
        fds.append(fd)
    except OSError:
        fds.append(os.open(os.devnull, os.O_RDWR))
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    conn.connect(SOCKET)
except OSError as exc:
    sys.exit(f"llmrt (warm test shim): the warm server at {SOCKET} is gone: {exc}")
job = {"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(), "main": MAIN}
socket.send_fds(conn, [json.dumps(job).encode() + b"\n"], fds)
replies = conn.makefile("rb")
line = replies.readline()
if not line:
    sys.exit("llmrt (warm test shim): the warm server did not start the command")
child[0] = json.loads(line)["pid"]
for signum in pending:
    forward(signum, None)
line = replies.readline()
if not line:
    sys.exit("llmrt (warm test shim): the warm server went away before the command ended")
status = json.loads(line)["status"]
sys.stdout.flush()
if status < 0:
    signal.signal(-status, signal.SIG_DFL)
    os.kill(os.getpid(), -status)
os._exit(status)
"""

_state: dict[str, object] = {}


def _server() -> Path:
    """The socket of this process's warm server, started on first use."""
    found = _state.get("socket")
    if isinstance(found, Path):
        return found
    folder = Path(tempfile.mkdtemp(prefix="llmrt-warm-"))
    path = folder / "s"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(path), *PRELOAD],
        cwd=folder,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    assert ready == "ready\n", f"the warm llmrt server did not start: {ready!r}"

    def close() -> None:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(folder, ignore_errors=True)

    atexit.register(close)
    _state["socket"] = path
    return path


def shim(directory: Path) -> Path:
    """An executable ``directory/llmrt`` that runs its command in this process's warm server."""
    # Where ``python -m`` finds the command (its path, not its code: that would run it).
    spec = importlib.util.find_spec("llmrt.actors.app.cli.__main__")
    assert spec is not None and spec.origin is not None
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "llmrt"
    header = f"#!{sys.executable} -IS\nSOCKET = {str(_server())!r}\nMAIN = {spec.origin!r}\n"
    path.write_text(header + _SHIM, encoding="utf-8")
    path.chmod(0o755)
    return path


def command() -> list[str]:
    """The argv prefix of a warm ``llmrt`` (this process's shim, written on first use)."""
    found = _state.get("shim")
    if not isinstance(found, Path):
        folder = Path(tempfile.mkdtemp(prefix="llmrt-shim-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        found = _state["shim"] = shim(folder)
    return [str(found)]
