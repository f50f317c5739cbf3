"""``gnnbridge tune --parallel K``: K trials at once on one machine, each on devices of its own.

The smallest sound mechanism: K worker processes, each the loop a single ``tune`` runs (finish
the trials it took over, then ask the study for trials until it holds ``--trials``), all on the
one study storage that ``tune`` just created and checked. Several commands could already share a
study; ``--parallel`` only starts them, gives each its own devices and stops them together.

* A worker is a fresh interpreter (``subprocess``, not a fork: the parent has imported torch and
  Optuna and may hold a CUDA context), in a session of its own, so a Ctrl-C in the terminal
  reaches only the parent, which passes one SIGTERM to each worker: each stops its trial the way
  a single ``tune`` does (every rank stops, the trial is marked interrupted and the next ``tune``
  of the study finishes it from its checkpoint), and the parent waits for all of them.
* Devices: on CUDA, worker ``k`` sees GPUs ``[k*nproc, (k+1)*nproc)`` of the visible ones
  (``CUDA_VISIBLE_DEVICES``), refused up front if ``K*nproc`` exceeds them. On CPU the workers
  run side by side: a one-rank trial rendezvouses in its own process (a ``HashStore``), a trial
  of several ranks on a free port the elastic agent picks (``127.0.0.1:0``), so no two collide.
* Worker ``k`` samples with seed ``--seed + k``: the same seed would make the workers' first
  (random) trials the same settings.
* The total: each worker counts the trials the study holds before it asks for one, so when two
  ask at once the study may end with up to ``K - 1`` trials more than ``--trials``.
* Interrupted trials found at the start are dealt out to the workers, one worker per trial.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

from gnnbridge.core.config import DeviceChoice, ExperimentConfig
from gnnbridge.core.errors import ConfigError, GnnBridgeError, RunInterrupted, signal_name

STOP_WAIT_S = 120.0  # how long a stopped worker may take to stop its ranks and record its trial
# A worker runs tune's own loop (``tune.worker_main``), named here as text: this module is what
# ``tune`` imports to start workers, and must not import ``tune`` back.
WORKER = "import sys; from gnnbridge.core.app.tune import worker_main; worker_main(sys.argv[1])"


def device_sets(parallel: int, base: ExperimentConfig) -> list[str] | None:
    """Each worker's ``CUDA_VISIBLE_DEVICES`` (on CUDA), or ``None`` (on CPU: no split)."""
    import torch

    cuda = base.device is DeviceChoice.CUDA or (base.device is DeviceChoice.AUTO and torch.cuda.is_available())
    if not cuda:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = [d.strip() for d in visible.split(",") if d.strip()] if visible else []
    if not visible:
        devices = [str(i) for i in range(torch.cuda.device_count())]
    need = parallel * base.nproc
    if need > len(devices):
        raise ConfigError(
            f"--parallel {parallel} with --nproc {base.nproc} needs {need} GPUs of its own, but this machine shows "
            f"{len(devices)}; lower --parallel or --nproc (or use --device cpu)."
        )
    return [",".join(devices[k * base.nproc : (k + 1) * base.nproc]) for k in range(parallel)]


def _experiment(experiment: Any) -> Any:
    """The experiment as JSON can carry it to a worker: a name or path, a dict, or None."""
    if isinstance(experiment, ExperimentConfig):
        return experiment.to_dict()
    if experiment is None or isinstance(experiment, (str, dict)):
        return experiment
    return os.fspath(experiment)


def parallel_search(experiment, record: dict, out, trials: int, parallel: int, base, taken: list[int],
                    progress: bool, say) -> None:  # fmt: skip
    """Start the K workers, wait for them; a stop signal stops them all (see the module)."""
    from gnnbridge.core.runtime.launcher import interrupt_on_sigterm

    sets = device_sets(parallel, base)
    procs: list[subprocess.Popen] = []
    say(f"--parallel {parallel}: {parallel} workers" + (f" on GPUs {' | '.join(sets)}" if sets else " on CPU"))
    with interrupt_on_sigterm():
        try:
            for k in range(parallel):
                spec = {**record, "experiment": _experiment(experiment), "out": str(out), "trials": trials,
                        "worker": k, "seed": record["seed"] + k, "taken": taken[k::parallel],
                        "progress": progress}  # fmt: skip
                env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": sets[k]} if sets else {})}
                procs.append(
                    subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(spec)], env=env, start_new_session=True)
                )
            codes = [proc.wait() for proc in procs]
        except KeyboardInterrupt as exc:
            signum = getattr(exc, "signum", signal.SIGINT)
            _stop(procs)
            raise RunInterrupted(
                signum,
                f"Stopped by {signal_name(signum)}: the {len(procs)} workers stopped, their trials in flight "
                "recorded as interrupted; run the same command again to finish them and go on.",
            ) from None
    failed = [f"worker {k} (exit code {code})" for k, code in enumerate(codes) if code != 0]
    if failed:
        raise GnnBridgeError(f"tune --parallel: {', '.join(failed)} stopped early; its line is above.")


def _stop(procs: list[subprocess.Popen]) -> None:
    """One SIGTERM to each running worker (each stops its trial and records it), then wait; a
    worker still running after :data:`STOP_WAIT_S` is killed (its trial is taken over later)."""
    for proc in procs:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
