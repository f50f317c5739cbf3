"""From what the user typed to one validated :class:`ExperimentConfig`.

Layers, last wins: the built-in defaults, an experiment (YAML path or registered name),
``--dataset`` (with a folder's own training defaults, ``DIR/train-defaults.json``: a folder
prepared from tables says its task, target and ``dataset.reverse_edges``), ``--set KEY=VALUE``
overrides, then flags. Nothing here touches data, devices or
the disk beyond reading the experiment file, so every rank of a job can resolve the same config
and refuse the same bad input before any of them waits for the others.
"""

from __future__ import annotations

import os
from pathlib import Path

from gnnbridge.core import config as cfgmod
from gnnbridge.core.config import ExperimentConfig
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.plugins import dataset_sources, default_backend, experiments
from gnnbridge.core.storage.intent import read_train_defaults, with_defaults

DEFAULT_EXPERIMENT = "sage-synthetic"


def resolve_config(
    experiment: str | os.PathLike | dict | ExperimentConfig | None = None,
    *,
    overrides: list[str] | tuple[str, ...] = (),
    backend: str | None = None,
    nproc: int | None = None,
    device: str | None = None,
    dataset: str | None = None,
    timeout: float | None = None,
    max_restarts: int | None = None,
) -> ExperimentConfig:
    """Merge defaults, an experiment, ``--dataset``, ``--set`` overrides and flags; validate.

    :param experiment: a YAML path, a built-in experiment name, a config dict or an
        :class:`ExperimentConfig`; ``None``: the default experiment.
    :param overrides: ``KEY=VALUE`` strings, as ``--set`` takes them.
    :param backend: sets ``backend``.
    :param nproc: sets ``nproc``.
    :param device: sets ``device``.
    :param dataset: a dataset name, ``.npz`` path or prepared folder (``--dataset``): the
        experiment's graph is replaced, how it uses a graph (``dataset.reverse_edges``, and
        ``dataset.partitions`` for a folder) is kept; a folder's training defaults
        (``DIR/train-defaults.json``: ``task``, ``target``, ``dataset.reverse_edges``) then replace
        the experiment's values of those keys, and ``--set`` replaces theirs.
    :param timeout: sets ``timeout`` (seconds).
    :param max_restarts: sets ``max_restarts``.
    :returns: the validated :class:`ExperimentConfig` (``.to_dict()`` is the YAML a run writes as
        ``config.yaml``); a bad value raises :class:`~gnnbridge.core.errors.ConfigError` naming it."""
    overrides = cfgmod.check_overrides(overrides)
    if backend is not None and isinstance(backend, str) and not backend.strip():
        raise ConfigError(
            "--backend is empty; name one (gnnbridge backends lists them), or leave it out for the default."
        )
    if isinstance(experiment, ExperimentConfig):
        data = experiment.to_dict()
    elif isinstance(experiment, dict):
        cfgmod.check_plain(experiment, "The experiment")  # before it is copied or printed
        data = experiment
    elif experiment is None or isinstance(experiment, (str, os.PathLike)):
        data = _experiment_dict(experiment)
    else:
        raise ConfigError(
            f"experiment={cfgmod.show(experiment)} ({type(experiment).__name__}) is not an experiment; "
            "give a YAML path, a built-in name (gnnbridge experiments), a dict or an ExperimentConfig."
        )
    if dataset is not None and not isinstance(dataset, (str, os.PathLike)):
        raise ConfigError(f"dataset={cfgmod.show(dataset)} must be a dataset name, a .npz path or a prepared folder.")
    dataset = os.fspath(dataset) if dataset is not None else None
    if dataset is not None:
        section, given = data.get("dataset") if isinstance(data.get("dataset"), dict) else {}, _dataset_section(dataset)
        kept = {key: value for key, value in section.items() if key in KEPT_WITH_ANOTHER_DATASET}
        if given["name"] != "folder":  # only a folder is partitioned: a file or a name is read whole
            kept.pop("partitions", None)
        data = {**data, "dataset": {**kept, **given}}
        if given["name"] == "folder":  # how the folder says it is trained: above the experiment, below --set
            data = with_defaults(data, read_train_defaults(dataset))
        if experiment is None:  # the default experiment's name would mislabel this run
            data = {k: v for k, v in data.items() if k != "description"}
            data["name"] = Path(dataset).stem
    data = cfgmod.apply_overrides(data, overrides)
    flags = {"backend": backend, "nproc": nproc, "device": device, "timeout": timeout, "max_restarts": max_restarts}
    data = {**data, **{k: v for k, v in flags.items() if v is not None}}
    config = cfgmod.from_dict(data)
    # Absolute, so a run can be resumed, evaluated or predicted from any working directory.
    for key in ("path", "root"):
        if getattr(config.dataset, key):
            setattr(config.dataset, key, os.path.abspath(getattr(config.dataset, key)))
    if not config.backend:
        config.backend = default_backend()
    return config


# What an experiment's dataset section says about how to use any graph, not which graph: kept
# when ``--dataset`` names another (its name, path, root and options, the graph's own, are not;
# ``partitions`` only where the other is a folder, the one thing partitioned).
KEPT_WITH_ANOTHER_DATASET = ("reverse_edges", "partitions")


def _experiment_dict(experiment: str | os.PathLike | None) -> dict:
    if experiment is None:
        return {"name": DEFAULT_EXPERIMENT, **experiments.get(DEFAULT_EXPERIMENT)}
    text = os.fspath(experiment)
    if text.endswith((".yaml", ".yml")) or os.sep in text or Path(text).is_file():
        data = cfgmod.load_yaml(text)
        return {"name": Path(text).stem, **data}
    return {"name": text, **experiments.get(text)}


def _dataset_section(dataset: str) -> dict:
    """The config section of ``--dataset``: the first readable dataset source that takes it
    (:mod:`gnnbridge.core.plugins.sources`: a folder, an ``.npz``, a name, or a plugin's kind)."""
    return dataset_sources.section(dataset)


def check_frozen(saved: dict, new: dict, frozen: tuple[str, ...], action: str, movable: tuple[str, ...] = ()) -> None:
    """Refuse a change to a key under ``frozen`` between a checkpoint's config and ``new``, but
    for the ``movable`` keys (where the data lies, not what it is). A key the checkpoint's config
    lacks (it predates the key) counts as its default; an empty section (``model.options: {}``)
    is the same as none."""
    old_flat = {k: v for k, v in {**_flatten(ExperimentConfig().to_dict()), **_flatten(saved)}.items() if v != {}}
    new_flat = {k: v for k, v in _flatten(new).items() if v != {}}
    for key in sorted(set(old_flat) | set(new_flat)):
        if key.startswith(frozen) and key not in movable and old_flat.get(key) != new_flat.get(key):
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
