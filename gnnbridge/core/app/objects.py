"""A graph the user holds in memory (a PyG ``Data`` or ``HeteroData``, a ``DGLGraph``, a dataset
of graphs) as the dataset of a run: ``gnnbridge.run(dataset=obj)``; and a model instance the user
built (``gnnbridge.run(model=obj)``), kept the same way, for the same reason.

The object is read into the dataset format's arrays by a graph reader (each backend registers
one for its library's objects, ``register_graph_readers``), checked as a file's arrays are, and
written once as an ``.npz`` under the data root (``$GNNBRIDGE_DATA``, else
``~/.cache/gnnbridge/datasets``) in ``in-memory/``, named by its content. The run then names
that file as any ``--dataset PATH.npz`` run does.

Why a file and not the object itself: a run outlives the process that started it. ``evaluate``,
``predict``, ``--resume`` and a restarted rank open the run's data from its config, in another
process, often days later; a graph that lived only in a notebook's memory would be gone. The
file also makes the guarantees the ``.npz`` path already has hold unchanged: the same arrays
give the same record and the same metrics, ranks on one machine share one copy in memory, a
torchrun job's ranks find it by path. Named by content, the same graph is written once however
often it is run, and two processes writing it at once each rename a whole file onto the name.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from gnnbridge.core import environ, files
from gnnbridge.core.app.resolve import resolve_config
from gnnbridge.core.config import Task
from gnnbridge.core.errors import ConfigError, OutputPathError
from gnnbridge.core.models import instance
from gnnbridge.core.plugins import backends, families, get_target, graph_readers
from gnnbridge.core.records.reading import Reading
from gnnbridge.core.storage.formats import digest, graph_from_arrays

FOLDER = "in-memory"
# What each file this process wrote (or found written) for a graph object was made from, so that
# a message about the dataset names the object the user handed over, not a cache file they never saw.
_MADE_FROM: dict[str, str] = {}


def as_dataset(dataset: Any, experiment: Any = None, overrides=(), unlabelled: tuple = (None, None)) -> Any:
    """``dataset`` as ``run`` takes it: a name or path as given; a graph object as the path of
    its arrays' ``.npz`` (written if this content was never written), its labels read in the form
    of the target that ``experiment`` and ``overrides`` (a run's config, ``--set`` values) train;
    ``unlabelled``: predict's model width and edge type, where the graph may come without labels
    (:meth:`~gnnbridge.core.records.reading.Reading.unlabelled`)."""
    if dataset is None or isinstance(dataset, (str, os.PathLike)):
        return dataset
    config = resolve_config(experiment, overrides=overrides)
    return _graph_file(dataset, reading_for(config).unlabelled(*unlabelled))


def reading_for(config) -> Reading:
    """How the run's task reads its graph (:class:`~gnnbridge.core.records.reading.Reading`):
    labels in the form its task family and target read them, edge labels for an edge task, node
    labels only where the family reads them (``node_labels``: not link prediction's), the data's
    own splits unless ``dataset.splits`` is ``drawn``. Labels stay required (``predict`` makes
    them optional with :meth:`Reading.unlabelled`)."""
    return Reading(
        form=form_of(config),
        edge_labels=config.kind is Task.EDGE,
        node_labels=families.get(config.task).node_labels,
        splits=config.dataset.splits != "drawn",
    )


def form_of(config) -> str:
    """The form the run's labels are read in: its task family's, else its target's."""
    return families.get(config.task).labels or get_target(config.target).labels


def _graph_file(dataset: Any, reading: Reading) -> str:
    where = f"dataset (a {type(dataset).__name__})"
    if isinstance(dataset, (list, tuple)) and dataset:
        where = f"dataset (a {type(dataset).__name__} of {len(dataset)} {type(dataset[0]).__name__})"
    _, arrays = graph_readers.read(dataset, where, reading)
    arrays = {key: np.ascontiguousarray(value) for key, value in sorted(arrays.items())}
    path = environ.data_root() / FOLDER / f"graph-{digest(arrays)}.npz"  # the same arrays, one file
    if not path.is_file():
        graph_from_arrays(where, arrays, 0, path.stem, reading)  # refused here, before anything is written
        _write(path, arrays)
    _MADE_FROM[str(path)] = where
    return str(path)


def made_from(path: str | None) -> str | None:
    """``dataset (a Data)``, ...: what the user handed over that ``path`` holds, if this process
    wrote it from an object (None for any other path)."""
    return _MADE_FROM.get(str(path)) if path else None


def as_model(model: Any, backend: str | None) -> tuple[str, str]:
    """``(model.arch, backend)`` for a model instance the user built (see
    :mod:`gnnbridge.core.models.instance`): saved once, named by content, beside the graphs; the
    backend is the library whose idiom the model is written in (``backend`` if it is that one)."""
    if not isinstance(model, nn.Module):
        raise ConfigError(
            f"model={type(model).__module__}.{type(model).__qualname__} is not a torch.nn.Module; give the "
            "model you built (an instance), or a name or import path as model.arch."
        )
    takers = [name for name in backends.names() if backends.get(name).adopt_model(model) is not None]
    name = f"model (class '{type(model).__qualname__}', forward({', '.join(instance.forward_names(model))}))"
    if not takers:
        raise ConfigError(f"{name} is in no library's idiom gnnbridge trains: {instance.IDIOMS}.")
    if backend is not None and backend not in takers:
        raise ConfigError(
            f"{name} is written for {', '.join(takers)}, not --backend {backend}; use --backend {takers[0]}."
        )
    try:
        payload = instance.dump(model)
    except Exception as exc:  # noqa: BLE001 - whatever the model holds that cannot be pickled
        raise ConfigError(
            f"{name} cannot be saved for the ranks and later runs ({type(exc).__name__}: {exc})."
        ) from None
    path = environ.data_root() / FOLDER / f"model-{hashlib.blake2b(payload, digest_size=10).hexdigest()}.pkl"
    if not path.is_file():
        _write_bytes(path, payload)
    return instance.PREFIX + str(path), backend or takers[0]


def _write(path: Path, arrays: dict[str, np.ndarray]) -> None:
    _write_bytes(path, lambda f: np.savez(f, **arrays))


def _write_bytes(path: Path, content) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        files.replace(path, content)
    except OSError as exc:
        raise OutputPathError(
            f"Cannot write '{path}' ({exc.strerror or exc}); point {environ.DATA_ROOT} at a writable folder "
            "with room for it."
        ) from None
