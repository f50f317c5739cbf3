"""PyG's own ``NeighborLoader`` behind the :class:`~gnnbridge.core.interfaces.Sampler` contract.

Core chooses the seed batches (equal counts on every rank); the loader is handed exactly those
batches through ``batch_sampler``. One ``torch_geometric.sampler.NeighborSampler`` is built
per store and reused, so the CSC conversion happens once, not every epoch. The loader's graph
carries no features (core gathers ``x[n_id]`` itself, once).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from gnnbridge.core.contracts.interfaces import GraphStore, Sampler
from gnnbridge.core.records.batches import MiniBatch
from gnnbridge.core.sampling.seeds import derived_seed


class PygNeighborLoaderSampler(Sampler):
    def __init__(self, store: GraphStore, fanouts: list[int]):
        super().__init__(store, fanouts)
        from torch_geometric.sampler import NeighborSampler

        self._neighbor_sampler = NeighborSampler(store.native, num_neighbors=list(fanouts))

    def reseed(self, seed: int, epoch: int, rank: int) -> None:
        # pyg-lib and torch-sparse draw from torch's global generator.
        torch.manual_seed(derived_seed(seed, epoch, rank, stream=2))

    def loader(self, batches: list[torch.Tensor]) -> Iterable[MiniBatch]:
        from torch_geometric.loader import NeighborLoader

        if not batches:
            return
        seeds = torch.cat(batches)
        bounds = torch.tensor([0] + [b.numel() for b in batches]).cumsum(0).tolist()
        index_batches = [list(range(lo, hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]
        loader = NeighborLoader(
            self.store.native,
            num_neighbors=list(self.fanouts),
            input_nodes=seeds,
            batch_sampler=index_batches,
            neighbor_sampler=self._neighbor_sampler,
        )
        for batch in loader:
            yield MiniBatch(batch.n_id[: batch.batch_size], batch.n_id, batch)
