"""One experiment from start to finish: the code behind ``gnnbridge train`` and ``gnnbridge.run``.

Order matters for the "bad input writes nothing" contract: the config is resolved and
validated, the backend, architecture and device are checked, and the dataset is loaded and
validated, all *before* the output folder is created. Only then are ranks launched.

Inside a torchrun or SLURM job (``core/launch``) each process is one rank and runs this same
code: the config checks happen on every rank before the rendezvous (same answer everywhere, so
no rank waits for one that gave up); the output folder check, the dataset (loaded once per node,
``core/sharing``) and the run folder (rank 0's) come after it, where a failure on one rank stops
all of them.
"""
from __future__ import annotations

import json
import os
import platform
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gnnbridge.core import checkpoint
from gnnbridge.core import config as cfgmod
from gnnbridge.core.collection import GraphCollection
from gnnbridge.core.config import DeviceChoice, ExperimentConfig, Task
from gnnbridge.core.data import GraphData
from gnnbridge.core.distributed import DistContext, launch
from gnnbridge.core.errors import (
    BackendUnavailableError,
    ConfigError,
    DataFileNotFoundError,
    GnnBridgeError,
    OutputExistsError,
    unknown_name,
)
from gnnbridge.core.launch import JobEnv, detect_job
from gnnbridge.core.plugins import backends, datasets, experiments, library_versions
from gnnbridge.core.sharing import node_shared
from gnnbridge.core.trainer import Trainer, TrainState

DEFAULT_EXPERIMENT = "sage-synthetic"
RESULTS = "results.json"
CONFIG = "config.yaml"


# --------------------------------------------------------------------------- config


def resolve_config(
    experiment: str | os.PathLike | dict | ExperimentConfig | None = None,
    *,
    overrides: list[str] | tuple[str, ...] = (),
    backend: str | None = None,
    nproc: int | None = None,
    device: str | None = None,
    dataset: str | None = None,
    timeout: float | None = None,
) -> ExperimentConfig:
    """Merge defaults, an experiment, ``--dataset``, ``--set`` overrides and flags; validate."""
    if isinstance(experiment, ExperimentConfig):
        data = experiment.to_dict()
    elif isinstance(experiment, dict):
        data = experiment
    else:
        data = _experiment_dict(experiment)
    if dataset is not None:
        data = {**data, "dataset": _dataset_section(dataset)}
        if experiment is None:  # the default experiment's name would mislabel this run
            data = {k: v for k, v in data.items() if k != "description"}
            data["name"] = Path(dataset).stem
    data = cfgmod.apply_overrides(data, list(overrides))
    flags = {"backend": backend, "nproc": nproc, "device": device, "timeout": timeout}
    data = {**data, **{k: v for k, v in flags.items() if v is not None}}
    config = cfgmod.from_dict(data)
    # Absolute, so a run can be resumed, evaluated or predicted from any working directory.
    for key in ("path", "root"):
        if getattr(config.dataset, key):
            setattr(config.dataset, key, os.path.abspath(getattr(config.dataset, key)))
    if not config.backend:
        from gnnbridge.plugins import DEFAULT_BACKEND  # core names no backend itself

        config.backend = DEFAULT_BACKEND
    return config


def _experiment_dict(experiment: str | os.PathLike | None) -> dict:
    if experiment is None:
        return {"name": DEFAULT_EXPERIMENT, **experiments.get(DEFAULT_EXPERIMENT)}
    text = os.fspath(experiment)
    if text.endswith((".yaml", ".yml")) or os.sep in text or Path(text).is_file():
        data = cfgmod.load_yaml(text)
        return {"name": Path(text).stem, **data}
    return {"name": text, **experiments.get(text)}


def _dataset_section(dataset: str) -> dict:
    if dataset.endswith(".npz") or os.sep in dataset or Path(dataset).is_file():
        return {"name": "npz", "path": dataset}
    return {"name": dataset}


# Keys a resumed run keeps from its checkpoint: they decide the weights' shapes, the data the
# epochs replay on, and what "best" means. Everything else (epochs, patience, nproc, device,
# eval, lr ...) may change when a run continues.
RESUME_FROZEN = ("task", "backend", "dataset", "model", "train.monitor")


def plan_resume(run_dir: str | os.PathLike, experiment, dataset, out, overrides, flags: dict) -> Plan:
    """Config and checks for continuing ``run_dir`` from its latest checkpoint."""
    given = [name for name, value in (("EXPERIMENT", experiment), ("--dataset", dataset), ("--out", out))
             if value is not None]
    if given:
        raise ConfigError(f"--resume {run_dir} continues that run's own experiment, data and folder; drop "
                          f"{' and '.join(given)} (change training keys with --set).")
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise DataFileNotFoundError(f"Run folder '{run_dir}' does not exist.")
    path = checkpoint.path_in(run_dir, checkpoint.LATEST)
    if not path.is_file():
        raise DataFileNotFoundError(
            f"Run folder '{run_dir}' has no {path.relative_to(run_dir)} to resume from (stopped before its first "
            "checkpoint, or not a gnnbridge run); start it again."
        )
    state = {**checkpoint.load(path), "path": str(path)}
    config = resolve_config(state["config"], overrides=overrides, **flags)
    check_frozen(state["config"], config.to_dict())
    _check_epochs_left(state, config, run_dir)
    return Plan(config, resume_dir=run_dir, latest=state)


def check_frozen(saved: dict, new: dict, frozen: tuple[str, ...] = RESUME_FROZEN, action: str = "--resume") -> None:
    """Refuse a change to a key under ``frozen`` between a checkpoint's config and ``new``."""
    old_flat, new_flat = _flatten(saved), _flatten(new)
    for key in sorted(set(old_flat) | set(new_flat)):
        if key.startswith(frozen) and old_flat.get(key) != new_flat.get(key):
            raise ConfigError(
                f"{key}={new_flat.get(key)!r} differs from the checkpoint's {old_flat.get(key)!r}, but {action} keeps "
                f"{', '.join(frozen)} as trained; start a new run for that (gnnbridge train ... --out NEW)."
            )


def _flatten(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _check_epochs_left(state: dict, config: ExperimentConfig, run_dir: Path) -> None:
    done, train = state["epoch"] + 1, config.train
    if train.epochs <= done:
        raise ConfigError(
            f"Run '{run_dir}' has already trained {done} epoch(s) and train.epochs={train.epochs}; extend it with "
            f"--set train.epochs=N for some N > {done}."
        )
    progress = TrainState.from_checkpoint(state)
    if progress.should_stop(train.patience):
        raise ConfigError(
            f"Run '{run_dir}' stopped early after {done} epoch(s): {train.monitor} did not improve for "
            f"{progress.bad_epochs} epoch(s) (train.patience={train.patience}); continue with a larger "
            "train.patience, or 0 to turn early stopping off."
        )


# --------------------------------------------------------------------------- preflight


def preflight(config: ExperimentConfig, count_gpus: bool = True) -> ExperimentConfig:
    """Check everything that can be checked without data; returns the config with device resolved.

    ``count_gpus``: whether ``nproc`` ranks will run on this machine (not so in a multi-node job)."""
    backend = backends.get(config.backend).require()
    _check_task(config, backend)
    # Graph tasks read whole graphs through the library's plain graph loader: nothing to install.
    reason = backend.sampler_unavailable(config.sampler.kind) if config.task is Task.NODE else None
    if reason is not None:
        raise BackendUnavailableError(f"Backend '{config.backend}': {reason}.")
    datasets.get(config.dataset.name)
    device = _resolve_device(config)
    backend.check_device(torch.device(device))
    if count_gpus and device == "cuda" and config.nproc > torch.cuda.device_count():
        raise ConfigError(
            f"nproc={config.nproc} but this machine has {torch.cuda.device_count()} CUDA device(s); "
            f"use --nproc {torch.cuda.device_count()} or fewer."
        )
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if count_gpus and device == "cpu" and config.nproc > cores:
        raise ConfigError(
            f"nproc={config.nproc} but this process may use {cores} CPU core(s); use --nproc {cores} or fewer "
            "(each CPU rank needs a core of its own, more only slows every rank down)."
        )
    config.device = DeviceChoice(device)
    return config


def _check_task(config: ExperimentConfig, backend) -> None:
    task = config.task
    if task not in backend.tasks():
        raise ConfigError(f"Backend '{backend.name}' cannot train task={task.value}; it trains "
                          f"{', '.join(t.value for t in backend.tasks())}.")
    choices = backend.architectures(task)
    if config.model.arch in choices:
        return
    if config.model.arch in backend.architectures():
        other = next(t for t in backend.tasks() if config.model.arch in backend.architectures(t))
        raise ConfigError(
            f"model.arch={config.model.arch!r} is a {other.value}-level model but task={task.value}; "
            f"use --set model.arch={choices[0]} (choices for task={task.value}: {', '.join(choices)})."
        )
    raise unknown_name("model.arch", config.model.arch, choices)


def _resolve_device(config: ExperimentConfig) -> str:
    if config.device is DeviceChoice.AUTO:
        if torch.cuda.is_available():
            try:
                backends.get(config.backend).check_device(torch.device("cuda", 0))
                return "cuda"
            except BackendUnavailableError:
                return "cpu"
        return "cpu"
    if config.device is DeviceChoice.CUDA and not torch.cuda.is_available():
        raise ConfigError("device=cuda but PyTorch sees no CUDA device here; use --device cpu or auto.")
    return config.device.value


def load_dataset(config: ExperimentConfig) -> GraphData | GraphCollection:
    """Load and validate the dataset; it must suit the task, and every split must give each
    rank at least one node (or graph)."""
    data = datasets.get(config.dataset.name)(config.dataset, config.train.seed)
    _check_data_task(config, data)
    if config.train.monitor == "val_roc_auc" and data.num_classes != 2:
        raise ConfigError(f"train.monitor=val_roc_auc needs two classes but the dataset has {data.num_classes}; "
                          "use train.monitor=val_acc or val_macro_f1.")
    for split in ("train", "val", "test"):
        size = data.split(split).numel()
        if size < config.nproc:
            raise ConfigError(
                f"The {split} split has {size} {data.item_name}(s), fewer than nproc={config.nproc}; "
                f"use --nproc {size} or fewer, or a larger {split} split."
            )
    return data


def _check_data_task(config: ExperimentConfig, data: GraphData | GraphCollection) -> None:
    label = config.dataset.path or config.dataset.name
    if isinstance(data, GraphCollection) and config.task is not Task.GRAPH:
        raise ConfigError(
            f"Dataset '{label}' is a collection of {data.num_graphs} graphs (one label per graph) but "
            f"task={config.task.value}; add --set task=graph --set model.arch=gin."
        )
    if isinstance(data, GraphData) and config.task is not Task.NODE:
        raise ConfigError(
            f"Dataset '{label}' is one graph with a label per node but task={config.task.value}; use "
            "a graph collection (gin-synthetic, imdb-binary, proteins, mutag, or a .npz with node_ptr) "
            "or --set task=node."
        )


# --------------------------------------------------------------------------- outputs


def new_run_dir(config: ExperimentConfig, out: str | os.PathLike | None, root: str | os.PathLike = "runs") -> Path:
    """Choose the run folder: ``out`` if it is absent or empty, else a fresh
    ``runs/<name>-<backend>-<time>``. Nothing is created here (see :func:`make_run_dir`)."""
    if out is not None:
        path = Path(out)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise OutputExistsError(
                f"Output folder '{path}' already exists and is not empty; choose a new --out "
                "(gnnbridge never overwrites a run)."
            )
        return path
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"{_slug(config.name)}-{config.backend}-{stamp}"


def make_run_dir(path: Path, exclusive: bool) -> tuple[Path, Path | None]:
    """Create the run folder; return it and the top-most folder this call created (to undo).

    With ``exclusive`` (a generated name), two jobs started in the same second never share a
    folder: creation is atomic and a taken name gets a ``-2``, ``-3`` ... suffix.
    """
    created = next((p for p in reversed([path, *path.parents]) if not p.exists()), None)
    if not exclusive:
        path.mkdir(parents=True, exist_ok=True)
        return path, created
    path.parent.mkdir(parents=True, exist_ok=True)
    candidate, n = path, 1
    while True:
        try:
            candidate.mkdir()
            return candidate, created if created != path else candidate
        except FileExistsError:
            n += 1
            candidate = path.with_name(f"{path.name}-{n}")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "run"


def write_json_atomic(path: Path, payload: Any) -> None:
    write_text_atomic(path, json.dumps(payload, indent=2) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# --------------------------------------------------------------------------- running


def run(
    experiment: str | os.PathLike | dict | ExperimentConfig | None = None,
    *,
    backend: str | None = None,
    nproc: int | None = None,
    device: str | None = None,
    dataset: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    out: str | os.PathLike | None = None,
    progress: bool = True,
    timeout: float | None = None,
    resume: str | os.PathLike | None = None,
) -> dict | None:
    """Train an experiment and return its results (the content of ``results.json``).

    ``experiment`` is a YAML path, a built-in experiment name, a config dict or an
    :class:`ExperimentConfig`; ``None`` runs the default experiment. ``resume`` is instead a run
    folder to continue from its latest checkpoint, in place (``overrides`` may extend
    ``train.epochs`` or change other training keys, never the model or the data).

    Inside a torchrun or SLURM job this process is one rank of it: rank 0 writes the run folder
    and returns the results, every other rank returns ``None``.
    """
    flags = {"backend": backend, "nproc": nproc, "device": device, "timeout": timeout}
    if resume is not None:
        plan = plan_resume(resume, experiment, dataset, out, overrides, flags)
    else:
        plan = Plan(resolve_config(experiment, overrides=overrides, dataset=dataset, **flags), out)
    job = detect_job()
    if job is not None:
        return _run_job_rank(job, plan, nproc, progress)
    plan.config = preflight(plan.config)
    data = load_dataset(plan.config)
    run_dir, created = plan.make_run_dir()
    try:
        plan.write_config(run_dir)
        data.share_memory_()
        launch(_worker, plan.config.nproc, plan.config.device.value, (plan, data, str(run_dir), progress),
               timeout_s=plan.config.timeout)
    except BaseException as exc:
        _discard(run_dir, created)
        _hint_resume(exc, run_dir)
        raise
    return _finish(run_dir)


@dataclass
class Plan:
    """What a ``train`` call will do: a fresh run (into ``out`` or a new folder) or the
    continuation of ``resume_dir`` from its latest checkpoint."""

    config: ExperimentConfig
    out: str | os.PathLike | None = None
    resume_dir: Path | None = None
    latest: dict | None = None  # the checkpoint resumed from, read once (ranks get it with the plan)

    def make_run_dir(self) -> tuple[Path, Path | None]:
        """The run folder and what to remove if the run fails (nothing, when resuming)."""
        if self.resume_dir is not None:
            checkpoint.remove_partial(self.resume_dir)  # left by a write the kill cut short
            return self.resume_dir, None
        return make_run_dir(new_run_dir(self.config, self.out), exclusive=self.out is None)

    def check_out(self) -> None:
        """Refuse a used ``--out`` (rank 0 of a job calls this before any work)."""
        if self.resume_dir is None:
            new_run_dir(self.config, self.out)

    def write_config(self, run_dir: Path) -> None:
        write_text_atomic(run_dir / CONFIG, cfgmod.dump_yaml(self.config))

    def resume_state(self) -> dict | None:
        """The latest checkpoint, with the best epoch's weights when those are not the latest's
        (read from best.pt by each rank: the run folder must be visible to every node)."""
        if self.latest is None:
            return None
        state = dict(self.latest)
        best_path = checkpoint.path_in(self.resume_dir, checkpoint.BEST)
        best_epoch = state["monitor"]["best_epoch"]
        if best_epoch is not None and best_epoch != state["epoch"] and best_path.is_file():
            best = checkpoint.load(best_path)
            if best["epoch"] == best_epoch:
                state["best_model"] = best["model"]
        return state


def _run_job_rank(job: JobEnv, plan: Plan, nproc: int | None, progress: bool) -> dict | None:
    """One rank of a torchrun / SLURM job: the launcher started the ranks, nobody spawns."""
    try:
        if nproc is not None and nproc != job.world_size:
            raise ConfigError(
                f"--nproc {nproc} inside a {job.launcher} job of {job.world_size} ranks: the launcher already "
                "started the ranks; drop --nproc (the job's size decides)."
            )
        plan.config.nproc = job.world_size
        plan.config = preflight(plan.config, count_gpus=False)  # each rank checks its own GPU when it places itself
    except GnnBridgeError as exc:
        exc.quiet = job.local_rank not in (None, 0)  # every rank finds it; each node's first says it
        raise
    return launch(_job_worker, plan.config.nproc, plan.config.device.value, (plan, progress),
                  timeout_s=plan.config.timeout, job=job)


def _job_worker(ctx: DistContext, plan: Plan, progress: bool) -> dict | None:
    """Per rank of a job: rank 0 owns the run folder (on its machine); each node loads the
    dataset once into shared memory."""
    if ctx.is_main:
        plan.check_out()  # refuse a used --out before any work
    data = node_shared(ctx, lambda: load_dataset(plan.config))
    if not ctx.is_main:
        _guard_run_dir(ctx)
        _worker(ctx, plan, data, "", progress)
        return None
    run_dir, created = plan.make_run_dir()
    ctx.store.set("run_dir", json.dumps([str(run_dir), created and str(created)]))
    ctx.on_abort(lambda: _discard(run_dir, created))
    try:
        plan.write_config(run_dir)
        _worker(ctx, plan, data, str(run_dir), progress)
    except BaseException as exc:
        _discard(run_dir, created)
        _hint_resume(exc, run_dir)
        raise
    return _finish(run_dir)


def _guard_run_dir(ctx: DistContext) -> None:
    """Ranks on rank 0's machine also remove its run folder if the job fails: should rank 0 be
    killed outright, they are the only ones left to do it."""
    if not any(m.rank == 0 and m.same_host(ctx.members[ctx.rank]) for m in ctx.members):
        return
    path, created = json.loads(ctx.wait_key("run_dir"))
    ctx.on_abort(lambda: _discard(Path(path), created and Path(created)))


def _discard(run_dir: Path, created: Path | None) -> None:
    """Undo a run that produced no results and no checkpoint (one with a checkpoint is kept:
    it can be resumed). Only folders this run created are removed, so nothing of the user's is
    touched."""
    if (run_dir / RESULTS).exists():
        return
    if checkpoint.has_checkpoint(run_dir):
        checkpoint.remove_partial(run_dir)  # a checkpoint write the failure cut short
        return
    if created is not None:
        shutil.rmtree(created, ignore_errors=True)
    else:  # the user's own (empty) folder: take back only what we wrote
        (run_dir / CONFIG).unlink(missing_ok=True)


def _hint_resume(exc: BaseException, run_dir: Path) -> None:
    """A failed run that left a checkpoint says how to continue it, on its one error line."""
    if isinstance(exc, GnnBridgeError) and exc.args and checkpoint.has_checkpoint(run_dir):
        line = f"{str(exc.args[0]).rstrip('.')}. The run's checkpoint is kept; continue it with: "
        exc.args = (f"{line}gnnbridge train --resume {run_dir}",)


def _finish(run_dir: Path) -> dict:
    results = json.loads((run_dir / RESULTS).read_text())
    _plot(run_dir, results)
    results["run_dir"] = str(run_dir)
    return results


def _worker(ctx: DistContext, plan: Plan, data: GraphData | GraphCollection, run_dir: str, progress: bool) -> None:
    config = plan.config
    resume = plan.resume_state()
    trainer = Trainer(config, data, ctx, show_progress=progress, run_dir=run_dir or None, resume=resume)
    outcome = trainer.fit()
    ranks = ctx.gather_objects(_rank_summary(ctx, trainer))
    if ctx.is_main:
        results = {
            "experiment": config.name,
            "backend": config.backend,
            "task": config.task.value,
            "world_size": ctx.world_size,
            "num_nodes": ctx.num_nodes,
            "device": config.device.value,
            "dataset": data.summary(),
            "sampler": type(trainer.sampler).__name__,
            **outcome,
            "resumed_from": resume and {"epoch": resume["epoch"], "world_size": resume.get("world_size")},
            "ranks": ranks,
            "versions": library_versions(config.backend),
        }
        _keep_earlier_results(Path(run_dir))
        write_json_atomic(Path(run_dir) / RESULTS, results)


def _keep_earlier_results(run_dir: Path) -> None:
    """A resumed, finished run gets new results; the earlier ones stay, renamed
    ``results.epochs-N.json`` after the epochs they cover."""
    path = run_dir / RESULTS
    if not path.exists():
        return
    try:
        epochs = len(json.loads(path.read_text()).get("history", []))
    except (OSError, ValueError):
        epochs = 0
    target, n = run_dir / f"results.epochs-{epochs}.json", 1
    while target.exists():
        n += 1
        target = run_dir / f"results.epochs-{epochs}-{n}.json"
    os.replace(path, target)


def _rank_summary(ctx: DistContext, trainer: Trainer) -> dict:
    """Where a rank ran and which training items it got, to check a job's layout afterwards."""
    return {"rank": ctx.rank, "node": ctx.node_rank, "local_rank": ctx.local_rank, "host": platform.node(),
            "device": str(ctx.device), **trainer.shard_fingerprint}


def _plot(run_dir: Path, results: dict) -> None:
    """Loss and validation accuracy per epoch as ``curves.png`` (skipped without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib is a dependency, but plotting is optional
        return
    history = results["history"]
    epochs = [h["epoch"] + 1 for h in history]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(9, 3.5))
    ax_loss.plot(epochs, [h["loss"] for h in history], marker="o")
    ax_loss.set(xlabel="epoch", ylabel="training loss", title="Loss")
    ax_acc.plot(epochs, [h["train_acc"] for h in history], marker="o", label="train")
    ax_acc.plot(epochs, [h["val_acc"] for h in history], marker="o", label="val (sampled)" if results["task"] == "node" else "val")
    ax_acc.set(xlabel="epoch", ylabel="accuracy", title=f"{results['experiment']} on {results['backend']}")
    ax_acc.legend()
    fig.tight_layout()
    fig.savefig(run_dir / "curves.png", dpi=100)
    plt.close(fig)
