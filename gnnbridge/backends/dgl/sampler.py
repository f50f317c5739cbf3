"""DGL's own ``NeighborSampler`` (or any ``BlockSampler`` a plugin registers, like the custom
multi-layer sampler of DGL's tutorials) behind the :class:`~gnnbridge.core.interfaces.Sampler`
contract.

DGL lists fanouts from the input layer to the output layer; gnnbridge (like PyG) lists them
from the seeds outwards. The list is reversed here, once, so ``fanouts=[25, 10]`` means 25
neighbours per seed and 10 per neighbour on both backends.

Seeds are batched by core (equal counts per rank) and handed to ``sample`` directly; DGL's
``DataLoader`` would re-batch them. DGL does not bounds-check node ids (a bad id corrupts the
heap), so ids are checked here before DGL sees them.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from gnnbridge.backends.dgl.compat import import_dgl
from gnnbridge.core.contracts.interfaces import GraphStore, Sampler
from gnnbridge.core.errors import DataError
from gnnbridge.core.records.batches import MiniBatch
from gnnbridge.core.sampling.seeds import derived_seed


class DglNeighborSampler(Sampler):
    """``block_sampler``: a ``dgl.dataloading.BlockSampler`` (default: DGL's ``NeighborSampler``
    with ``fanouts``); its ``sample(graph, seeds)`` gives ``(input_nodes, output_nodes, blocks)``."""

    def __init__(self, store: GraphStore, fanouts: list[int], block_sampler=None):
        super().__init__(store, fanouts)
        dgl = import_dgl()
        self._dgl = dgl
        self._sampler = block_sampler or dgl.dataloading.NeighborSampler(list(reversed(fanouts)))
        self._num_nodes = store.native.num_nodes()

    def reseed(self, seed: int, epoch: int, rank: int) -> None:
        self._dgl.seed(derived_seed(seed, epoch, rank, stream=3))

    def loader(self, batches: list[torch.Tensor]) -> Iterable[MiniBatch]:
        graph = self.store.native
        for seeds in batches:
            if seeds.numel() and (int(seeds.min()) < 0 or int(seeds.max()) >= self._num_nodes):
                raise DataError(f"Seed node ids must lie in [0, {self._num_nodes}); got {int(seeds.max())}.")
            input_nodes, output_nodes, blocks = self._sampler.sample(graph, seeds)
            yield MiniBatch(output_nodes, input_nodes, blocks)
