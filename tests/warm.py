"""Warm interpreters that run ``gnnbridge ARGS`` in a fork of themselves, for the suite's CLI runs.

Why: a fresh ``python -m gnnbridge`` spends 4-6 s of CPU importing torch and a backend's library
before it does anything (and the command line's ranks are forked from it, so they skip it too),
and the suite starts a few hundred of them on a 2-core machine. A warm interpreter imports them
once and forks for every run (a 2-rank run of the default experiment: 4.5 CPU-s against 9.2 on
PyG and 12.9 on DGL fresh); the fork runs :func:`gnnbridge.cli.main` exactly as
the console script does (no ``argv``: the command line's own process, which forks its ranks' server
from itself) and exits through Python's normal shutdown, so atexit work and exit codes are the
command line's own. Nothing off the shelf does this (multiprocessing's forkserver runs a function
with pickled arguments and no output of its own; a nailgun-style server is for the JVM).

What a fork keeps of a fresh process: its own pid, working folder, environment (folders its
``PYTHONPATH`` adds are put on ``sys.path`` where a fresh interpreter puts them), stdin (empty),
stdout and stderr (pipes the caller reads, as ``subprocess.run(capture_output=True)`` does), exit
status (a signal's as ``-N``), numpy's and Python's random state drawn afresh, and a
``sitecustomize`` hook (:func:`helpers.hooked_env`), imported before the command as a fresh
interpreter imports it at its start, though after gnnbridge's modules (a hook that raises ends the
command with its traceback, where a fresh interpreter prints a line and goes on). What it cannot
keep, so :func:`helpers.gnnbridge` uses a fresh interpreter for it: an environment other than the
suite's own plus knobs read at run time only (:class:`helpers.SuiteEnv`; anything else may change
what an import does: a missing library, a ``TMPDIR``), and ``GNNBRIDGE_TESTS_FRESH=1`` runs every
test's commands fresh. Each command is started by a keeper (a fork that forks the command, waits
for it and reports its pid, then its exit status), so commands run side by side, and
:func:`start` hands one back at once, to be driven as a :class:`subprocess.Popen` is (a
background job, a signal, a process group of its own). Two warm interpreters, taken in turn,
each with its own string-hash seed, so that two runs a test compares do not share one (as two
fresh interpreters would not): a result that depends on the order of a set of names still differs
between them. Under xdist the controller starts the two (:func:`share`) and every worker uses
them: each start is about 6.5 CPU-s, and four workers with two each spent about 50 of the
suite's CPU-s on them. A worker starts two of its own only when it cannot use the shared ones
(a ``.pth`` file installed since they started, or one of them gone).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import select
import selectors
import shutil
import signal
import site
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = str(Path(__file__).resolve().parent)
# gnnbridge.cli first: it sets an environment variable that must be set before torch is imported
IMPORTS = ("gnnbridge.cli", "torch", "numpy", "gnnbridge.backends.pyg.backend", "gnnbridge.backends.dgl.backend")
# what the imports add to the environment (gnnbridge.cli's, DGL's library path), for the forks
SET_BY_IMPORTS: dict[str, str] = {}


# --- the warm interpreter --------------------------------------------------------------------


def serve(path: str) -> None:
    """Import what every command imports, then run one command at a time, each in a fork. Ends
    when the caller closes its end of stdin (the test worker exited, however it ended)."""
    sys.path.remove(TESTS)  # the commands' own sys.path
    _import_what_commands_import()
    # What was imported is never collected: a fork's collections and its exit then leave those
    # objects alone (an exit that inspected them all took about 1.5 CPU-s of every command).
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".binding")
    listener.listen(8)
    os.rename(path + ".binding", path)  # it appears listening: a shared one's callers wait for it
    print("ready", flush=True)
    watch = selectors.DefaultSelector()
    watch.register(listener, selectors.EVENT_READ)
    watch.register(sys.stdin, selectors.EVENT_READ)
    while True:
        for key, _ in watch.select():
            if key.fileobj is sys.stdin:
                _wait_for_keepers()
                return
            conn, _ = listener.accept()
            with conn:
                if os.fork() == 0:  # the command's keeper, so that commands run side by side
                    keeper = os.getpid()
                    try:
                        listener.close()
                        watch.close()
                        _one_command(conn)
                    finally:  # not in the command (a fork of this), whose exit goes on up
                        if os.getpid() == keeper:
                            os._exit(0)
        _reap_keepers()


def _reap_keepers() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _wait_for_keepers() -> None:
    """The commands still running end before the interpreter does (their CPU is then its own)."""
    with contextlib.suppress(ChildProcessError):
        while True:
            os.wait()


def _import_what_commands_import() -> None:
    """The modules a 2-rank training run of either backend imports; importing none of them
    starts a thread or opens a file a command would see."""
    import pkgutil

    import gnnbridge

    before = dict(os.environ)
    for name in IMPORTS:
        importlib.import_module(name)
    from gnnbridge.backends.dgl.backend import DglBackend
    from gnnbridge.backends.pyg.backend import PygBackend
    from gnnbridge.core.plugins import manager as plugin_manager
    from gnnbridge.core.runtime.preload import import_entry
    from gnnbridge.core.training.trainer import RANK_MODULES

    for entry in (*PygBackend().rank_modules(), *DglBackend().rank_modules(), *RANK_MODULES):
        import_entry(entry)  # what a command's launcher loads before it forks its ranks' server
    for module in pkgutil.walk_packages(gnnbridge.__path__, "gnnbridge."):
        # Not the test kit (no command imports it), whose import loads the installed plugins:
        # each command loads them itself, so it finds a plugin installed since, as a fresh one.
        if not module.name.endswith("__main__") and not module.name.startswith("gnnbridge.testing."):
            importlib.import_module(module.name)
    assert not plugin_manager._loaded, "an import loaded the plugins: a command would miss one installed since"
    import matplotlib

    matplotlib.use("Agg")  # what gnnbridge's plots choose
    importlib.import_module("matplotlib.pyplot")
    SET_BY_IMPORTS.update({k: v for k, v in os.environ.items() if before.get(k) != v})


def _one_command(conn: socket.socket) -> None:
    """Fork the command, tell the caller its pid, and later its exit status."""
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 2)
    request = json.loads(message)
    pid = os.fork()
    if pid == 0:
        conn.close()
        _become_command(request, fds)  # raises SystemExit: the child's interpreter ends normally
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(OSError):  # a caller past its deadline has gone: serve the next one
        conn.sendall(f"{pid}\n".encode())
    _, status = os.waitpid(pid, 0)
    with contextlib.suppress(OSError):
        conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())


def _become_command(request: dict, fds: list[int]) -> None:
    if request["new_session"]:  # Popen's start_new_session
        os.setsid()
    devnull = os.open(os.devnull, os.O_RDONLY)
    for source, target in ((devnull, 0), (fds[0], 1), (fds[1], 2)):
        os.dup2(source, target)
        os.close(source)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - fd 0 lives as long as the process
    os.chdir(request["cwd"])
    own_path = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    os.environ.clear()
    os.environ.update({**SET_BY_IMPORTS, **request["env"]})
    # Folders the command's PYTHONPATH adds, where a fresh interpreter puts them: after its own
    # folder (here '', the working folder), before the standard library and site-packages.
    added = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry and entry not in own_path]
    sys.path[1:1] = added
    sys.argv = [str(Path(__import__("gnnbridge").__file__).with_name("__main__.py")), *request["args"]]
    _fresh_random_state()
    if request["hook"]:  # what a fresh interpreter imports at its start from the hook's folder
        sys.path.insert(0, request["hook"])
        sys.modules.pop("sitecustomize", None)
        importlib.import_module("sitecustomize")
    from gnnbridge.cli import main

    sys.exit(main())


def _fresh_random_state() -> None:
    """A fresh interpreter draws numpy's global seed from the OS (Python's ``random`` reseeds
    itself in a fork already)."""
    import numpy

    numpy.random.seed()


# --- the caller's side -----------------------------------------------------------------------


class Warm:
    """One warm interpreter, started on first use and again if it died."""

    def __init__(self, env: dict[str, str], hash_seed: int) -> None:
        self.env = {**env, "PYTHONHASHSEED": str(hash_seed)}
        self.proc: subprocess.Popen | None = None
        self.folder = self.path = ""
        self.installed: tuple = ()

    def stop(self) -> None:
        """Close its stdin (it then returns) and wait for it, so its forks' CPU time is this
        process's children's, as a fresh command's would be."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def start(self, args, cwd, env, hook, new_session=False) -> Started:
        self._ensure_running()
        request = {"args": [str(a) for a in args], "cwd": str(cwd), "env": dict(env), "hook": hook}
        request["new_session"] = new_session
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.path)
        socket.send_fds(conn, [json.dumps(request).encode()], [out_w, err_w])
        os.close(out_w)
        os.close(err_w)
        return Started(args, conn, out_r, err_r)

    def run(self, args, cwd, env, timeout, hook) -> subprocess.CompletedProcess:
        proc = self.start(args, cwd, env, hook)
        try:
            out, err = _read_until_closed(proc.stdout, proc.stderr, proc.pid, args, timeout)
        except subprocess.TimeoutExpired:
            proc._conn.close()  # the keeper's status is not awaited: it was killed
            raise
        return subprocess.CompletedProcess(list(args), proc.wait(), out, err)

    def _ensure_running(self) -> None:
        installed = _installed_stamp()
        if self.proc is not None and self.proc.poll() is None and installed == self.installed:
            return
        self.stop()
        self.installed = installed
        self._spawn()
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"the warm interpreter did not start (exit {self.proc.wait()}); see stderr above")

    def _spawn(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="gnnbridge-warm-")
        self.path = path = os.path.join(self.folder, "socket")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", f"import sys; sys.path.insert(0, {TESTS!r}); import warm; warm.serve({path!r})"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=self.env,
            text=True,
        )


class Started:
    """A command running in a fork of a warm interpreter, driven as a :class:`subprocess.Popen`
    with ``stdout=PIPE, stderr=PIPE, text=True`` is: ``pid``, ``stdout``, ``stderr``, ``poll``,
    ``wait``, ``communicate``, ``send_signal``, ``kill``, ``returncode``. Its parent is the warm
    interpreter's keeper, which sends its pid and then its exit status over ``conn``."""

    def __init__(self, args, conn: socket.socket, out_r: int, err_r: int) -> None:
        self.args = [str(a) for a in args]
        self.returncode: int | None = None
        self._conn, self._buffer = conn, b""
        self.pid = int(self._line(None))
        self.stdout = open(out_r, errors="replace")  # noqa: SIM115 - closed when read to its end
        self.stderr = open(err_r, errors="replace")  # noqa: SIM115

    def _line(self, timeout: float | None) -> str | None:
        """The keeper's next line, or None if it has not come within ``timeout`` seconds."""
        while b"\n" not in self._buffer:
            if not select.select([self._conn], [], [], timeout)[0]:
                return None
            data = self._conn.recv(64)
            if not data:
                raise RuntimeError(f"the warm interpreter ended while {self.args} ran")
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def poll(self) -> int | None:
        return self._status(0)

    def wait(self, timeout: float | None = None) -> int:
        if self._status(timeout) is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def _status(self, timeout: float | None) -> int | None:
        if self.returncode is None and (line := self._line(timeout)) is not None:
            self.returncode = int(line)
            self._conn.close()
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Both pipes to their end, then the exit status, within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        out, err = _read_until_closed(self.stdout, self.stderr, None, self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return out, err

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # never a pid that has been reaped and may be another's now
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _read_until_closed(out, err, pid: int | None, args, timeout: float | None) -> tuple[str, str]:
    """Both pipes to their end, as ``subprocess.run`` reads them; past ``timeout`` the command
    (``pid``, if given) is killed and :class:`subprocess.TimeoutExpired` raised, as
    ``subprocess.run`` does."""
    chunks: dict = {out: [], err: []}
    deadline = None if timeout is None else time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        for pipe in chunks:
            sel.register(pipe, selectors.EVENT_READ)
        while sel.get_map():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                if pid is not None:
                    _kill(pid)
                    for key in list(sel.get_map().values()):  # those not at their end (closed) yet
                        key.fileobj.close()
                raise subprocess.TimeoutExpired(list(args), timeout)
            for key, _ in sel.select(left):
                data = os.read(key.fileobj.fileno(), 1 << 16)
                if data:
                    chunks[key.fileobj].append(data)
                else:
                    sel.unregister(key.fileobj)
                    key.fileobj.close()
    return tuple(b"".join(chunks[pipe]).decode(errors="replace") for pipe in (out, err))


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


_POOL: list[Warm] = []
_TURN = [0]
SHARED_VARIABLE = "GNNBRIDGE_TESTS_WARM"  # the controller's interpreters, for its workers (JSON)
_SHARED: list[Warm] = []
_SHARED_STAMP: list[tuple] = []


class SharedWarm(Warm):
    """A warm interpreter the xdist controller started and stops: a worker only connects to it."""

    def __init__(self, path: str) -> None:
        super().__init__({}, 0)
        self.path = path

    def stop(self) -> None:
        """Not this worker's to stop."""

    def _ensure_running(self) -> None:
        """The controller started it as the workers started: wait for its socket (its imports)."""
        deadline = time.monotonic() + 300
        while not os.path.exists(self.path):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the shared warm interpreter did not open {self.path} in 300 s")
            time.sleep(0.05)


def share(env: dict[str, str]) -> None:
    """In the xdist controller: start the two warm interpreters every worker will use (not
    waiting: they import while the workers start), and name them in the environment the workers
    inherit (read back by :func:`use_shared`). They stop with the controller (``_stop_all``)."""
    installed = _installed_stamp()
    for _ in range(2):
        warm = _next(env)
        warm.installed = installed
        warm._spawn()
    stamp = [list(item) for item in installed]
    os.environ[SHARED_VARIABLE] = json.dumps({"paths": [w.path for w in _POOL], "installed": stamp})


def use_shared(value: str | None) -> None:
    """In a worker: use the controller's interpreters that ``value`` names (see :func:`share`)."""
    if value:
        shared = json.loads(value)
        _SHARED[:] = [SharedWarm(path) for path in shared["paths"]]
        _SHARED_STAMP[:] = [tuple(tuple(item) for item in shared["installed"])]


@atexit.register
def _stop_all() -> None:
    for warm in _POOL:
        warm.stop()


def _installed_stamp() -> tuple:
    """The ``.pth`` files of the installed packages: one added since a warm interpreter started
    (an editable install's hook) does its work only at a start, so that interpreter is replaced,
    as a fresh one would see it. A package installed without one needs no new start: a fork finds
    it and its entry points, as the folders' listings are read again when they change (checked by
    hand with the example plugin installed into the environment; the suite now installs it into
    a folder of its own). The folders' own times, stamped here before, replaced every worker's
    warm interpreters after each install and uninstall."""
    folders = [*site.getsitepackages(), site.getusersitepackages()]
    return tuple(
        (entry.path, entry.stat().st_mtime_ns)
        for folder in folders
        if os.path.isdir(folder)
        for entry in sorted(os.scandir(folder), key=lambda e: e.name)
        if entry.name.endswith(".pth")
    )


def run(args, cwd, env, timeout, hook=None, start_env=None) -> subprocess.CompletedProcess:
    """``gnnbridge ARGS`` in a fork of the next warm interpreter (started with ``start_env``, the
    suite's environment, by default ``env``), with ``env``; ``hook``: a folder whose
    ``sitecustomize`` the fork imports first."""
    return _next(start_env or env).run(args, cwd, env, timeout, hook)


def start(args, cwd, env, hook=None, start_env=None, new_session=False) -> Started:
    """``gnnbridge ARGS`` started as :func:`run` runs it, returned at once, to be driven as a
    :class:`subprocess.Popen` is (a background job, a signal, commands side by side);
    ``new_session``: Popen's ``start_new_session``. Signals are disposed as the suite's worker
    disposes them (tests/conftest.py), as a fresh interpreter it started would find them."""
    return _next(start_env or env).start(args, cwd, env, hook, new_session)


def _next(start_env) -> Warm:
    if _SHARED and _installed_stamp() == _SHARED_STAMP[0]:
        warm = _SHARED[_TURN[0] % len(_SHARED)]
        _TURN[0] += 1
        return warm
    if not _POOL:
        seeds = (int.from_bytes(os.urandom(2), "big") for _ in range(2))
        _POOL.extend(Warm(start_env, seed) for seed in seeds)
    warm = _POOL[_TURN[0] % len(_POOL)]
    _TURN[0] += 1
    return warm
