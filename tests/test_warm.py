"""The suite's warm interpreters (:mod:`warm`) answer a command as a fresh interpreter does: the
same exit code and output, a deadline that kills, and a second command served after a killed one.
Most of the suite's commands run there, so a difference here would be a difference everywhere."""

from __future__ import annotations

import subprocess

import pytest
from helpers import gnnbridge


@pytest.mark.parametrize(
    "args",
    [
        ("train", "--backend", "nope"),
        ("train", "--set", "train.epochs=0"),
        ("models", "--json"),
        ("config", "show"),
    ],
    ids=["unknown-backend", "refused-value", "models", "config"],
)
def test_a_warm_fork_answers_as_a_fresh_interpreter(tmp_path, args):
    warm = gnnbridge(*args, cwd=tmp_path)
    fresh = gnnbridge(*args, cwd=tmp_path, fresh=True)
    assert (warm.returncode, warm.stdout, warm.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_a_warm_command_past_its_deadline_is_killed_and_the_next_one_runs(tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        gnnbridge("train", "--nproc", "1", "--out", "run", cwd=tmp_path, timeout=0.5)
    assert gnnbridge("models", "--json", cwd=tmp_path).returncode == 0
