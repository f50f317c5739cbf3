"""Using a trained model: the code behind ``gnnbridge evaluate`` and ``gnnbridge predict``.

The model is rebuilt from the checkpoint's own config, on the backend it was trained with, so
its shapes always fit; the dataset is loaded from that config too (``--set dataset.path=...``
points at data that moved, and is checked to have the feature and class counts the model was
trained with). Everything is checked before any output exists; ``predict`` writes its file
atomically and never over an existing one. One process: inference is a fraction of training.
"""
from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

import numpy as np
import torch

from gnnbridge.core.app.preflight import load_dataset, preflight
from gnnbridge.core.app.resolve import check_frozen, resolve_config
from gnnbridge.core.app.rundir import output_error
from gnnbridge.core.contracts.config import ExperimentConfig
from gnnbridge.core.contracts.plugins import no_code, no_downloads
from gnnbridge.core.errors import CheckpointError, ConfigError, OutputExistsError, TrainingDivergedError
from gnnbridge.core.records.collection import GraphCollection
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.runtime.context import DistContext
from gnnbridge.core.runtime.launcher import interrupt_on_sigterm, launch
from gnnbridge.core.training import checkpoint
from gnnbridge.core.training.trainer import Trainer

# What a checkpoint's weights are tied to: neither can change when they are used.
INFERENCE_FROZEN = ("task", "backend", "model")


def evaluate(target: str | os.PathLike, *, kind: str = checkpoint.BEST, device: str | None = None,
             overrides: list[str] | tuple[str, ...] = (), trust_code: bool = False) -> dict:
    """Metrics of ``target`` (a run folder's ``kind`` checkpoint, or a checkpoint file) on
    every split, computed as training's final evaluation is (``eval.mode``). ``trust_code``:
    import the model class the checkpoint names by import path (importing runs that code)."""
    path, state, config, data = _prepare(target, kind, device, overrides, "evaluate", trust_code)
    try:
        with interrupt_on_sigterm():
            scored = launch(_evaluate_worker, 1, config.device.value, (config, data, state), timeout_s=config.timeout)
    except TrainingDivergedError as exc:
        raise _nonfinite(path, str(exc)) from None
    return {**_describe(path, state, config), **scored}


def predict(target: str | os.PathLike, out: str | os.PathLike, *, kind: str = checkpoint.BEST,
            device: str | None = None, overrides: list[str] | tuple[str, ...] = (), trust_code: bool = False) -> dict:
    """Write ``out`` (.npz): ``logits`` and ``probs`` [items, classes] float32, ``pred`` and
    ``y`` int64 [items], and the ``train_idx`` / ``val_idx`` / ``test_idx`` the run used."""
    out = _check_out(out)
    path, state, config, data = _prepare(target, kind, device, overrides, "predict", trust_code)
    with _reserved(out) as tmp, interrupt_on_sigterm():  # a folder we cannot write fails now, not after inference
        logits = launch(_predict_worker, 1, config.device.value, (config, data, state), timeout_s=config.timeout)
        logits = logits.float()
        if not bool(torch.isfinite(logits).all()):
            raise _nonfinite(path, "the model's outputs are NaN or infinite")
        arrays = {"logits": logits, "probs": torch.softmax(logits, dim=1), "pred": logits.argmax(dim=1), "y": data.y,
                  "train_idx": data.train_idx, "val_idx": data.val_idx, "test_idx": data.test_idx}
        _write_npz(out, tmp, {k: v.numpy() for k, v in arrays.items()})
    return {**_describe(path, state, config), "out": str(out), "shape": list(logits.shape)}


def _nonfinite(path: Path, what: str) -> TrainingDivergedError:
    return TrainingDivergedError(f"{what[0].upper()}{what[1:]} with the weights in '{path}' (they diverged); nothing "
                                 "was scored or written. Use the run's other checkpoint, or train again with a smaller "
                                 "train.lr.")


def _prepare(target, kind: str, device: str | None, overrides, action: str, trust_code: bool):
    if not isinstance(target, (str, os.PathLike)):
        raise ConfigError(f"target={target!r} must be a run folder or a checkpoint file (a str or a pathlib.Path).")
    path = checkpoint.find(target, kind)
    state = {**checkpoint.load(path), "path": str(path)}
    config = resolve_config(state["config"], overrides=overrides, device=device, nproc=1)
    check_frozen(state["config"], config.to_dict(), INFERENCE_FROZEN, action)
    # The checkpoint names the data and the model: it never makes us fetch or create a dataset,
    # nor import code unless the user says they trust it.
    with no_downloads(), contextlib.nullcontext() if trust_code else no_code():
        config = preflight(config)
        data = load_dataset(config)
    _check_fits(path, state, data)
    return path, state, config, data


def _check_fits(path: Path, state: dict, data: GraphData | GraphCollection) -> None:
    trained = state.get("data", {})
    now = data.summary()
    for key in ("num_features", "num_classes"):
        if key in trained and trained[key] != now[key]:
            raise CheckpointError(
                f"The dataset has {key}={now[key]} but the model in '{path}' was trained with {trained[key]}; "
                "point dataset.path at data of the same kind (--set dataset.path=...)."
            )


def _check_out(out) -> Path:
    if not isinstance(out, (str, os.PathLike)):
        raise ConfigError(f"out={out!r} must be a path ending in .npz (a str or a pathlib.Path).")
    out = Path(out)
    if out.suffix != ".npz":
        raise ConfigError(f"--out {out} must end in .npz (numpy.load reads it), e.g. --out preds.npz.")
    if out.exists() or out.is_symlink():
        raise OutputExistsError(f"'{out}' already exists; choose a new --out (gnnbridge never overwrites a file).")
    return out


@contextlib.contextmanager
def _reserved(out: Path):
    """A temporary file beside ``out``, created before any work (so an unwritable folder is found
    at once) and always removed; ``out`` itself appears only whole (see :func:`_write_npz`)."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.touch(exist_ok=False)
    except OSError as exc:
        raise output_error(out, exc, "--out") from None
    try:
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)


def _write_npz(out: Path, tmp: Path, arrays: dict[str, np.ndarray]) -> None:
    """Written beside ``out`` and linked into place: a crash leaves no half file, and a file that
    appeared meanwhile is not replaced."""
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.link(tmp, out)
    except FileExistsError:
        raise OutputExistsError(f"'{out}' appeared while predicting; it was left as it is.") from None
    except OSError as exc:
        raise output_error(out, exc, "--out") from None


def _describe(path: Path, state: dict, config: ExperimentConfig) -> dict:
    return {"checkpoint": str(path), "epoch": state["epoch"], "experiment": config.name,
            "backend": config.backend, "task": config.task.value, "device": config.device.value}


def _evaluate_worker(ctx: DistContext, config: ExperimentConfig, data, state: dict) -> dict:
    """``{"metrics", "eval"}``: the scores, and how they were computed (as in ``results.json``)."""
    trainer = Trainer(config, data, ctx, show_progress=False, resume=state)
    return {"metrics": trainer.evaluate(), "eval": trainer.eval_summary()}


def _predict_worker(ctx: DistContext, config: ExperimentConfig, data, state: dict) -> torch.Tensor:
    return Trainer(config, data, ctx, show_progress=False, resume=state).predict()
