"""The one failure line the launcher makes of what torch's elastic agent reports."""

import signal

from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from gnnbridge.core.runtime.launcher import _root_cause
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
