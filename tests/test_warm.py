"""The suite's warm interpreters (:mod:`warm`) answer a command as a fresh interpreter does: the
same exit code and output, a deadline that kills, and a second command served after a killed one.
Most of the suite's commands run there, so a difference here would be a difference everywhere."""

from __future__ import annotations

import subprocess

import pytest
from helpers import gnnbridge, hooked_env, start


@pytest.mark.parametrize(
    "args",
    [
        ("train", "--backend", "nope"),
        ("train", "--set", "train.epochs=0"),
        ("config", "show"),
        ("backends",),
    ],
    ids=["unknown-backend", "refused-value", "config", "backends"],
)
def test_a_warm_fork_answers_as_a_fresh_interpreter(tmp_path, args):
    warm = gnnbridge(*args, cwd=tmp_path)
    fresh = gnnbridge(*args, cwd=tmp_path, fresh=True)
    assert (warm.returncode, warm.stdout, warm.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


PATCH_DGL = """
import os
from gnnbridge.backends.dgl.backend import DglBackend

DglBackend.availability = lambda self: "patched by the hook: " + os.environ["WHY"]
"""


def test_a_hooked_command_runs_its_hook_first_as_a_fresh_interpreter_does(tmp_path):
    env = hooked_env(tmp_path, PATCH_DGL, WHY="a knob only the hook reads")
    warm = gnnbridge("backends", cwd=tmp_path, env=env)
    fresh = gnnbridge("backends", cwd=tmp_path, env=env, fresh=True)
    assert "dgl      unavailable  patched by the hook: a knob only the hook reads" in warm.stdout
    assert (warm.returncode, warm.stdout, warm.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    # and the next commands, on both warm interpreters (they take turns), run unhooked
    assert ["patched" in gnnbridge("backends", cwd=tmp_path).stdout for _ in range(2)] == [False, False]


def test_a_warm_command_past_its_deadline_is_killed_and_the_next_one_runs(tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        gnnbridge("train", "--nproc", "1", "--out", "run", cwd=tmp_path, timeout=0.5)
    # Both warm interpreters (they take turns) serve the commands after it.
    assert [gnnbridge("backends", cwd=tmp_path).returncode for _ in range(2)] == [0, 0]


@pytest.mark.slow  # a new warm interpreter, or two training runs: left to make test
def test_a_package_installed_since_the_start_gets_a_new_warm_interpreter(tmp_path, monkeypatch):
    """An editable install's ``.pth`` hook is read at a start only: after a ``pip install`` (the
    site-packages folder changed) the next command runs in a warm interpreter started since."""
    import warm

    gnnbridge("backends", cwd=tmp_path)
    gnnbridge("backends", cwd=tmp_path)
    before = {w.proc.pid for w in warm._POOL}
    monkeypatch.setattr(warm, "_installed_stamp", lambda: ("installed since",))
    # Both warm interpreters (they take turns) serve the commands after it.
    assert [gnnbridge("backends", cwd=tmp_path).returncode for _ in range(2)] == [0, 0]
    assert {w.proc.pid for w in warm._POOL} - before  # the one this command used is new


@pytest.mark.slow  # a new warm interpreter, or two training runs: left to make test
def test_started_commands_run_side_by_side_and_are_driven_as_popen_drives_a_process(tmp_path):
    """What the suite's background jobs rely on (tests/distributed/test_launch_modes.py): the
    command's own pid and process group, a wait with a deadline, a signal, two at once."""
    import os
    import signal
    import time

    long = ("train", "--dataset", "karate", "--set", "train.epochs=100000", "--quiet")
    first = start(*long, "--out", "first", cwd=tmp_path, new_session=True)
    second = start(*long, "--out", "second", cwd=tmp_path)  # served while the first still runs
    assert os.getpgid(first.pid) == first.pid and os.getpgid(second.pid) != second.pid
    deadline = time.monotonic() + 240
    while not all((tmp_path / run / "checkpoints" / "latest.pt").exists() for run in ("first", "second")):
        assert time.monotonic() < deadline and first.poll() is None and second.poll() is None
        time.sleep(0.05)
    with pytest.raises(subprocess.TimeoutExpired):
        first.wait(timeout=0.1)
    os.killpg(first.pid, signal.SIGTERM)
    second.send_signal(signal.SIGINT)
    (_, first_err), (_, second_err) = first.communicate(timeout=120), second.communicate(timeout=120)
    assert (first.wait(timeout=60), second.wait(timeout=60)) == (143, 130)
    last = [err.strip().splitlines()[-1] for err in (first_err, second_err)]
    assert last[0].startswith("Stopped by SIGTERM") and last[1].startswith("Stopped by SIGINT (Ctrl-C)"), last
