"""Graph classification with DGL: its ``GraphDataLoader`` over per-graph ``DGLGraph`` views,
GIN's neighbour sum with DGL's ``GINConv`` and its ``SumPooling`` / ``AvgPooling``."""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from gnnbridge.backends.dgl.compat import import_dgl
from gnnbridge.core.collection import GraphCollection
from gnnbridge.core.config import ModelSpec
from gnnbridge.core.gin import GIN
from gnnbridge.core.interfaces import LibraryGraphLoader, MiniBatch


class GraphViews(torch.utils.data.Dataset):
    """``(DGLGraph, g)`` for graph ``g`` of the shared collection, as the tutorial's dataset
    yields ``(graph, label)``; nodes carry their collection ids in ``ndata[dgl.NID]`` (core
    gathers features). Graphs are built on first use and kept: a ``DGLGraph`` costs far more
    to create than a PyG ``Data``, and every epoch reads every training graph again."""

    def __init__(self, data: GraphCollection):
        self.data = data
        self._graphs: list = [None] * data.num_graphs

    def __len__(self) -> int:
        return self.data.num_graphs

    def __getitem__(self, g: int):
        if self._graphs[g] is None:
            dgl = import_dgl()
            d = self.data
            n0, n1 = int(d.node_ptr[g]), int(d.node_ptr[g + 1])
            src, dst = d.edge_index[:, int(d.edge_ptr[g]):int(d.edge_ptr[g + 1])] - n0
            graph = dgl.graph((src, dst), num_nodes=n1 - n0)
            graph.ndata[dgl.NID] = torch.arange(n0, n1)
            self._graphs[g] = graph
        return self._graphs[g], g


class DglGraphLoader(LibraryGraphLoader):
    """``dgl.dataloading.GraphDataLoader`` with core's batches as its ``batch_sampler`` (the
    equivalent of ``use_ddp=True`` + ``set_epoch``, with equal counts and no padding)."""

    def _library_loader(self, batches: list[list[int]]) -> Iterable[MiniBatch]:
        dgl = import_dgl()
        from dgl.dataloading import GraphDataLoader

        for graph, graph_ids in GraphDataLoader(self.store.native, batch_sampler=batches):
            yield MiniBatch(graph_ids, graph.ndata[dgl.NID], graph)


class DglGIN(GIN):
    def __init__(self, spec: ModelSpec, in_dim: int, out_dim: int):
        super().__init__(spec, in_dim, out_dim)
        import_dgl()
        from dgl.nn import AvgPooling, GINConv, SumPooling

        # The MLP stays in core (see gnnbridge.core.gin); the conv only sums neighbours.
        self.convs = nn.ModuleList(GINConv(None, "sum", init_eps=0.0) for _ in range(spec.layers))
        self.pool = SumPooling() if spec.pooling == "sum" else AvgPooling()

    def aggregate(self, index: int, graph, h: torch.Tensor) -> torch.Tensor:
        return self.convs[index](graph, h)

    def readout(self, graph, h: torch.Tensor) -> torch.Tensor:
        return self.pool(graph, h)
