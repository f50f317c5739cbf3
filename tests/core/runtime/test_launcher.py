"""The one failure line the launcher makes of what torch's elastic agent reports."""

import multiprocessing
import os
import signal
import sys
from multiprocessing import forkserver

from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from gnnbridge.core import environ
from gnnbridge.core.runtime.launcher import _rendezvous_names_its_events_cheaply, _root_cause, fork_server
from gnnbridge.core.runtime.watchdog import record_for_launcher
from gnnbridge.core.training.trainer import RANK_MODULES

NO_FILE = "<N/A>"


def failure_with_message(tmp_path, monkeypatch, rank, message, pid=100):
    """A rank that failed the way gnnbridge's ranks do: its line in torchelastic's error file."""
    path = tmp_path / f"error-{rank}.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    record_for_launcher(message)
    return ProcessFailure(local_rank=rank, pid=pid, exitcode=1, error_file=str(path))


def test_the_rendezvous_names_its_events_as_torch_does_without_walking_the_stack(monkeypatch):
    """The launcher's elastic rendezvous names every event by its caller's function; torch finds it
    with ``inspect.stack()``, about a CPU-second of a small job's launcher. The name must stay."""
    import inspect

    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    def next_rendezvous():  # the rendezvous method whose event is named
        return record()

    def record():  # the handler's _record, which asks for its caller's name
        return dynamic_rendezvous.get_method_name()

    original = dynamic_rendezvous.get_method_name
    expected = next_rendezvous()
    walks = []
    monkeypatch.setattr(inspect, "stack", lambda *a, **k: walks.append(1) or [])
    with _rendezvous_names_its_events_cheaply():
        assert next_rendezvous() == expected == "next_rendezvous"
    assert walks == [] and dynamic_rendezvous.get_method_name is original


def test_a_rank_killed_by_a_signal_is_named_with_its_pid():
    killed = ProcessFailure(local_rank=1, pid=4242, exitcode=-signal.SIGKILL, error_file=NO_FILE)
    assert _root_cause({1: killed}) == "rank 1 (pid 4242) was killed by SIGKILL"


def test_the_posted_line_is_the_message_not_the_agents_exit_code(tmp_path, monkeypatch):
    failure = failure_with_message(tmp_path, monkeypatch, 0, "rank 1 failed: ValueError: boom")
    assert _root_cause({0: failure}) == "rank 1 failed: ValueError: boom"


def test_a_rank_that_posted_its_line_and_then_died_of_a_signal_is_reported_by_its_line(tmp_path, monkeypatch):
    """e.g. SIGABRT in gloo's teardown after the rank had said why it failed."""
    failure = failure_with_message(tmp_path, monkeypatch, 1, "rank 1 failed: RuntimeError: out of memory")
    failure.exitcode = -signal.SIGABRT
    assert _root_cause({1: failure}) == "rank 1 failed: RuntimeError: out of memory"


def test_a_silent_exit_still_says_which_rank():
    quiet = ProcessFailure(local_rank=3, pid=7, exitcode=2, error_file=NO_FILE)
    assert _root_cause({3: quiet}) == "rank 3 (pid 7) exited with code 2"


def _report(queue, names):
    """Run in a rank-like child: which of ``names`` it holds without importing them, and its env."""
    queue.put(([name for name in names if name in sys.modules], os.environ.get("MARK"), environ.PRELOAD in os.environ))


def _child_sees(names):
    context = multiprocessing.get_context("forkserver")
    queue = context.SimpleQueue()
    child = context.Process(target=_report, args=(queue, names))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == 0, child.exitcode
    return queue.get()


def test_ranks_are_forks_of_a_server_that_imported_the_backends_modules_once_and_sees_each_jobs_environment(
    monkeypatch,
):
    """What ranks need is imported by the job's fork server, not by each rank; the server outlives
    the job for the next one started the same way (a notebook's next cell skips the imports), and
    is replaced when the environment changed, so each job's ranks see the environment of then."""
    wanted = ["xml.dom.minidom", "gnnbridge.core.runtime.preload"]  # a module:function too; the server is a new process
    monkeypatch.setenv("MARK", "first")
    with fork_server(("xml.dom.minidom:getDOMImplementation", "no_such_module_anywhere")) as method:
        assert method == "forkserver"
        loaded, mark, told = _child_sees([*wanted, "no_such_module_anywhere"])
        first = forkserver._forkserver._forkserver_pid  # noqa: SLF001
    assert loaded == wanted and mark == "first" and not told  # a module that fails is skipped
    with fork_server(("xml.dom.minidom:getDOMImplementation", "no_such_module_anywhere")):
        assert _child_sees(wanted)[0] == wanted
        assert forkserver._forkserver._forkserver_pid == first  # noqa: SLF001 - the same server, kept
    monkeypatch.setenv("MARK", "second")
    with fork_server():
        assert _child_sees([])[1] == "second"
        assert forkserver._forkserver._forkserver_pid != first  # noqa: SLF001 - a fresh one
    assert not os.path.exists(f"/proc/{first}")  # the replaced server is gone


def _numba_state(queue):
    """Run in a rank-like child: whether numba has started (its first kernel loaded) and whether
    its thread pool runs, before the child has run anything."""
    from numba.np.ufunc import parallel

    from gnnbridge.core.sampling import kernels

    queue.put((bool(kernels._relabel.overloads), parallel._is_initialized, "torch._dynamo" in sys.modules))


def test_a_training_jobs_ranks_are_forked_with_torchs_optimizer_imports_and_numba_started_but_no_threads():
    """What every Trainer's rank loaded itself (torch._dynamo, by its first optimizer; numba's
    start, by its first kernel: together about 2.5 s of CPU a rank) is loaded once by the server;
    numba's thread pool is not, since a fork keeps no thread of its parent's."""
    context = multiprocessing.get_context("forkserver")
    with fork_server(RANK_MODULES):
        queue = context.SimpleQueue()
        child = context.Process(target=_numba_state, args=(queue,))
        child.start()
        child.join(timeout=120)
        assert child.exitcode == 0, child.exitcode
        assert queue.get() == (True, False, True)


def test_a_temporary_folder_too_deep_for_the_servers_socket_starts_spawned_ranks(tmp_path, monkeypatch):
    """A Unix socket's path holds at most 107 bytes: under a deep TMPDIR the fork server could not
    listen ("AF_UNIX path too long"), so ranks are spawned instead."""
    from multiprocessing import util

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setattr(util, "get_temp_dir", lambda: str(deep))
    with fork_server() as method:
        assert method == "spawn"


def test_ranks_that_may_use_a_gpu_are_spawned():
    """A fork of a process in which an import initialised CUDA's driver cannot use CUDA."""
    for device_kind in ("cuda", "auto"):
        with fork_server((), device_kind) as method:
            assert method == "spawn"


# Run as a program of its own: the server is forked from a process that is gnnbridge's alone.
FORKED_FROM_HERE = """
import multiprocessing, os, signal, sys
from multiprocessing import forkserver
from gnnbridge.core.runtime import launcher

def child_state(queue):
    queue.put((
        "xml.dom.minidom" in sys.modules,
        {k: os.environ.get(k) for k in launcher.RANK_ENV},
        signal.getsignal(signal.SIGTERM) is signal.SIG_DFL,
        signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set()),
        os.getppid(),
    ))

def seen():
    context = multiprocessing.get_context("forkserver")
    queue = context.SimpleQueue()
    child = context.Process(target=child_state, args=(queue,))
    child.start()
    child.join(timeout=120)
    return queue.get()

signal.signal(signal.SIGTERM, lambda *a: None)  # as the launcher's own handler is, while it checks
with launcher.server_forked_from_here(2, 0, "cpu", ("xml.dom.minidom",)):
    assert forkserver._forkserver._forkserver_pid is None, "a library call forks no server from its caller"
launcher.own_this_process()
with launcher.server_forked_from_here(1, 0, "cpu", ()):
    assert forkserver._forkserver._forkserver_pid is None, "one rank runs here: no server"
with launcher.server_forked_from_here(2, 0, "cpu", ("no_such_backend_library",)):
    assert forkserver._forkserver._forkserver_pid is None, "a library that fails: its backend's check says so"
with launcher.server_forked_from_here(2, 0, "cpu", ("xml.dom.minidom",)):
    server = forkserver._forkserver._forkserver_pid
    assert open(f"/proc/{server}/cmdline").read() == open("/proc/self/cmdline").read(), "a fork of this process"
    imported, env, sigterm_default, sigint_blocked, parent = seen()
    assert imported and parent == server, (imported, parent, server)
    assert env == launcher.RANK_ENV and not any(k in os.environ for k in env), env  # the ranks' only
    assert sigterm_default and sigint_blocked, (sigterm_default, sigint_blocked)
assert forkserver._forkserver._forkserver_pid is None and not os.path.exists(f"/proc/{server}"), "gone with the job"
print("ok")
"""


def test_the_command_lines_ranks_fork_from_a_fork_of_it_as_clean_as_a_fresh_server(tmp_path):
    """``gnnbridge train --nproc N`` has imported torch and the backend for its checks: its job's
    fork server is a fork of it (no second import), with Python's default signal handlers, SIGINT
    held until a rank's own code takes it, and the ranks' environment; a library call never
    forks its caller, and the server ends with the job."""
    import subprocess

    script = tmp_path / "forked.py"
    script.write_text(FORKED_FROM_HERE)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_a_backend_whose_library_is_missing_is_refused_in_its_own_line_with_several_ranks(tmp_path):
    """The command line imports the backend's library before its checks, to fork the job's server;
    a library that cannot be imported must still reach the user as the backend's one-line refusal."""
    import subprocess

    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import gnnbridge.backends.dgl.compat as c\nc._state['error'] = 'dgl is not installed'\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, "-m", "gnnbridge", "train", "--backend", "dgl", "--nproc", "2", "--out", "run"]
    proc = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        "Error: Backend 'dgl' cannot run here: dgl is not installed"
    ], proc.stderr
    assert not (tmp_path / "run").exists()


def _rank_of(ctx):
    return ctx.rank, ctx.world_size


def test_one_rank_in_the_callers_process_gives_back_its_excepthook():
    """torch's init_process_group wraps sys.excepthook for good, prefixing every line of a later
    traceback with "[rank0]: ": a script or notebook that ran gnnbridge.run in its own process
    showed its own errors as rank 0's (one prefix more per run)."""
    from gnnbridge.core.runtime.launcher import launch

    before = sys.excepthook
    assert launch(_rank_of, 1, "cpu", (), timeout_s=60) == (0, 1)
    assert sys.excepthook is before
