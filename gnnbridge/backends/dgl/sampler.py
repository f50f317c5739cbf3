"""DGL's own ``NeighborSampler`` (or any ``BlockSampler`` a plugin registers, like the custom
multi-layer sampler of DGL's tutorials) behind the :class:`~gnnbridge.core.interfaces.Sampler`
contract.

DGL lists fanouts from the input layer to the output layer; gnnbridge (like PyG) lists them
from the seeds outwards. The list is reversed here, once, so ``fanouts=[25, 10]`` means 25
neighbours per seed and 10 per neighbour on both backends.

Seeds are batched by core (equal counts per rank) and handed to ``sample`` directly; DGL's
``DataLoader`` would re-batch them. DGL does not bounds-check node ids (a bad id corrupts the
heap), so ids are checked here before DGL sees them.

Why not DGL's ``NeighborSampler`` as it is: with more than one OpenMP thread its draws are not
reproducible. Its blocks list their source nodes in an order that changes from run to run
(``sample_neighbors_fused``, and ``to_block``, fill a concurrent hash map), and the next hop
samples those nodes' neighbours in that order, each thread with its own random engine; and
``dgl.seed`` seeds those engines in a parallel loop that may hand both iterations to one thread,
leaving another thread's engine where the last batch left it (one run in ten drew other
neighbours, measured). The default experiment on 2,000 nodes and two threads, run twice: losses
3.389 and 3.290 after one epoch. :func:`neighbor_sampler` is DGL's unfused sampler run on one
thread, seeded on that thread (``dgl.seed`` per (seed, epoch, rank)): the very blocks DGL's own
sampler makes on one thread, on every run and whatever the rank's thread count. A plugin's
``BlockSampler`` is called on one thread too, for the same reason. The cost is
DGL's multi-threaded sampling: a rank's model and gather keep their threads, and a rank that
wants sampling beside them has ``placement.prefetch`` (a thread of its own).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable
from typing import Any

import torch

from gnnbridge.backends.dgl.blocks import EDGE_FEATURES
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
        self._sampler = block_sampler or neighbor_sampler(list(reversed(fanouts)))
        self._num_nodes = store.native.num_nodes()

    def reseed(self, seed: int, epoch: int, rank: int) -> None:
        with one_thread(self._dgl):  # the engine the one-thread draws use is seeded for certain
            self._dgl.seed(derived_seed(seed, epoch, rank, stream=3))

    def loader(self, batches: list[torch.Tensor]) -> Iterable[MiniBatch]:
        graph, features = self.store.native, self.store.data.edge_attr
        for seeds in batches:
            if seeds.numel() and (int(seeds.min()) < 0 or int(seeds.max()) >= self._num_nodes):
                raise DataError(f"Seed node ids must lie in [0, {self._num_nodes}); got {int(seeds.max())}.")
            with one_thread(self._dgl):  # a plugin's BlockSampler too draws from the seeded engine
                input_nodes, output_nodes, blocks = self._sampler.sample(graph, seeds)
            if features is not None:  # by the blocks' edge ids (the CSC positions, as in core)
                for block in blocks:
                    block.edata[EDGE_FEATURES] = features[block.edata[self._dgl.EID]]
            yield MiniBatch(output_nodes, input_nodes, blocks)


def neighbor_sampler(fanouts: list, **kwargs) -> Any:
    """DGL's ``NeighborSampler`` over ``fanouts`` (DGL's order: input layer first; ``kwargs`` are
    its own) whose blocks number their source nodes in a fixed order (see the module's docstring)."""
    return _ordered_sampler_class()(fanouts, fused=False, **kwargs)


@functools.cache
def _ordered_sampler_class() -> type:
    dgl = import_dgl()

    class OrderedNeighborSampler(dgl.dataloading.NeighborSampler):
        """``NeighborSampler``'s unfused path on one thread (see the module's docstring)."""

        def sample_blocks(self, g, seed_nodes, exclude_eids=None):
            with one_thread(dgl):
                return self._blocks(g, seed_nodes, exclude_eids)

        def _blocks(self, g, seed_nodes, exclude_eids):
            output_nodes, blocks = seed_nodes, []
            for fanout in reversed(self.fanouts):
                frontier = g.sample_neighbors(
                    seed_nodes,
                    fanout,
                    edge_dir=self.edge_dir,
                    prob=self.prob,
                    replace=self.replace,
                    output_device=self.output_device,
                    exclude_edges=exclude_eids,
                )
                block = dgl.to_block(frontier, seed_nodes)
                block.edata[dgl.EID] = frontier.edata[dgl.EID]
                seed_nodes = block.srcdata[dgl.NID]
                blocks.insert(0, block)
            return seed_nodes, output_nodes, blocks

    return OrderedNeighborSampler


@contextlib.contextmanager
def one_thread(dgl):
    """DGL's OpenMP calls from this thread on one thread (OpenMP's count is per calling thread, so
    other threads, and the sampling that precedes, keep theirs)."""
    threads = dgl.utils.get_num_threads()
    if threads == 1:
        yield
        return
    dgl.utils.set_num_threads(1)
    try:
        yield
    finally:
        dgl.utils.set_num_threads(threads)
