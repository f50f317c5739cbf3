"""One training run from start to finish: the code behind ``gnnbridge train`` and ``gnnbridge.run``.

resolve (``app.resolve``) -> preflight and data checks (``app.preflight``) -> run folder
(``app.rundir``) -> launch the ranks (``runtime.launcher``) -> per rank: continue after a restart
(``app.plan``), train (``training``) -> results (``app.results``).

Order matters for the "bad input writes nothing" contract: everything is checked, and the
dataset loaded and validated, *before* the run folder is created. Inside a torchrun or SLURM job
each process is one rank and runs this same code: the config checks happen on every rank before
the rendezvous (same answer everywhere, so no rank waits for one that gave up); the output
folder check, the dataset (loaded once per node, ``runtime.sharing``) and the run folder (rank
0's) come after it, where a failure on one rank stops all of them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from gnnbridge.core import files
from gnnbridge.core.app import results
from gnnbridge.core.app.objects import as_dataset, as_model
from gnnbridge.core.app.plan import Plan, plan_resume
from gnnbridge.core.app.preflight import check_before_start, load_dataset, preflight
from gnnbridge.core.app.resolve import resolve_config
from gnnbridge.core.app.rundir import discard, explain_stop
from gnnbridge.core.config import ExperimentConfig
from gnnbridge.core.errors import ConfigError, GnnBridgeError
from gnnbridge.core.plugins import backends
from gnnbridge.core.records.data import LabelledRecord
from gnnbridge.core.runtime.context import DistContext
from gnnbridge.core.runtime.jobs import JobEnv, detect_job
from gnnbridge.core.runtime.launcher import (
    interrupt_on_sigterm,
    launch,
    refuse_unguarded_script,
    refuse_unguarded_start,
    server_forked_from_here,
)
from gnnbridge.core.runtime.sharing import machine_shared
from gnnbridge.core.training.trainer import RANK_MODULES, Trainer


def run(
    experiment: str | os.PathLike | dict | ExperimentConfig | None = None,
    *,
    backend: str | None = None,
    nproc: int | None = None,
    device: str | None = None,
    dataset: str | os.PathLike | Any | None = None,
    model: Any = None,
    overrides: list[str] | tuple[str, ...] = (),
    out: str | os.PathLike | None = None,
    progress: bool = True,
    timeout: float | None = None,
    resume: str | os.PathLike | None = None,
    max_restarts: int | None = None,
    target: str | None = None,
    on_epoch: Any = None,
) -> dict | None:
    """Train an experiment and return its results (the content of ``results.json``).

    Inside a torchrun or SLURM job this process is one rank of it: rank 0 writes the run folder
    and returns the results, every other rank returns ``None``.

    :param experiment: a YAML path, a built-in experiment name, a config dict or an
        :class:`ExperimentConfig`; ``None`` runs the default experiment.
    :param backend: the library to train with (``pyg``, ``dgl``, or one a plugin adds); default
        the config's.
    :param nproc: ranks on this machine (``--nproc``); default the config's.
    :param device: ``cpu``, ``cuda`` or ``auto``; default the config's.
    :param dataset: a dataset name, a ``.npz`` path, a prepared folder, ``pyg:CLASS`` /
        ``dgl:CLASS``, or a graph held in memory (a PyG ``Data`` / ``HeteroData`` / dataset, a
        ``DGLGraph`` / ``DGLDataset``: see :mod:`.objects`).
    :param model: a ``torch.nn.Module`` you built, in PyG's idiom (``forward(x, edge_index)``) or
        DGL's (``forward(g, x)``, ``forward(blocks, x)``); it trains on that library (see
        :mod:`gnnbridge.core.models.instance`). A name or import path goes in ``overrides``
        (``model.arch=...``).
    :param overrides: ``KEY=VALUE`` strings, as ``--set`` takes them (``train.epochs=5``).
    :param out: the run folder to create (must not exist, or be empty); default
        ``runs/<experiment>-<backend>-<time>``.
    :param progress: show the progress bar and per-epoch lines on rank 0.
    :param timeout: seconds any rank may wait on its peers before the job stops (default the
        config's ``timeout``).
    :param resume: a run folder to continue from its latest checkpoint, in place, instead of a new
        run (``overrides`` may extend ``train.epochs`` or change other training keys, never the
        model or the data).
    :param max_restarts: when a rank fails, restart every rank up to this many times; each restart
        continues the run from its latest checkpoint.
    :param target: what each node, edge or graph is predicted as: ``class`` (one class, the default),
        ``multilabel`` (0/1 labels, NaN where missing) or ``regression`` (values), or a plugin's
        target; the same as ``overrides=["target=..."]``.
    :param on_epoch: a picklable callable, called on rank 0 with each epoch's figures (a dict:
        ``epoch``, ``loss``, the monitor ...); when it returns a reason (a non-empty string) every
        rank stops after that epoch, its checkpoint written, and ``results.json``'s ``stopped_by``
        says ``{"epoch", "reason"}`` (how ``gnnbridge tune`` prunes a trial).
    :returns: ``results.json``'s content (its keys: :doc:`/outputs`): ``metrics`` (every split's,
        of the checkpoint later commands use by default: ``best.pt``; ``metrics_from`` names it),
        ``last`` (the last epoch's metrics), ``best`` (the best epoch and its metrics), ``history`` (one
        entry per epoch: loss, metrics, times), ``run_dir`` (the run folder), and what the
        run was (``experiment``, ``backend``, ``task``, ``world_size``, ``device``, ``dataset``,
        ``versions``, ``ranks``, ...). ``None`` on a job's ranks other than 0.
    """
    refuse_unguarded_start()
    flags = {"backend": backend, "nproc": nproc, "device": device, "timeout": timeout, "max_restarts": max_restarts}
    _check_paths(out=out, resume=resume)
    if target is not None:
        overrides = [f"target={target}", *overrides]
    dataset = as_dataset(dataset, experiment, overrides)  # with --resume there is none (refused)
    if model is not None:
        arch, flags["backend"] = as_model(model, backend)
        overrides = [*overrides, f"model.arch={arch}"]
    job = detect_job()
    if resume is not None:  # a restarted attempt of a resumed job checks nothing again (see Plan.after_restart)
        plan = plan_resume(resume, experiment, dataset, out, overrides, flags, check_epochs=not (job and job.attempt))
    else:
        plan = Plan(resolve_config(experiment, overrides=overrides, dataset=dataset, **flags), out)
    plan.on_epoch = on_epoch
    if job is not None:
        return _run_job_rank(job, plan, flags, progress)
    if plan.config.nproc > 1 or plan.config.max_restarts:
        refuse_unguarded_script()
    with interrupt_on_sigterm():
        return _run_local(plan, progress)


def _run_local(plan: Plan, progress: bool) -> dict:
    """This process launches the ranks and owns the run folder."""
    plan.check_out()  # cheap, so before the data loads
    config = plan.config
    rank_modules = (*backends.get(config.backend).rank_modules(), *RANK_MODULES)
    with server_forked_from_here(config.nproc, config.max_restarts, config.device.value, rank_modules):
        return _check_and_launch(plan, progress, rank_modules)


def _check_and_launch(plan: Plan, progress: bool, rank_modules: tuple[str, ...]) -> dict:
    plan.config, data = check_before_start(plan.config, plan.folder())
    plan.check_same_data(data)
    run_dir, created = plan.make_run_dir()
    try:
        plan.write_config(run_dir)
        data.share_memory_()
        config = plan.config
        launch(
            _local_worker,
            config.nproc,
            config.device.value,
            (plan, data, run_dir, progress),
            timeout_s=config.timeout,
            max_restarts=config.max_restarts,
            preload=rank_modules,
        )
        return results.finish(run_dir)
    except BaseException as exc:
        discard(run_dir, created)
        raise explain_stop(exc, run_dir) from None
    finally:
        files.release_run_folder(run_dir)


def _check_paths(**paths) -> None:
    for name, value in paths.items():
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise ConfigError(f"{name}={value!r} ({type(value).__name__}) must be a path (a str or a pathlib.Path).")


def _local_worker(ctx: DistContext, plan: Plan, data: LabelledRecord, run_dir: Path, progress: bool) -> None:
    """A rank this process started: the run folder exists (this process made it); after a
    restart, every rank continues it from its latest checkpoint."""
    _worker(ctx, _after_restart(ctx, plan, run_dir), data, run_dir, progress)


def _run_job_rank(job: JobEnv, plan: Plan, flags: dict, progress: bool) -> dict | None:
    """One rank of a torchrun / SLURM job: the launcher started the ranks and restarts them."""
    try:
        _refuse_launch_flags(job, flags)
        plan.config.nproc = job.world_size
        plan.config.max_restarts = job.max_restarts
        plan.config = preflight(plan.config, count_gpus=False)  # each rank checks its own GPU when it places itself
    except GnnBridgeError as exc:
        exc.quiet = job.local_rank not in (None, 0)  # every rank finds it; each node's first says it
        raise
    return launch(
        _job_worker,
        plan.config.nproc,
        plan.config.device.value,
        (plan, progress),
        timeout_s=plan.config.timeout,
        job=job,
    )


def _refuse_launch_flags(job: JobEnv, flags: dict) -> None:
    nproc, restarts = flags["nproc"], flags["max_restarts"]
    if nproc is not None and nproc != job.world_size:
        raise ConfigError(
            f"--nproc {nproc} inside a {job.launcher} job of {job.world_size} ranks: the launcher already "
            "started the ranks; drop --nproc (the job's size decides)."
        )
    if restarts is not None and restarts != job.max_restarts:
        raise ConfigError(
            f"--max-restarts {restarts} inside a {job.launcher} job: the launcher restarts the ranks; drop "
            "--max-restarts and give it to the launcher (torchrun --max-restarts K)."
        )


def _job_worker(ctx: DistContext, plan: Plan, progress: bool) -> dict | None:
    """Per rank of a job: rank 0 owns the run folder (on its machine); each node loads the
    dataset once into shared memory. After a restart, every rank continues the folder the
    previous attempt published."""
    plan = _after_restart(ctx, plan, *_published_run_dir(ctx))
    if ctx.is_main:
        plan.check_out()  # refuse a used --out before any work
    data = machine_shared(ctx, lambda: load_dataset(plan.config, ranks_here=ctx.local_world_size))
    plan.check_same_data(data)
    if not ctx.is_main:
        _guard_run_dir(ctx)
        _worker(ctx, plan, data, None, progress)
        return None
    run_dir, created = plan.make_run_dir()
    # Where a restarted attempt continues, and what to remove once no restart is left.
    ctx.job_store.set("run_dir", json.dumps([str(run_dir), created and str(created)]))
    if ctx.attempt < plan.config.max_restarts:
        created = None  # the next attempt continues this folder, checkpoint or not
    ctx.store.set("run_dir", json.dumps([str(run_dir), created and str(created)]))
    ctx.on_abort(lambda: discard(run_dir, created))
    try:
        plan.write_config(run_dir)
        _worker(ctx, plan, data, run_dir, progress)
        return results.finish(run_dir)
    except BaseException as exc:
        discard(run_dir, created)
        raise explain_stop(exc, run_dir) from None
    finally:
        files.release_run_folder(run_dir)


def _published_run_dir(ctx: DistContext) -> tuple[Path | None, Path | None]:
    """The folder an earlier attempt of this job wrote into and what that attempt created (None
    on the first attempt, or when it failed before making one)."""
    if ctx.attempt == 0 or not ctx.job_store.check(["run_dir"]):
        return None, None
    path, created = json.loads(ctx.job_store.get("run_dir"))
    return (Path(path), created and Path(created)) if Path(path).is_dir() else (None, None)


def _after_restart(ctx: DistContext, plan: Plan, run_dir: Path | None, created: Path | None = None) -> Plan:
    """On a restart, continue ``run_dir``; every rank reads the same checkpoint, so all agree."""
    if ctx.attempt == 0:
        return plan
    if run_dir is not None:
        plan = plan.after_restart(run_dir, ctx.attempt, ctx.previous_failure(), created)
    _agree(ctx, plan)
    if ctx.is_main and plan.restart is not None:
        epoch, inside = plan.restart["resumed_from_epoch"], plan.restart.get("inside")
        where = f"from epoch {epoch + 2}" if epoch is not None else "from the start (no checkpoint yet)"
        if inside:
            where = f"from epoch {inside['epoch'] + 1}, after its batch {inside['batches']}"
        print(
            f"Restart {ctx.attempt} of {plan.config.max_restarts} after: {plan.restart['after'] or 'a rank failed'}; "
            f"continuing {run_dir} {where}.",
            file=sys.stderr,
            flush=True,
        )
    return plan


def _agree(ctx: DistContext, plan: Plan) -> None:
    """Every rank must continue from the epoch rank 0 continues from. They differ only when the
    run folder is not on a file system every node sees: say so instead of hanging in DDP."""
    epoch = plan.restart and plan.restart["resumed_from_epoch"]
    if ctx.is_main:
        ctx.store.set("restart_epoch", json.dumps(epoch))
        return
    expected = json.loads(ctx.wait_key("restart_epoch"))
    if epoch != expected:
        raise ConfigError(
            f"After restart {ctx.attempt}, rank {ctx.rank} would continue from epoch {epoch} but rank 0 from epoch "
            f"{expected}: the run folder must be on a file system every node sees (as for --resume)."
        )


def _guard_run_dir(ctx: DistContext) -> None:
    """Ranks on rank 0's machine also remove its run folder if the job fails: should rank 0 be
    killed outright, they are the only ones left to do it."""
    if not any(m.rank == 0 and m.same_host(ctx.members[ctx.rank]) for m in ctx.members):
        return
    path, created = json.loads(ctx.wait_key("run_dir"))
    ctx.on_abort(lambda: discard(Path(path), created and Path(created)))  # None while restarts remain


def _worker(ctx: DistContext, plan: Plan, data: LabelledRecord, run_dir: Path | None, progress: bool) -> None:
    """Every rank: train (continuing the plan's checkpoint, if any), then rank 0 writes results.
    ``run_dir`` is None on ranks that do not write (ranks other than 0 of a job)."""
    resume = plan.resume_state()
    trainer = Trainer(
        plan.config, data, ctx, show_progress=progress, run_dir=run_dir, resume=resume, on_epoch=plan.on_epoch
    )
    if plan.restart is not None:
        trainer.state.restarts.append(plan.restart)
    outcome = trainer.fit()
    try:
        ranks = ctx.gather_objects(results.rank_summary(ctx, trainer))
        if ctx.is_main:
            results.write(run_dir, plan, ctx, trainer, outcome, ranks)
            trainer.loggers.run_finished(run_dir)  # a tracked run takes results.json, curves.png, checkpoints
    except BaseException:
        trainer.loggers.close(warn=False)
        raise
    trainer.loggers.close()
