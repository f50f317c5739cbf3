"""The suite's warm interpreters (:mod:`warm`) answer a command as a fresh interpreter does: the
same exit code and output, a deadline that kills, and a second command served after a killed one.
Most of the suite's commands run there, so a difference here would be a difference everywhere."""

from __future__ import annotations

import subprocess

import pytest
from helpers import gnnbridge, hooked_env


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
