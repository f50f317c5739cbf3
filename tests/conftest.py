"""Shared fixtures. Tests run on CPU; multi-process tests use gloo with 2 ranks."""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("GNNBRIDGE_CACHE", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "gnnbridge"))
torch.set_num_threads(1)


@pytest.fixture
def small_data():
    from gnnbridge.testing.conformance import small_graph

    return small_graph()


@pytest.fixture
def refused(capsys, monkeypatch, tmp_path):
    """Run the CLI in this process for input it must refuse before any work (fast: no fresh
    interpreter); returns what a user sees, as a ``CompletedProcess``, from ``tmp_path``.
    End-to-end subprocess runs are in the other tests."""
    import subprocess

    from gnnbridge.cli import main

    monkeypatch.chdir(tmp_path)

    def run(*args):
        with pytest.raises(SystemExit) as exited:
            main(list(args))
        seen = capsys.readouterr()
        return subprocess.CompletedProcess(args, exited.value.code, seen.out, seen.err)

    return run
