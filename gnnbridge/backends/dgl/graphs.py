"""Graph classification with DGL: its ``GraphDataLoader`` over per-graph ``DGLGraph`` views,
GIN's neighbour sum with DGL's ``GINConv`` and its ``SumPooling`` / ``AvgPooling``."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from gnnbridge.backends.dgl.blocks import EDGE_FEATURES
from gnnbridge.backends.dgl.compat import import_dgl
from gnnbridge.core.config import ModelSpec
from gnnbridge.core.models.gin import GIN
from gnnbridge.core.models.gine import GINE
from gnnbridge.core.records.batches import MiniBatch
from gnnbridge.core.records.collection import GraphCollection
from gnnbridge.core.sampling.adapters import LibraryGraphLoader


class GraphViews(torch.utils.data.Dataset):
    """``(DGLGraph, g)`` for graph ``g`` of the shared collection, as the tutorial's dataset
    yields ``(graph, label)``; nodes carry their collection ids in ``ndata[dgl.NID]`` (core
    gathers features). The graphs are built once, when the rank sets up (as the tutorial
    builds its dataset before training): a ``DGLGraph`` costs far more to create than to batch.
    """

    def __init__(self, data: GraphCollection):
        dgl = import_dgl()
        node_ptr, edge_ptr = data.node_ptr.tolist(), data.edge_ptr.tolist()
        self.items = []
        for g in range(data.num_graphs):
            src, dst = data.edge_index[:, edge_ptr[g] : edge_ptr[g + 1]] - node_ptr[g]
            graph = dgl.graph((src, dst), num_nodes=node_ptr[g + 1] - node_ptr[g])
            graph.ndata[dgl.NID] = torch.arange(node_ptr[g], node_ptr[g + 1])
            if data.edge_attr is not None:
                graph.edata[EDGE_FEATURES] = data.edge_attr[edge_ptr[g] : edge_ptr[g + 1]]
            self.items.append((graph, g))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, g: int):
        return self.items[g]


class DglGraphLoader(LibraryGraphLoader):
    """``dgl.dataloading.GraphDataLoader`` with core's batches as its ``batch_sampler`` (the
    equivalent of ``use_ddp=True`` + ``set_epoch``, with equal counts and no padding)."""

    def __init__(self, store, to_native):
        super().__init__(store, to_native)
        self._nid = import_dgl().NID
        from dgl.dataloading import GraphDataLoader  # imported at setup, not in epoch 1's time

        self._loader_class = GraphDataLoader

    def _library_loader(self, batches: list[list[int]]) -> Iterable[MiniBatch]:
        for graph, graph_ids in self._loader_class(self.views, batch_sampler=batches):
            yield MiniBatch(graph_ids, graph.ndata[self._nid], graph)


class DglGIN(GIN):
    def __init__(self, spec: ModelSpec, in_dim: int, out_dim: int):
        super().__init__(spec, in_dim, out_dim)
        import_dgl()
        from dgl.nn import AvgPooling, GINConv, SumPooling

        # The MLP stays in core (see gnnbridge.core.models.gin); the conv only sums neighbours.
        self.convs = nn.ModuleList(GINConv(None, "sum", init_eps=0.0) for _ in range(spec.layers))
        self.pool = SumPooling() if spec.pooling == "sum" else AvgPooling()

    def aggregate(self, index: int, graph, h: torch.Tensor) -> torch.Tensor:
        return self.convs[index](graph, h)

    def readout(self, graph, h: torch.Tensor) -> torch.Tensor:
        return self.pool(graph, h)


class DglGINE(GINE, DglGIN):
    """GINE for graph tasks (:mod:`gnnbridge.core.models.gine`): DGL's ``GINEConv`` sums, GIN's
    readout pools."""

    def __init__(self, spec: ModelSpec, in_dim: int, out_dim: int, edge_width: int):
        super().__init__(spec, in_dim, out_dim, edge_width)
        from dgl.nn import GINEConv

        self.convs = nn.ModuleList(GINEConv(None, init_eps=0.0) for _ in range(spec.layers))

    def aggregate(self, index: int, graph, h: torch.Tensor) -> torch.Tensor:
        return self.convs[index](graph, h, self.edge_maps[index](graph.edata[EDGE_FEATURES]))
