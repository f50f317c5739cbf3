"""A library's own dataset class (``--dataset pyg:FakeDataset``) as a run's data: the same data
in every process that opens the run, or a refusal.

A run's data is opened again and again: by each node of a job, by ``evaluate`` and ``predict``,
by ``--resume`` and a restarted rank, days later. A file gives the same arrays each time; a
class need not: PyG's ``FakeDataset`` draws new graphs from torch's global generator whenever it
is built, and a class's files or its library's version may change under a run. So:

* the class is built, and its object read, under the run's seed (``train.seed``: torch's,
  numpy's and Python's global generators seeded, and put back afterwards), so that a class that
  draws at random draws the same graphs in every process (:func:`drawn_from`);
* what it gave is pinned by the content hash of its arrays (the one that names a graph handed
  over in memory, :func:`~gnnbridge.core.storage.formats.digest`): training records it as
  ``dataset.digest`` in the run's config, and every later opening from that config must give
  the same hash (:func:`pin`), else one line says what differs and what to do.

A deterministic class (Planetoid, a TU dataset) gives the same hash every time and never notices.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import numpy as np
import torch

from gnnbridge.core.config.schema import DatasetConfig
from gnnbridge.core.errors import DataError


@contextlib.contextmanager
def drawn_from(seed: int) -> Iterator[None]:
    """Inside: the global generators a library's class may draw from start from ``seed``;
    outside, they are where they were (the caller's own streams are not disturbed)."""
    python, numpy = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed)
        try:
            yield
        finally:
            random.setstate(python)
            np.random.set_state(numpy)


def pin(config: DatasetConfig, name: str, digest: str, seed: int) -> None:
    """``digest`` (what class ``name`` gave under ``seed``) is the data ``config`` names: set in a
    config that names none (training's, which the run then records), checked in one that does (a
    run's, opened again)."""
    if config.digest is None:
        config.digest = digest
        return
    if config.digest != digest:
        raise DataError(
            f"Dataset '{name}' gave other data than the run was trained on (content {digest}, the run's "
            f"dataset.digest {config.digest}): its options, train.seed={seed}, its files or the library's version "
            "differ from the run's. Open it as the run did; for data that must never change, train on a file of "
            "it (numpy.savez, or gnnbridge.run(dataset=OBJECT), which keeps its arrays); to score this data "
            "anyway, --set dataset.digest= (evaluate, predict)."
        )


def named(exc: DataError, name: str) -> DataError:
    """A graph reader's refusal of the object class ``name`` gave, said of ``name``: the readers
    describe what they read as ``dataset (a torch_geometric Data)``, not knowing it came by name."""
    text = str(exc)
    if text.startswith("dataset ("):
        return type(exc)(f"dataset '{name}' ({text.removeprefix('dataset (')}")
    return type(exc)(f"dataset '{name}': {text}")
