"""The one failure line the launcher makes of what torch's elastic agent reports."""

import multiprocessing
import os
import signal
import sys
from multiprocessing import forkserver

from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from gnnbridge.core import environ
from gnnbridge.core.runtime.launcher import _root_cause, fork_server
from gnnbridge.core.runtime.watchdog import record_for_launcher

NO_FILE = "<N/A>"


def failure_with_message(tmp_path, monkeypatch, rank, message, pid=100):
    """A rank that failed the way gnnbridge's ranks do: its line in torchelastic's error file."""
    path = tmp_path / f"error-{rank}.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    record_for_launcher(message)
    return ProcessFailure(local_rank=rank, pid=pid, exitcode=1, error_file=str(path))


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


def test_ranks_are_forks_of_a_server_that_imported_the_backends_modules_once_and_ends_with_the_job(monkeypatch):
    """What ranks need is imported by the job's fork server, not by each rank; the server is the
    job's own: stopped after it, so the next job's ranks see the environment and code of then."""
    wanted = ["xml.dom.minidom", "gnnbridge.core.runtime.preload"]  # a module:function too; the server is a new process
    monkeypatch.setenv("MARK", "first")
    with fork_server(("xml.dom.minidom:getDOMImplementation", "no_such_module_anywhere")) as method:
        assert method == "forkserver"
        loaded, mark, told = _child_sees([*wanted, "no_such_module_anywhere"])
    assert loaded == wanted and mark == "first" and not told  # a module that fails is skipped
    assert forkserver._forkserver._forkserver_pid is None  # noqa: SLF001 - the server is gone
    monkeypatch.setenv("MARK", "second")
    with fork_server():
        assert _child_sees([])[1] == "second"


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
