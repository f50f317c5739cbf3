"""Shared fixtures. Tests run on CPU; multi-process tests use gloo with 2 ranks.

The suite must pass however it is started (a terminal, a background job, CI, inside a SLURM
allocation), so this module first gives the test process, and through it every process a test
starts, a clean slate: default signal dispositions, none of the launcher's or gnnbridge's
environment variables, and a private shared-memory folder.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import tempfile

import pytest
import torch

# Variables a user, CI or a cluster may have set that change what gnnbridge does: a job's
# identity (torchrun, srun), thread and device choices, gnnbridge's own switches. Tests that need
# one set it themselves, in the environment they give their child process or by monkeypatch.
INHERITED = re.compile(
    r"^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|GROUP_WORLD_SIZE|ROLE_RANK|"
    r"ROLE_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_.*|SLURM_.*|OMP_NUM_THREADS|"
    r"MKL_NUM_THREADS|NUMBA_.*|CUDA_VISIBLE_DEVICES|GNNBRIDGE_(?!CACHE$|TESTS_FRESH$).*)$"
)


def default_signal_dispositions() -> None:
    """SIGINT and SIGTERM as a terminal gives them, in this process and so in its children.

    A shell that starts a job in the background sets SIGINT to "ignored" and children inherit
    that (Python then rightly ignores Ctrl-C): a test that sends SIGINT to a CLI run would wait
    for a run that never stops. ``subprocess``'s ``restore_signals`` does not cover SIGINT, and a
    ``preexec_fn`` is unsafe beside the reader threads some tests run, so the dispositions are
    reset here, once: a caught or default signal is SIG_DFL in an exec'd child (an ignored one
    would stay ignored), and the mask, which children also inherit, lets both through.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def clean_environment() -> str:
    """Drop the inherited variables (see ``INHERITED``) and give ranks a shared-memory folder
    of this process's own (RAM-backed where /dev/shm is), so a test that kills a rank leaves
    nothing in the machine's /dev/shm and no other run's files are counted as a test's."""
    for name in [n for n in os.environ if INHERITED.match(n)]:
        del os.environ[name]
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    private = tempfile.mkdtemp(prefix="pytest-gnnbridge-shm-", dir=base)
    os.environ["GNNBRIDGE_SHM_DIR"] = private
    return private


def pytest_unconfigure(config):
    """Remove the private shared-memory folder, with whatever a killed rank left in it."""
    shutil.rmtree(SHM_DIR, ignore_errors=True)


def pytest_configure(config):
    """Before xdist's workers start (here in its controller, or in a serial run's one process),
    numba compiles the sampler's kernels into its on-disk cache if they are not there: on a fresh
    clone each worker's first runs, and every rank of them, compiled the same kernels at once
    (about 14 CPU-s each) until one had written the cache. Loading them cached: about 1 s.
    The controller also starts the warm interpreters its workers share (``tests/warm.py``)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        from gnnbridge.core.sampling import kernels

        kernels.warm()
        if config.getoption("numprocesses", None) and os.environ.get("GNNBRIDGE_TESTS_FRESH") != "1":
            import warm  # xdist's controller: the warm interpreters its workers share
            from helpers import ENV

            warm.share(ENV)
    elif SHARED_WARM:
        import warm

        warm.use_shared(SHARED_WARM)


def cache_bytecode() -> None:
    """Every CLI run a test starts is a fresh interpreter that imports gnnbridge's modules; where
    ``PYTHONDONTWRITEBYTECODE`` is set (some machines and containers set it), each process
    compiled all of them from source again, about 0.8 s of CPU each time. The suite's processes
    cache bytecode (in ``__pycache__`` folders, which git ignores)."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


default_signal_dispositions()
cache_bytecode()
SHARED_WARM = os.environ.pop("GNNBRIDGE_TESTS_WARM", None)  # set by the controller (pytest_configure)
SHM_DIR = clean_environment()
os.environ.setdefault("GNNBRIDGE_CACHE", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "gnnbridge"))
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _in_a_folder_of_its_own(tmp_path, monkeypatch):
    """Every test runs in its own empty folder: what a test, or a CLI run it starts without
    ``--out`` or ``cwd``, writes lands there, never in the repository or the caller's folder."""
    monkeypatch.chdir(tmp_path)


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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Tests that share a module-scoped fixture (a trained run, a built dataset, an installed
    plugin) go to one xdist worker together, so it is built once (``make test`` runs
    ``--dist loadgroup``); every other test is handed out on its own. Whole files used to go to
    one worker each (``--dist loadfile``), so a file of slow multi-process tests, or of tests
    that wait out a timeout, ran one after another on one worker while the other sat idle."""
    for item in items:
        defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        shared = sorted(name for name, fds in defs.items() if fds and fds[-1].scope in ("module", "package"))
        if shared and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(f"{item.module.__name__}:{shared[0]}"))
