"""Samplers built from core pieces and backend converters: what a backend reuses instead of
writing its own.

* :class:`CoreSampler`: the core neighbour sampler; the backend converts each
  :class:`SampledSubgraph` into its native graph.
* :class:`CorePacker`: graph batches cut out by core, converted by the backend.
* :class:`LibraryGraphLoader`: a library's own graph loader, driven by core's rank-sharded batches,
  reading the per-graph views a :class:`CollectionStore` builds on first use.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any

import torch

from gnnbridge.core.contracts.interfaces import GraphStore, Sampler
from gnnbridge.core.records.batches import MiniBatch, with_edge_features
from gnnbridge.core.records.collection import GraphCollection, pack
from gnnbridge.core.sampling.neighbors import NeighborSampler
from gnnbridge.core.sampling.seeds import epoch_generator


class CollectionStore(GraphStore):
    """A graph collection with the backend's per-graph view of it (what its loader reads).

    The view is made on first use: core's packer never reads it, and building thousands of
    per-graph library objects takes seconds per rank.
    """

    def __init__(self, data: GraphCollection, make_native: Callable[[GraphCollection], Any]):
        super().__init__(data)
        self._make_native = make_native
        self._native = None

    @property
    def native(self) -> Any:
        if self._native is None:
            self._native = self._make_native(self.data)
        return self._native


class CoreSampler(Sampler):
    """A framework-neutral sampler behind any backend: core samples, the backend converts.

    ``to_native`` is the backend's :meth:`Backend.from_sampled`; ``impl`` is anything with
    ``sample(seeds, generator) -> SampledSubgraph`` (core's :class:`NeighborSampler` by default,
    or a plugin's). Randomness comes from a generator keyed on (seed, epoch, rank), so a run is
    reproducible on any number of workers.
    """

    def __init__(self, store: GraphStore, fanouts: list[int], to_native, impl: Any = None):
        super().__init__(store, fanouts)
        data = store.data
        self._sampler = impl if impl is not None else NeighborSampler(data.indptr, data.indices, fanouts)
        self._to_native = to_native
        self._generator = epoch_generator(0, 0, 0, stream=1)

    def reseed(self, seed: int, epoch: int, rank: int) -> None:
        self._generator = epoch_generator(seed, epoch, rank, stream=1)

    def loader(self, batches: list[torch.Tensor]) -> Iterable[MiniBatch]:
        for seeds in batches:
            sub = with_edge_features(self._sampler.sample(seeds, self._generator), self.store.data)
            yield MiniBatch(sub.seeds, sub.node, self._to_native(sub))


class CorePacker(Sampler):
    """Graph batches cut out by core (:func:`~gnnbridge.core.records.collection.pack`), converted by
    the backend: vectorised, and the same batches on every backend."""

    def __init__(self, store: GraphStore, to_native):
        super().__init__(store)
        self._to_native = to_native

    def reseed(self, seed: int, epoch: int, rank: int) -> None:
        """Whole graphs: nothing is random beyond which graphs core put in each batch."""

    def loader(self, batches: list[torch.Tensor]) -> Iterable[MiniBatch]:
        for graph_ids in batches:
            packed = pack(self.store.data, graph_ids)
            yield MiniBatch(graph_ids, packed.node, self._to_native(packed))


class LibraryGraphLoader(Sampler, ABC):
    """A library's own graph loader driven by core's batches (rank-sharded, reshuffled by
    (seed, epoch), equal counts on every rank: what ``DistributedSampler`` + ``set_epoch``
    would give, without its padded duplicates).

    Libraries cannot collate an empty batch, which equal counts occasionally need (3 graphs,
    2 ranks, batch size 1): those come from core's packer, so DDP still sees the step.
    """

    def __init__(self, store: GraphStore, to_native):
        super().__init__(store)
        self._empty = CorePacker(store, to_native)
        self.views = store.native  # built now, at setup, not inside the first epoch's time

    def reseed(self, seed: int, epoch: int, rank: int) -> None:
        """Whole graphs: nothing is random beyond which graphs core put in each batch."""

    @abstractmethod
    def _library_loader(self, batches: list[list[int]]) -> Iterable[MiniBatch]:
        """One MiniBatch per (non-empty) list of graph ids, from the library's loader."""

    def loader(self, batches: list[torch.Tensor]) -> Iterable[MiniBatch]:
        full = iter(self._library_loader([b.tolist() for b in batches if b.numel()]))
        for graph_ids in batches:
            yield next(full) if graph_ids.numel() else next(iter(self._empty.loader([graph_ids])))
