"""What many test files share: running the CLI in a subprocess as a user does, and checking
that a refusal is exactly one line. (``tests/`` is on ``sys.path``: pytest puts the folder of the
root ``conftest.py`` there, so any test file imports this as ``helpers``.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# One thread per process: the ranks of a test job share two cores with the other xdist worker.
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
FRESH = os.environ.get("GNNBRIDGE_TESTS_FRESH") == "1"


class HookedEnv(dict):
    """The suite's environment, a ``sitecustomize`` hook that every Python process of a command
    runs first (``hook``: its folder, first on ``PYTHONPATH``) and knobs only the hook reads."""

    hook: str


def hooked_env(tmp_path: Path, code: str, **knobs: str) -> HookedEnv:
    """An environment whose Python processes (the launcher and every rank) all run ``code``
    first. A warm interpreter runs such a command too (:mod:`warm`): its fork imports the hook as
    a fresh interpreter does at its start, but after gnnbridge's modules, so a hook patches what
    is looked up when called (a class's method, a module's attribute), as every hook here does."""
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(code)
    env = HookedEnv({**ENV, "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]), **knobs})
    env.hook = str(hook)
    return env


def gnnbridge(*args, cwd, env=ENV, timeout=300, fresh=False) -> subprocess.CompletedProcess:
    """``python -m gnnbridge ARGS`` in ``cwd``, its output captured: in a fork of a warm
    interpreter (:mod:`warm`, which says what a fork keeps of a fresh process) unless ``fresh``,
    ``env`` is neither the suite's own nor a :func:`hooked_env`, or ``GNNBRIDGE_TESTS_FRESH=1``."""
    hooked = isinstance(env, HookedEnv)
    if (env is ENV or hooked) and not fresh and not FRESH:
        import warm

        return warm.run(args, cwd=cwd, env=env, timeout=timeout, hook=env.hook if hooked else None, start_env=ENV)
    return subprocess.run(
        [sys.executable, "-m", "gnnbridge", *args],
        check=False,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stderr
    return proc


def one_line(proc: subprocess.CompletedProcess, needle: str) -> None:
    """A refusal as a user must see it: a non-zero exit and one stderr line holding ``needle``."""
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert needle in lines[0], lines[0]


def in_process(*args, cwd) -> subprocess.CompletedProcess:
    """``gnnbridge ARGS`` run by this process (:func:`gnnbridge.cli.main`, in ``cwd``), its exit
    code and output returned as :func:`gnnbridge` returns a subprocess's.

    For commands that start no ranks of their own (``evaluate``, ``predict``, a one-rank
    ``train``) in tests of what the command computes, not of the process: a fresh interpreter
    spends about 6 s of CPU importing torch and the backend before it does anything, which this
    test process has done already. What only a process shows (output written below Python, exit
    by a signal, a hooked environment, a rank's own start) stays with :func:`gnnbridge`."""
    import contextlib
    import io

    from gnnbridge.cli import main

    out, err = io.StringIO(), io.StringIO()
    before = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main([str(arg) for arg in args])
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        os.chdir(before)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())
