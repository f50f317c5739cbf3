"""What many test files share: running the CLI in a subprocess as a user does, and checking
that a refusal is exactly one line. (``tests/`` is on ``sys.path``: pytest puts the folder of the
root ``conftest.py`` there, so any test file imports this as ``helpers``.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# One thread per process: the ranks of a test job share two cores with the other xdist worker.
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
FRESH = os.environ.get("GNNBRIDGE_TESTS_FRESH") == "1"


class SuiteEnv(dict):
    """The suite's environment plus knobs that only run-time code reads (a hook's, srun's, a
    launcher's), and a ``sitecustomize`` hook that every Python process of a command runs first
    (``hook``: its folder, first on ``PYTHONPATH``), or none. A warm interpreter runs a command
    in such an environment as a fresh one would (:mod:`warm`)."""

    hook: str | None = None


# What an import reads, so a warm interpreter (imported with the suite's own) cannot honour it.
_READ_AT_IMPORT = ("PYTHON", "OMP_", "MKL_", "NUMBA_", "TMP", "LD_")


def suite_env(path: tuple = (), **knobs: str) -> SuiteEnv:
    """The suite's environment with ``knobs`` that only run-time code reads (SLURM's, MASTER_*),
    and ``path``: folders put first on ``PYTHONPATH`` (a package installed into one of them)."""
    imported = [name for name in knobs if name.startswith(_READ_AT_IMPORT)]
    assert not imported, f"{imported} are read at import: pass a plain dict (a fresh interpreter)"
    env = SuiteEnv({**ENV, **knobs})
    if path:
        env["PYTHONPATH"] = os.pathsep.join([*map(str, path), os.environ.get("PYTHONPATH", "")])
    return env


def hooked_env(tmp_path: Path, code: str, **knobs: str) -> SuiteEnv:
    """An environment whose Python processes (the launcher and every rank) all run ``code``
    first. A warm interpreter runs such a command too (:mod:`warm`): its fork imports the hook as
    a fresh interpreter does at its start, but after gnnbridge's modules, so a hook patches what
    is looked up when called (a class's method, a module's attribute), as every hook here does."""
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(code)
    env = suite_env(path=(hook,), **knobs)
    env.hook = str(hook)
    return env


def _warm(env, fresh: bool) -> bool:
    return (env is ENV or isinstance(env, SuiteEnv)) and not fresh and not FRESH


def gnnbridge(*args, cwd, env=ENV, timeout=300, fresh=False) -> subprocess.CompletedProcess:
    """``python -m gnnbridge ARGS`` in ``cwd``, its output captured: in a fork of a warm
    interpreter (:mod:`warm`, which says what a fork keeps of a fresh process) unless ``fresh``,
    ``env`` is neither the suite's own nor a :class:`SuiteEnv`, or ``GNNBRIDGE_TESTS_FRESH=1``."""
    if _warm(env, fresh):
        import warm

        return warm.run(args, cwd=cwd, env=env, timeout=timeout, hook=getattr(env, "hook", None), start_env=ENV)
    return subprocess.run(
        [sys.executable, "-m", "gnnbridge", *args],
        check=False,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def start(*args, cwd, env=ENV, new_session=False, fresh=False):
    """``python -m gnnbridge ARGS`` started in the background, as :func:`gnnbridge` runs it
    (warm or fresh, by the same rule), driven as a ``subprocess.Popen(stdout=PIPE,
    stderr=PIPE, text=True, start_new_session=new_session)`` is."""
    if _warm(env, fresh):
        import warm

        hook = getattr(env, "hook", None)
        return warm.start(args, cwd=cwd, env=env, hook=hook, start_env=ENV, new_session=new_session)
    return subprocess.Popen(
        [sys.executable, "-m", "gnnbridge", *map(str, args)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
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


def refused_prepare(tmp_path: Path, arrays: dict, needle: str) -> None:
    """``gnnbridge prepare`` of ``arrays`` saved as an ``.npz`` is refused in one line holding
    ``needle``, and no folder is left."""
    import numpy as np

    np.savez(tmp_path / "bad.npz", **arrays)
    one_line(gnnbridge("prepare", str(tmp_path / "bad.npz"), "--quiet", cwd=tmp_path), needle)
    assert not (tmp_path / "bad").exists()


def refused_npz(tmp_path: Path, arrays: dict, needle: str, *settings: str) -> None:
    """Training on ``arrays`` saved as an ``.npz`` (with ``--set`` ``settings``) is refused in one
    line holding ``needle``, and no run folder is left."""
    import numpy as np

    np.savez(tmp_path / "bad.npz", **arrays)
    overrides = [arg for setting in settings for arg in ("--set", setting)]
    proc = gnnbridge("train", "--dataset", str(tmp_path / "bad.npz"), *overrides, "--out", str(tmp_path / "run"),
                     cwd=tmp_path)  # fmt: skip
    one_line(proc, needle)
    assert not (tmp_path / "run").exists()


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


def pip_install_target(source: Path, copy_to: Path, target: Path) -> Path:
    """Install the package at ``source`` with pip as a user would (offline, no build isolation)
    into ``target``, a folder of its own for ``PYTHONPATH``, not the suite's environment: the
    suite's other workers run commands all the while, and each would load a package half
    installed or half removed. Built from a copy (``copy_to``), so no build output lands in the
    checkout; returns the copy."""
    shutil.copytree(source, copy_to, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    args = ("install", "-q", "--no-build-isolation", "--no-deps", "--no-index", "--target", str(target), str(copy_to))
    proc = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return copy_to


def dgl_pairs(items: list):
    """A DGL user's own graph dataset of ``(graph, label)`` pairs: a ``dgl.data.DGLDataset``, as
    DGL's GIN tutorial reads one (DGL is imported here, on first use only)."""
    from gnnbridge.backends.dgl.compat import import_dgl

    dgl = import_dgl()

    class Pairs(dgl.data.DGLDataset):
        def __init__(self, items):
            self.items = items
            super().__init__(name="pairs")

        def process(self):
            pass

        def __getitem__(self, i):
            return self.items[i]

        def __len__(self):
            return len(self.items)

    return Pairs(items)


def job(
    k: int, tmp_path: Path, command: list[str], env=None, launcher=("--nproc-per-node", "1")
) -> tuple[list[int], list[tuple]]:
    """``gnnbridge COMMAND`` as a job of ``k`` torchrun machines (of one rank unless ``launcher``
    says otherwise), machine M in ``tmp_path/machineM``; their exit codes and (stdout, stderr)."""
    from gnnbridge.testing.ports import free_port

    port = free_port()
    env = {**(env or os.environ), "OMP_NUM_THREADS": "1"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(k)]
    torchrun += ["--master-addr", "127.0.0.1", "--master-port", str(port), *launcher]
    procs = [
        subprocess.Popen(
            [*torchrun, "--node-rank", str(m), "-m", "gnnbridge", *command],
            cwd=tmp_path / f"machine{m}",
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for m in reversed(range(k))
    ]
    try:
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            p.kill()
    return [p.returncode for p in reversed(procs)], list(reversed(outs))
