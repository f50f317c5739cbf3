"""A trained run moved to the other library: the code behind ``gnnbridge port``.

The new run folder is a run of the target backend in every respect: its ``config.yaml`` and
checkpoints name that backend, its checkpoints hold the same model in that library's parameter
layout (through the neutral names, :mod:`gnnbridge.core.models.neutral`), with the optimizer's
moments and the training history, so ``evaluate``, ``predict`` and ``train --resume`` work on
it as on any run. ``results.json`` is the source run's, marked ``ported_from``.

Both models are built from the checkpoint's config on the dataset it names (the feature and
class counts, GCN's degrees), so a dataset that moved is pointed at with ``--set
dataset.path=...``. Everything is checked and converted in memory before the folder is created;
the folder appears only with its checkpoints, and never over anything that exists.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from gnnbridge.core import config as cfgmod
from gnnbridge.core import files
from gnnbridge.core.app.preflight import load_dataset, preflight
from gnnbridge.core.app.resolve import check_frozen, resolve_config
from gnnbridge.core.app.rundir import CONFIG, RESULTS, discard, make_run_dir, new_run_dir
from gnnbridge.core.config import ExperimentConfig
from gnnbridge.core.errors import CheckpointError, ConfigError, DataFileNotFoundError
from gnnbridge.core.inference import checkpoint
from gnnbridge.core.models.build import build_model, model_dims
from gnnbridge.core.models.neutral import from_neutral, port_optimizer, to_neutral
from gnnbridge.core.plugins import library_versions, no_code, no_downloads

FROZEN_BUT_BACKEND = ("task", "model")  # what --set may not change: the weights are tied to them
NATIVE = "native"  # the one sampler kind tied to a library: a ported run takes "auto" instead


def port(
    target: str | os.PathLike,
    to: str,
    out: str | os.PathLike,
    *,
    overrides: list[str] | tuple[str, ...] = (),
    trust_code: bool = False,
) -> dict:
    """Write ``out``, a run folder holding ``target``'s model for backend ``to``.

    :param target: a run folder, or a checkpoint file.
    :param to: the backend to move the model to (``pyg``, ``dgl``, or one a plugin adds).
    :param out: the new run folder (must not exist, or be empty).
    :param overrides: ``KEY=VALUE`` data keys (``dataset.path=NEW.npz``; never the model's).
    :param trust_code: import the model class the checkpoint names by import path.
    :returns: what was written: ``run_dir`` (``out``), ``backend`` (``to``), ``from_backend``,
        ``checkpoints`` (the checkpoint files written)."""
    run = _run_folder(target)
    states = {
        kind: {**checkpoint.load(path), "path": str(path)}
        for kind in checkpoint.KINDS
        if (path := checkpoint.path_in(run, kind)).is_file()
    }
    original = next(iter(states.values()))["config"]
    if not isinstance(to, str) or not to.strip() or to == original["backend"]:
        why = f"was trained on {to} already" if to == original["backend"] else "needs a backend to move to"
        raise ConfigError(f"'{run}' {why}; --to names the other library (gnnbridge backends lists them).")
    # The written config is the run's, on the other library, with the --set values (a dataset
    # that moved, another device). The models are built on the CPU from copies without the
    # placement: the weights are only moved (a CPU-only DGL could not even build for CUDA).
    written = _on(to, resolve_config(original, overrides=overrides))
    check_frozen(original, written.to_dict(), FROZEN_BUT_BACKEND, "port")
    new_run_dir(written, out)  # a used --out is refused now, not after the dataset has loaded
    source = resolve_config({**original, "placement": {}}, overrides=overrides, nproc=1, device="cpu")
    dest = _on(to, source, nproc=1, device="cpu")
    with no_downloads(), contextlib.nullcontext() if trust_code else no_code():
        source, dest = preflight(source, count_gpus=False), preflight(dest, count_gpus=False)
        data = load_dataset(source)
    models = {
        cfg.backend: build_model(cfg.model, cfg.backend, cfg.kind, *model_dims(data), data) for cfg in (source, dest)
    }
    converted = {
        kind: _convert(state, models[source.backend], models[dest.backend], written, run)
        for kind, state in states.items()
    }
    run_dir = _write(out, written, converted, _results(run, written, source.backend))
    return {
        "run_dir": str(run_dir),
        "backend": dest.backend,
        "from_backend": source.backend,
        "checkpoints": sorted(converted),
    }


def _run_folder(target) -> Path:
    if not isinstance(target, (str, os.PathLike)):
        raise ConfigError(f"run={target!r} must be a run folder (a str or a pathlib.Path).")
    run = Path(target)
    if not run.is_dir():
        raise DataFileNotFoundError(
            f"'{run}' is not a run folder; give the folder a training run wrote (it holds {checkpoint.FOLDER}/)."
        )
    if not checkpoint.has_checkpoint(run):
        raise CheckpointError(
            f"'{run}' holds no checkpoint ({checkpoint.FOLDER}/best.pt or latest.pt); there is no "
            "trained model to port."
        )
    return run


def _on(backend: str, config: ExperimentConfig, **flags) -> ExperimentConfig:
    """``config`` on ``backend`` (with ``flags`` as resolve_config takes them); a run trained with
    the library's own sampler (``native``) takes ``auto``, the new library's default."""
    data = config.to_dict()
    if data["sampler"]["kind"] == NATIVE:
        data["sampler"] = {**data["sampler"], "kind": "auto"}
    return resolve_config(data, backend=backend, **flags)


def _convert(state: dict, pair_from: tuple, pair_to: tuple, dest: ExperimentConfig, run: Path) -> dict:
    """One checkpoint in the target layout: weights, the best epoch's weights, optimizer moments."""
    (source, choice), (target, _) = pair_from, pair_to
    origin = choice.origin

    def weights(native: dict) -> dict:
        return from_neutral(target, to_neutral(source, native, origin), origin)

    checkpoint.load_model_state(source, state, state["path"])  # the same checks evaluate makes
    moved = {
        **state,
        "model": weights(state["model"]),
        "config": dest.to_dict(),
        "optimizer": port_optimizer(state["optimizer"], source, target, origin),
        "versions": library_versions(dest.backend),
        "ported_from": {"run": str(run.resolve()), "backend": state["config"]["backend"], "checkpoint": state["path"]},
    }
    if "best_model" in state:
        moved["best_model"] = weights(state["best_model"])
    moved.pop("path")
    return moved


def _results(run: Path, dest: ExperimentConfig, from_backend: str) -> dict | None:
    """The source run's results, marked as ported (None: the source has none, e.g. it was stopped)."""
    path = run / RESULTS
    if not path.is_file():
        return None
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return {**results, "backend": dest.backend, "ported_from": {"run": str(run.resolve()), "backend": from_backend}}


def _write(out, dest: ExperimentConfig, converted: dict, results: dict | None) -> Path:
    path = new_run_dir(dest, out)  # refuses a used folder before anything is written
    run_dir, created = make_run_dir(path, exclusive=False)
    try:
        files.write_text(run_dir / CONFIG, cfgmod.dump_yaml(dest))
        for kind, state in converted.items():
            checkpoint.save(checkpoint.path_in(run_dir, kind), state)
        if results is not None:
            files.write_json(run_dir / RESULTS, results)
    except BaseException:
        _undo(run_dir, created)
        raise
    finally:
        files.release_run_folder(run_dir)
    return run_dir


def _undo(run_dir: Path, created: Path | None) -> None:
    """Take back what this port wrote: the checkpoints too (they are ours, not a run to resume)."""
    for kind in checkpoint.KINDS:
        checkpoint.path_in(run_dir, kind).unlink(missing_ok=True)
    (run_dir / RESULTS).unlink(missing_ok=True)
    discard(run_dir, created)
