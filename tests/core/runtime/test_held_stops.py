"""A stop signal held over a block reaches its own handler at the block's end, not inside it."""

import os
import signal
import subprocess
import sys

import pytest

from gnnbridge.core.runtime.held_stops import stops_held


@pytest.fixture
def sigterm_noted():
    came: list[str] = []
    old = signal.signal(signal.SIGTERM, lambda signum, frame: came.append("handled"))
    yield came
    signal.signal(signal.SIGTERM, old)


def test_a_sigterm_inside_the_block_reaches_its_handler_once_when_the_block_ends(sigterm_noted):
    with stops_held():
        os.kill(os.getpid(), signal.SIGTERM)
        sigterm_noted.append("block ended")
    assert sigterm_noted == ["block ended", "handled"]
    os.kill(os.getpid(), signal.SIGTERM)  # the handler is its own again
    assert sigterm_noted == ["block ended", "handled", "handled"]


def test_nested_blocks_are_one_hold(sigterm_noted):
    with stops_held():
        with stops_held():
            os.kill(os.getpid(), signal.SIGTERM)
        sigterm_noted.append("inner ended")
    assert sigterm_noted == ["inner ended", "handled"]


def test_a_handler_that_raises_raises_at_the_end_of_the_block():
    def stop(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, stop)
    written = []
    try:
        with pytest.raises(KeyboardInterrupt), stops_held():
            os.kill(os.getpid(), signal.SIGTERM)
            written.append("the whole write")
    finally:
        signal.signal(signal.SIGTERM, old)
    assert written == ["the whole write"]


def test_a_default_sigterm_still_ends_the_process_after_the_block(tmp_path):
    done = tmp_path / "done"
    code = (
        "import os, signal, sys\n"
        "from gnnbridge.core.runtime.held_stops import stops_held\n"
        "with stops_held():\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        f"    open({str(done)!r}, 'w').write('whole')\n"
        "print('after the block')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGTERM and done.read_text() == "whole", proc.stderr
    assert "after the block" not in proc.stdout
