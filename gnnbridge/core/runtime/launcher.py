"""Starting the ranks of a run: in this process, through torch's elastic agent, or as one rank of
a job someone else started.

* ``nproc == 1`` without restarts: the worker runs in the calling process with a one-rank gloo
  group, so tracebacks, debuggers and profilers stay simple.
* ``--nproc N`` (or any ``--max-restarts``): ``torch.distributed.launcher.api.elastic_launch``,
  the agent behind ``torchrun``, starts and supervises N local ranks. It gives us the
  rendezvous on a free port (c10d, as ``torchrun --standalone``), the spawn start method (safe
  with CUDA), stopping every rank on the first failure, and restarting all of them up to
  ``max_restarts`` times. Each rank sees torchrun's variables and takes the job path below.
* inside torchrun or an ``srun`` step (``job``): this process *is* one rank; nobody spawns.

What is ours on top of the agent, and why: the agent reports a failure as one local rank's exit
code or signal ("exitcode 1", "Signal 9 received by PID ..."), logs a traceback for it, and its
choice of "first" failure is whichever process it polled first. :func:`_root_cause` turns that
into the job's one line: a rank killed by a signal is named by rank, pid and signal (nobody knows
it better than the agent that reaped it); otherwise the line the failing rank posted to the job's
store and wrote into its torchelastic error file (see :mod:`~gnnbridge.core.runtime.rank`). The
agent's own loggers are silenced while it runs, so that line is the only one.
"""
from __future__ import annotations

import contextlib
import datetime
import logging
import math
import os
import signal
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import torch.distributed as dist

from gnnbridge.core.contracts.config import DEFAULT_TIMEOUT_S
from gnnbridge.core.errors import ConfigError, RankFailedError
from gnnbridge.core.runtime.context import DistContext, resolve_device
from gnnbridge.core.runtime.jobs import JobEnv, detect_job
from gnnbridge.core.runtime.rank import RankSpec, rank_main

AGENT_LOGGERS = ("torch.distributed.elastic", "torch.distributed.launcher", "torch.multiprocessing")
MONITOR_INTERVAL_S = 0.1  # how often the agent polls its ranks: a dead rank is seen at once
SIGNALS_VAR = "TORCHELASTIC_SIGNALS_TO_HANDLE"  # set by the agent in the launching process


def launch(worker: Callable[..., Any], nproc: int, device_kind: str, args: tuple,
           timeout_s: float = DEFAULT_TIMEOUT_S, job: JobEnv | None = None, max_restarts: int = 0) -> Any:
    """Run ``worker(ctx, *args)`` on every rank and return rank 0's result (``None`` on the other
    ranks of a job).

    A failure that ends the run raises :class:`RankFailedError` with one line naming the rank
    that failed first and why. With ``max_restarts`` the agent first restarts every rank that
    many times; the worker learns it is a restart from ``ctx.attempt``.
    """
    if job is not None:
        if dist.is_initialized():
            raise ConfigError("A default process group already exists in this process; gnnbridge joins the "
                              f"{job.launcher} job itself: run it before (or instead of) init_process_group.")
        return rank_main(RankSpec.from_job(job), device_kind, worker, args, timeout_s)
    if nproc == 1 and max_restarts == 0:
        return _run_single(worker, device_kind, args, timeout_s)
    return _run_elastic(worker, nproc, device_kind, args, timeout_s, max_restarts)


def _run_single(worker: Callable[..., Any], device_kind: str, args: tuple, timeout_s: float) -> Any:
    owns_group = not dist.is_initialized()
    if owns_group:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=timeout_s))
    try:
        return worker(DistContext(0, 1, 0, resolve_device(device_kind, 0)), *args)
    finally:
        if owns_group:
            dist.destroy_process_group()


def _run_elastic(worker: Callable[..., Any], nproc: int, device_kind: str, args: tuple, timeout_s: float,
                 max_restarts: int) -> Any:
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    with tempfile.TemporaryDirectory(prefix="gnnbridge-elastic-") as log_dir, _agent_quiet(), _agent_leaves_no_trace():
        config = LaunchConfig(
            min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=uuid.uuid4().hex, role="gnnbridge",
            rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", rdzv_configs={"join_timeout": math.ceil(timeout_s)},
            local_addr="127.0.0.1",  # not the host's FQDN, which need not resolve on a laptop or in a container
            max_restarts=max_restarts, monitor_interval=MONITOR_INTERVAL_S, start_method="spawn",
            logs_specs=DefaultLogsSpecs(log_dir=log_dir),  # error files only; output stays on our console
        )
        try:
            results = elastic_launch(config, _elastic_rank)(worker, device_kind, args, timeout_s)
        except ChildFailedError as exc:
            raise RankFailedError(_root_cause(exc.failures)) from None
        except SignalException as exc:
            if exc.sigval == signal.SIGINT:  # Ctrl-C: the agent stopped the ranks; the caller sees what it pressed
                raise KeyboardInterrupt from None
            name = signal.Signals(exc.sigval).name
            raise RankFailedError(f"gnnbridge was stopped by {name}; all ranks were stopped.") from None
    return results.get(0)


def _elastic_rank(worker: Callable[..., Any], device_kind: str, args: tuple, timeout_s: float) -> Any:
    """A rank started by the elastic agent: torchrun's environment, but the launcher (not each
    node's first rank) prints the failure, so ranks leave silently."""
    spec = RankSpec.from_job(detect_job(), announce=False)
    try:
        return rank_main(spec, device_kind, worker, args, timeout_s)
    except BaseException:  # noqa: BLE001 - the launcher reports the job's first failure; no traceback here
        sys.exit(1)


def _root_cause(failures: dict) -> str:
    """One line for the job's failure from the agent's ``{global rank: ProcessFailure}`` (for a
    function entrypoint it holds the one rank it found dead first): the line that rank posted,
    else its signal or exit code."""
    rank, failure = min(failures.items(), key=lambda item: item[1].timestamp)
    posted = _posted_line(failure)
    if posted:
        return posted
    if failure.exitcode < 0:
        return f"rank {rank} (pid {failure.pid}) was killed by {failure.signal_name()}"
    return f"rank {rank} (pid {failure.pid}) exited with code {failure.exitcode}"


def _posted_line(failure) -> str | None:
    """The line a gnnbridge rank wrote into its torchelastic error file (``record_for_launcher``)."""
    return failure.message.get("message") if isinstance(failure.message, dict) else None


@contextlib.contextmanager
def _agent_leaves_no_trace() -> Iterator[None]:
    """The agent installs signal handlers (Ctrl-C then raises its ``SignalException``) and sets an
    environment variable in the launching process, and keeps both: a library call must not."""
    names = [s for s in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT") if hasattr(signal, s)]
    main = threading.current_thread() is threading.main_thread()
    handlers = {name: signal.getsignal(getattr(signal, name)) for name in names} if main else {}
    env = os.environ.get(SIGNALS_VAR)
    try:
        yield
    finally:
        for name, handler in handlers.items():
            if handler is not None:  # None: installed outside Python, and left as it was
                signal.signal(getattr(signal, name), handler)
        if env is None:
            os.environ.pop(SIGNALS_VAR, None)
        else:
            os.environ[SIGNALS_VAR] = env


@contextlib.contextmanager
def _agent_quiet() -> Iterator[None]:
    """Silence the elastic agent's loggers: each sets its own level, so the parents' do not help."""
    import torch.distributed.elastic.rendezvous.c10d_rendezvous_backend  # noqa: F401 - their loggers exist now
    import torch.distributed.elastic.rendezvous.dynamic_rendezvous  # noqa: F401

    loggers = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)
               if name.startswith(AGENT_LOGGERS)]
    before = [lg.disabled for lg in loggers]
    for lg in loggers:
        lg.disabled = True
    try:
        yield
    finally:
        for lg, was in zip(loggers, before):
            lg.disabled = was
