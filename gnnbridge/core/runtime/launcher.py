"""Starting the ranks of a run: in this process, through torch's elastic agent, or as one rank of
a job someone else started.

* ``nproc == 1`` without restarts: the worker runs in the calling process with a one-rank gloo
  group, so tracebacks, debuggers and profilers stay simple.
* ``--nproc N`` (or any ``--max-restarts``): ``torch.distributed.launcher.api.elastic_launch``,
  the agent behind ``torchrun``, starts and supervises N local ranks. It gives us the
  rendezvous on a free port (c10d, as ``torchrun --standalone``), stopping every rank on the
  first failure, and restarting all of them up to ``max_restarts`` times. Each rank sees
  torchrun's variables and takes the job path below. On CPU, ranks are forks of a fork server
  that a job starts for itself and that imports torch and the backend once (:func:`fork_server`).
* inside torchrun or an ``srun`` step (``job``): this process *is* one rank; nobody spawns.

What is ours on top of the agent, and why: the agent reports a failure as one local rank's exit
code or signal ("exitcode 1", "Signal 9 received by PID ..."), logs a traceback for it, and its
choice of "first" failure is whichever process it polled first. :func:`_root_cause` turns that
into the job's one line: a rank killed by a signal is named by rank, pid and signal (nobody knows
it better than the agent that reaped it); otherwise the line the failing rank posted to the job's
store and wrote into its torchelastic error file (see :mod:`~gnnbridge.core.runtime.rank`). The
agent's own loggers are silenced while it runs, so that line is the only one.
"""

from __future__ import annotations

import ast
import contextlib
import datetime
import logging
import math
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import torch.distributed as dist

from gnnbridge.core import environ
from gnnbridge.core.errors import ConfigError, RankFailedError, RunInterrupted, note_signal, signal_name
from gnnbridge.core.runtime.context import DistContext, resolve_device
from gnnbridge.core.runtime.jobs import JobEnv, detect_job
from gnnbridge.core.runtime.rank import RankSpec, rank_main

AGENT_LOGGERS = ("torch.distributed.elastic", "torch.distributed.launcher", "torch.multiprocessing")
MONITOR_INTERVAL_S = 0.1  # how often the agent polls its ranks: a dead rank is seen at once
SIGNALS_VAR = "TORCHELASTIC_SIGNALS_TO_HANDLE"  # set by the agent in the launching process
# What the ranks this process starts see and it does not: plugin warnings were shown here already,
# and the ranks open a mapped dataset themselves.
RANK_ENV = {environ.PLUGIN_WARNINGS_SHOWN: "1", environ.RANKS_OPEN_DATA: "1"}
_OWN_PROCESS = [False]


def launch(
    worker: Callable[..., Any],
    nproc: int,
    device_kind: str,
    args: tuple,
    timeout_s: float,
    job: JobEnv | None = None,
    max_restarts: int = 0,
    preload: tuple[str, ...] = (),
) -> Any:
    """Run ``worker(ctx, *args)`` on every rank and return rank 0's result (``None`` on the other
    ranks of a job).

    A failure that ends the run raises :class:`RankFailedError` with one line naming the rank
    that failed first and why. With ``max_restarts`` the agent first restarts every rank that
    many times; the worker learns it is a restart from ``ctx.attempt``. ``preload``: modules
    every rank imports, imported once for all of them (see :func:`fork_server`).
    """
    if job is not None:
        if dist.is_initialized():
            raise ConfigError(
                "A default process group already exists in this process; gnnbridge joins the "
                f"{job.launcher} job itself: run it before (or instead of) init_process_group."
            )
        return rank_main(RankSpec.from_job(job), device_kind, worker, args, timeout_s)
    if nproc == 1 and max_restarts == 0:
        return _run_single(worker, device_kind, args, timeout_s)
    return _run_elastic(worker, nproc, device_kind, args, timeout_s, max_restarts, preload)


def _run_single(worker: Callable[..., Any], device_kind: str, args: tuple, timeout_s: float) -> Any:
    """One rank in the caller's own process (a script's or a notebook's ``gnnbridge.run``)."""
    owns_group = not dist.is_initialized()
    hook = sys.excepthook  # init_process_group wraps it, for good, to prefix every line with "[rank0]: "
    if owns_group:
        dist.init_process_group(
            "gloo", store=dist.HashStore(), rank=0, world_size=1, timeout=datetime.timedelta(seconds=timeout_s)
        )
    try:
        return worker(DistContext(0, 1, 0, resolve_device(device_kind, 0)), *args)
    finally:
        if owns_group:
            dist.destroy_process_group()
            sys.excepthook = hook  # the caller's later errors are its own, not rank 0's


def _run_elastic(
    worker: Callable[..., Any],
    nproc: int,
    device_kind: str,
    args: tuple,
    timeout_s: float,
    max_restarts: int,
    preload: tuple[str, ...],
) -> Any:
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    with (
        tempfile.TemporaryDirectory(prefix="gnnbridge-elastic-") as log_dir,
        _agent_quiet(),
        _rendezvous_names_its_events_cheaply(),
        _agent_leaves_no_trace(),
        _ranks_inherit(RANK_ENV),
        _ranks_start_deaf_to_ctrl_c(),
        fork_server(preload, device_kind) as start_method,
    ):
        config = LaunchConfig(
            min_nodes=1,
            max_nodes=1,
            nproc_per_node=nproc,
            run_id=uuid.uuid4().hex,
            role="gnnbridge",
            rdzv_backend="c10d",
            rdzv_endpoint="127.0.0.1:0",
            rdzv_configs={"join_timeout": math.ceil(timeout_s)},
            local_addr="127.0.0.1",  # not the host's FQDN, which need not resolve on a laptop or in a container
            max_restarts=max_restarts,
            monitor_interval=MONITOR_INTERVAL_S,
            start_method=start_method,
            logs_specs=DefaultLogsSpecs(log_dir=log_dir),  # error files only; output stays on our console
        )
        try:
            results = elastic_launch(config, _elastic_rank)(worker, device_kind, args, timeout_s)
        except ChildFailedError as exc:
            raise RankFailedError(_root_cause(exc.failures)) from None
        except SignalException as exc:  # the agent stopped every rank; the caller sees what was sent
            raise RunInterrupted(int(exc.sigval)) from None
    return results.get(0)


STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def undone_on_stop(removed: str, again: str) -> Iterator[None]:
    """A command that writes derived files and removes them when it fails (``prepare``,
    ``partition``): a stop signal (Ctrl-C, SIGTERM, SIGHUP) ends it in one line saying that
    nothing half-written is left (``removed``: what went) and how to finish (``again``)."""
    try:
        with interrupt_on_sigterm():
            yield
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        raise RunInterrupted(
            signum,
            f"Stopped by {signal_name(signum)}: nothing half-written is left ({removed}); run {again} again to finish.",
        ) from None


@contextlib.contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """SIGTERM (and SIGHUP, a closed terminal) raise :class:`RunInterrupted` in this (launching)
    process, as Ctrl-C raises ``KeyboardInterrupt``: by default they would kill the process on
    the spot, skipping the cleanup that removes a half-made run folder (and with it the user's
    --out) or half-written derived files, and the line that says how to go on. With ``--nproc N``
    the elastic agent takes them over while it runs and reports them the same way (see
    :func:`_run_elastic`). Only the main thread can own a handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}

    def handler(signum, frame):
        note_signal(signum)
        raise RunInterrupted(signum)

    for signum in STOP_SIGNALS:
        if previous[signum] is not signal.SIG_IGN:  # nohup's SIGHUP stays ignored
            signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, old in previous.items():
            if old is not None:
                signal.signal(signum, old)


def _elastic_rank(worker: Callable[..., Any], device_kind: str, args: tuple, timeout_s: float) -> Any:
    """A rank started by the elastic agent: torchrun's environment, but the launcher (not each
    node's first rank) prints the failure, so ranks leave silently. It started with SIGINT
    blocked (:func:`_ranks_start_deaf_to_ctrl_c`); from here on a Ctrl-C stops it quietly."""
    try:
        _ctrl_c_stops_once()
        # What a rank starts (a DataLoader's workers), it spawns, as a spawned rank did: a fork of
        # a rank is unsafe (threads, OpenMP, CUDA), and numba takes a cross-process lock, which a
        # killed rank leaves behind for the resource tracker to warn about, where the method says fork.
        multiprocessing.set_start_method("spawn", force=True)
        spec = RankSpec.from_job(detect_job(), announce=False)
        return rank_main(spec, device_kind, worker, args, timeout_s)
    except BaseException:  # noqa: BLE001 - the launcher reports the job's first failure; no traceback here
        sys.exit(1)


def _ctrl_c_stops_once() -> None:
    """Ctrl-C reaches a rank twice: from the terminal (to the whole process group) and from the
    agent, which passes the signal it got on to every rank. The first stops the rank; a second
    would land in its way out and print a traceback, so SIGINT is ignored from then on. Then
    SIGINT is unblocked: one held since the rank started is delivered here."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where it is ignored (a background job)
        signal.signal(signal.SIGINT, _interrupt_once)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _interrupt_once(signum, frame) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _root_cause(failures: dict) -> str:
    """One line for the job's failure from the agent's ``{global rank: ProcessFailure}`` (for a
    function entrypoint it holds the one rank it found dead first): the line that rank posted,
    else its signal or exit code."""
    rank, failure = min(failures.items(), key=lambda item: item[1].timestamp)
    posted = _posted_line(failure)
    if posted:
        return posted
    if failure.exitcode < 0:
        return f"rank {rank} (pid {failure.pid}) was killed by {failure.signal_name()}"
    return f"rank {rank} (pid {failure.pid}) exited with code {failure.exitcode}"


def _posted_line(failure) -> str | None:
    """The line a gnnbridge rank wrote into its torchelastic error file (``record_for_launcher``)."""
    return failure.message.get("message") if isinstance(failure.message, dict) else None


@contextlib.contextmanager
def _agent_leaves_no_trace() -> Iterator[None]:
    """The agent installs signal handlers (Ctrl-C then raises its ``SignalException``) and sets an
    environment variable in the launching process, and keeps both: a library call must not."""
    names = [s for s in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT") if hasattr(signal, s)]
    main = threading.current_thread() is threading.main_thread()
    handlers = {name: signal.getsignal(getattr(signal, name)) for name in names} if main else {}
    env = os.environ.get(SIGNALS_VAR)
    try:
        yield
    finally:
        for name, handler in handlers.items():
            if handler is not None:  # None: installed outside Python, and left as it was
                signal.signal(getattr(signal, name), handler)
        if env is None:
            os.environ.pop(SIGNALS_VAR, None)
        else:
            os.environ[SIGNALS_VAR] = env


@contextlib.contextmanager
def _ranks_start_deaf_to_ctrl_c() -> Iterator[None]:
    """Ranks start with SIGINT blocked, until :func:`_elastic_rank` runs.

    Ctrl-C at a terminal reaches every process of its group, the ranks included, and a rank
    spends its first seconds importing torch and unpickling its work: a ``KeyboardInterrupt``
    there printed a traceback per rank (48-69 interleaved lines) above the launcher's one line.
    A blocked signal waits, and the mask is inherited across fork and exec (CPython's resource
    tracker starts the same way), so the Ctrl-C waits in each rank until gnnbridge's own code
    unblocks it and stops quietly; the agent here takes its own Ctrl-C as before and stops the
    ranks (passing the signal on: it too waits in a starting rank).

    The agent starts the ranks from this (the main) thread, so SIGINT is blocked here while it
    runs, and a thread that does nothing but keep it unblocked receives it instead: Python still
    runs the handler (the agent's) in the main thread, as for any signal. The resource tracker
    is started first: starting it unblocks SIGINT in the thread that starts it."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    done = threading.Event()
    receiver = threading.Thread(target=done.wait, name="gnnbridge-sigint", daemon=True)
    receiver.start()  # before the mask changes: threads inherit their creator's
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())  # the mask as it is
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        done.set()
        receiver.join()


@contextlib.contextmanager
def fork_server(preload: tuple[str, ...] = (), device_kind: str = "cpu") -> Iterator[str]:
    """Ranks start as forks of a server of this job's own, which imports what they need once
    (yields the start method for the ranks: ``forkserver``, or ``spawn`` where it cannot run).

    Spawned ranks each import torch, the backend's library and gnnbridge (about 6 s of CPU per
    rank with PyG, again on every restart); a fork of the launcher would skip that but is unsafe
    once it has threads, OpenMP or CUDA. Python's ``forkserver`` is the middle: a fresh process
    (exec'd, so as clean as a spawned rank, and started under this thread's signal mask), made to
    import the ``gnnbridge`` modules this process holds by now and ``preload`` (the backend's
    :meth:`~gnnbridge.core.contracts.interfaces.Backend.rank_modules`) through
    :mod:`~gnnbridge.core.runtime.preload`; each rank is a fork of it and
    unpickles its work as a spawned rank would. The server outlives the job, as Python's own fork
    server does, while what it was started with stays the same (:func:`_server_key`: this
    process's environment and signal mask, ``preload``, ``sys.path``): a later run in this process
    (a notebook's next cell, a test suite's next test) saves those imports again. One started with
    anything else is stopped and a fresh one started, so ranks always see the environment of
    their own job; the user's own modules are imported by the ranks, so their edits are seen too.
    (Edits to gnnbridge's or the backend library's own files need a fresh process, as they do in
    the caller.)

    CPU jobs only: with a GPU (``cuda``, or ``auto``) ranks are spawned as before, since an import
    may initialise CUDA's driver in the server (PyG's does, under pytest, with pyg_lib), and a
    fork of a process where it is initialised cannot use CUDA; there the imports are a small
    part of a job anyway."""
    if device_kind != "cpu" or not _socket_fits():
        yield "spawn"
        return
    names = [*preload, *sorted(name for name in list(sys.modules) if name.startswith("gnnbridge."))]
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["gnnbridge.core.runtime.preload"])
    _keep_or_stop_server(_server_key(preload))
    with _ranks_inherit({environ.PRELOAD: ",".join(names)}):
        yield "forkserver"


# What the running fork server was started with (:func:`_server_key`), or FORKED_HERE while a
# command line's job holds the server it forked (:func:`server_forked_from_here`).
_SERVER: list = [None]
FORKED_HERE = "forked-here"


def _server_key(preload: tuple[str, ...]) -> tuple:
    """What a fork server takes from this process when it starts and gives every rank after: the
    environment, the signal mask, what it imports. (gnnbridge's own modules it preloads are
    those this process holds then; a module imported since is imported by each rank instead.)"""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    return tuple(sorted(os.environ.items())), tuple(sorted(mask)), tuple(preload), tuple(sys.path)


def _keep_or_stop_server(key: tuple) -> None:
    if _SERVER[0] == FORKED_HERE:
        return
    if _SERVER[0] != key:
        _stop_fork_server()  # multiprocessing starts the next one when a rank is wanted
        _SERVER[0] = key


def own_this_process() -> None:
    """Called by the command line's entry point: the process is gnnbridge's alone (no caller's
    threads, open files or CUDA context), so a job's fork server may be forked from it
    (:func:`server_forked_from_here`). A library call (a notebook, a test) never is."""
    _OWN_PROCESS[0] = True


@contextlib.contextmanager
def server_forked_from_here(
    nproc: int, max_restarts: int, device_kind: str, preload: tuple[str, ...]
) -> Iterator[None]:
    """The job's fork server, forked from this process before it does any work, for the life of
    the block (the job's checks, the launch, the ranks' restarts).

    :func:`fork_server` starts a fresh interpreter that imports torch and the backend's library
    again, about 6 s of CPU with PyG, which this process has just spent on the same imports (its
    checks build the model). Forked here, once those modules are imported and before anything
    starts a thread, opens a file or computes, the server is as clean as that fresh one (the same
    modules, the same threads: those the imports start) and costs nothing; a 2-rank PyG job then
    takes about a third less CPU. Only in the command line's own process (:func:`own_this_process`)
    with no other Python thread, and only where :func:`fork_server` would fork ranks at all: CPU
    jobs of several ranks. :func:`fork_server` then finds it running and uses it."""
    wanted = (nproc > 1 or max_restarts > 0) and _surely_cpu(device_kind) and _OWN_PROCESS[0]
    if not wanted or threading.active_count() > 1 or not _socket_fits() or not _imported(preload):
        yield
        return
    _stop_fork_server()  # a library call's earlier server: this job's is forked from here
    _fork_server_here()
    _SERVER[0] = FORKED_HERE
    try:
        yield
    finally:
        _stop_fork_server()
        _SERVER[0] = None


def _imported(preload: tuple[str, ...]) -> bool:
    """Import the backend's entries here; ``False`` if one fails (a library not installed): the
    checks that follow then refuse the backend in its own line, and no server is forked."""
    from gnnbridge.core.runtime.preload import import_entry

    try:
        for name in preload:
            import_entry(name)
    except Exception:  # noqa: BLE001 - the backend's own check says why, next
        return False
    return True


def _surely_cpu(device_kind: str) -> bool:
    """Whether the job's ranks run on CPU, known before anything asks CUDA (a question that
    initialises its driver, which a fork cannot use): ``cpu``, or ``auto`` with a torch built
    without CUDA or ROCm."""
    import torch

    return device_kind == "cpu" or (device_kind == "auto" and torch.version.cuda is None and torch.version.hip is None)


def _fork_server_here() -> None:
    """What ``multiprocessing.forkserver.ForkServer.ensure_running`` does, with ``os.fork`` in
    place of starting a fresh interpreter: a listening socket, an "alive" pipe whose write end
    this process and every rank hold (the server ends when all have closed it), and the server's
    address, pipe and pid recorded in Python's fork server object."""
    import socket
    import warnings
    from multiprocessing import connection, forkserver, resource_tracker

    server = forkserver._forkserver  # noqa: SLF001 - no public way to hand it a server
    resource_tracker.ensure_running()
    sys.stdout.flush()
    sys.stderr.flush()
    with socket.socket(socket.AF_UNIX) as listener:
        address = connection.arbitrary_address("AF_UNIX")
        listener.bind(address)
        os.chmod(address, 0o600)
        listener.listen()
        alive_r, alive_w = os.pipe()
        with warnings.catch_warnings():  # 3.12+ warns of the threads imports started
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            _serve_forks(listener.fileno(), alive_r, alive_w)
        os.close(alive_r)
    server._forkserver_address = address  # noqa: SLF001
    server._forkserver_alive_fd = alive_w  # noqa: SLF001
    server._forkserver_pid = pid  # noqa: SLF001


def _serve_forks(listener_fd: int, alive_r: int, alive_w: int) -> None:
    """The forked server: as a fresh interpreter would start, then Python's own server loop. Its
    signal handlers are Python's defaults (the ranks restore SIGINT's), SIGINT is blocked as
    :func:`_ranks_start_deaf_to_ctrl_c` blocks it for spawned ranks, the ranks' environment is
    set, and it never returns into this process's code (no atexit, no finally of the caller)."""
    from multiprocessing import forkserver

    try:
        os.close(alive_w)
        for signum in signal.valid_signals():
            handler = signal.getsignal(signum)
            if callable(handler) and handler is not signal.default_int_handler:
                signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        os.environ.update(RANK_ENV)
        forkserver.main(listener_fd, alive_r, [])
    finally:
        os._exit(0)


def _socket_fits() -> bool:
    """The fork server listens on a Unix socket in multiprocessing's temporary folder, under
    ``TMPDIR``; a socket's path holds at most 107 bytes (Python 3.11 does not shorten it), so a
    deep ``TMPDIR`` falls back to spawned ranks (slower to start, otherwise the same)."""
    from multiprocessing import util

    return len(os.path.join(util.get_temp_dir(), "listener-xxxxxxxx").encode()) <= 100


def _stop_fork_server() -> None:
    from multiprocessing import forkserver

    stop = getattr(forkserver._forkserver, "_stop", None)  # noqa: SLF001 - no public way to end it
    if stop is not None:
        stop()


@contextlib.contextmanager
def _ranks_inherit(env: dict[str, str]) -> Iterator[None]:
    """Set ``env`` for the ranks about to start (they inherit this process's environment), and only
    for them: e.g. that plugin warnings were shown here already, so no rank repeats them."""
    before = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def _agent_quiet() -> Iterator[None]:
    """Silence the elastic agent's loggers: each sets its own level, so the parents' do not help."""
    import torch.distributed.elastic.rendezvous.c10d_rendezvous_backend  # noqa: F401 - their loggers exist now
    import torch.distributed.elastic.rendezvous.dynamic_rendezvous  # noqa: F401

    loggers = [
        logging.getLogger(name) for name in list(logging.root.manager.loggerDict) if name.startswith(AGENT_LOGGERS)
    ]
    before = [lg.disabled for lg in loggers]
    for lg in loggers:
        lg.disabled = True
    try:
        yield
    finally:
        for lg, was in zip(loggers, before):
            lg.disabled = was


@contextlib.contextmanager
def _rendezvous_names_its_events_cheaply() -> Iterator[None]:
    """The elastic rendezvous names each event it records by its caller's function, found with
    ``inspect.stack()``, twice an event, whether or not any handler records events (by default
    none does). A stack walk reads the source of every frame and scans ``sys.modules`` for each
    (thousands of modules once PyG or DGL is imported): about a CPU-second of the launcher's per
    job, a third of a small 2-rank job's CPU. The frame's own name is the same name, read without
    the walk."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    original = getattr(dynamic_rendezvous, "get_method_name", None)
    if original is None:  # another torch: nothing to spare
        yield
        return

    def get_method_name(depth: int = 2) -> str:
        try:
            return sys._getframe(depth).f_code.co_name  # noqa: SLF001 - what inspect.stack()[depth] names
        except ValueError:
            return "no_method_name"

    dynamic_rendezvous.get_method_name = get_method_name
    try:
        yield
    finally:
        dynamic_rendezvous.get_method_name = original


# ------------------------------------------------------------------ the script's main guard

GUARD = 'put the call under  if __name__ == "__main__":  (see the Python example in docs/python.md)'


def refuse_unguarded_start() -> None:
    """Stop a rank that is still importing the user's script and reached a gnnbridge call.

    Ranks start as spawned processes do (a fork server's too), importing the launching script again in every rank
    (as ``__mp_main__``); a call at its top level would start a whole new run inside each rank.
    :func:`refuse_unguarded_script` catches this before any rank starts; this is the rank-side
    net for scripts it cannot read. ``SystemExit``: the one line, no traceback."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        print(
            f"Error: a rank started by gnnbridge was importing your script and reached a gnnbridge call at its "
            f"top level; {GUARD}.",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(1)


def refuse_unguarded_script() -> None:
    """Refuse, before any rank starts, a multi-rank run started from the top level of a script
    without the ``if __name__ == "__main__":`` guard (every rank would re-run it)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    frame = sys._getframe(1)  # noqa: SLF001 - the caller's stack is what decides
    while frame is not None and not (
        frame.f_globals is getattr(main, "__dict__", None) and frame.f_code.co_name == "<module>"
    ):
        frame = frame.f_back
    if frame is None or not path or not str(path).endswith(".py"):
        return  # not called while the script runs top to bottom (a function, a notebook, python -c)
    try:
        tree = ast.parse(open(path, encoding="utf-8").read(), path)  # noqa: SIM115
    except (OSError, SyntaxError, ValueError):
        return
    if not _under_main_guard(tree, frame.f_lineno):
        raise ConfigError(
            f"{path}, line {frame.f_lineno}: a run with several ranks is started at the top level of "
            f"the script, and every rank imports the script again (so it would start again); {GUARD}."
        )


def _under_main_guard(tree: ast.Module, line: int) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_test(node.test) and node.body:
            if node.body[0].lineno <= line <= (node.body[-1].end_lineno or line):
                return True
    return False


def _is_main_test(test: ast.expr) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    values = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and values == ["__main__"]
