"""Graph classification with PyG: its ``DataLoader`` over per-graph views, GIN's neighbour sum
with PyG's ``GINConv`` and its global pooling."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from gnnbridge.core.config import ModelSpec
from gnnbridge.core.models.gin import GIN
from gnnbridge.core.models.gine import GINE
from gnnbridge.core.records.batches import MiniBatch
from gnnbridge.core.records.collection import GraphCollection
from gnnbridge.core.sampling.adapters import LibraryGraphLoader


class GraphViews(torch.utils.data.Dataset):
    """Graph ``g`` of the shared collection as a ``Data`` (edge ids shifted to start at 0).

    Items carry the nodes' collection ids (``n_id``) instead of features: core gathers the
    features of a whole batch at once, as it does for node tasks, and times it separately.
    They are built once, when the rank sets up (as a hand-written script builds its dataset
    list before training): a ``Data`` costs ~50 us to create, half the cost of a batch.
    """

    def __init__(self, data: GraphCollection):
        from torch_geometric.data import Data

        node_ptr, edge_ptr = data.node_ptr.tolist(), data.edge_ptr.tolist()
        features = data.edge_attr
        self.items = [
            Data(
                edge_index=data.edge_index[:, edge_ptr[g] : edge_ptr[g + 1]] - node_ptr[g],
                n_id=torch.arange(node_ptr[g], node_ptr[g + 1]),
                graph_id=torch.tensor([g]),
                num_nodes=node_ptr[g + 1] - node_ptr[g],
                **({"edge_attr": features[edge_ptr[g] : edge_ptr[g + 1]]} if features is not None else {}),
            )
            for g in range(data.num_graphs)
        ]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, g: int):
        return self.items[g]


class PygGraphLoader(LibraryGraphLoader):
    """``torch_geometric.loader.DataLoader`` with core's batches as its ``batch_sampler``."""

    def __init__(self, store, to_native):
        super().__init__(store, to_native)
        from torch_geometric.loader import DataLoader  # imported at setup, not in epoch 1's time

        self._loader_class = DataLoader

    def _library_loader(self, batches: list[list[int]]) -> Iterable[MiniBatch]:
        for batch in self._loader_class(self.views, batch_sampler=batches):
            yield MiniBatch(batch.graph_id, batch.n_id, batch)


class PygGIN(GIN):
    def __init__(self, spec: ModelSpec, in_dim: int, out_dim: int):
        super().__init__(spec, in_dim, out_dim)
        from torch_geometric.nn import GINConv

        # The MLP stays in core (see gnnbridge.core.models.gin); the conv only sums neighbours.
        self.convs = nn.ModuleList(GINConv(nn.Identity(), eps=0.0) for _ in range(spec.layers))

    def aggregate(self, index: int, graph, h: torch.Tensor) -> torch.Tensor:
        return self.convs[index](h, graph.edge_index)

    def readout(self, graph, h: torch.Tensor) -> torch.Tensor:
        from torch_geometric.nn import global_add_pool, global_mean_pool

        pool = global_add_pool if self.spec.pooling == "sum" else global_mean_pool
        return pool(h, graph.batch, size=graph.num_graphs)


class PygGINE(GINE, PygGIN):
    """GINE for graph tasks (:mod:`gnnbridge.core.models.gine`): PyG's ``GINEConv`` sums, GIN's
    readout pools."""

    def __init__(self, spec: ModelSpec, in_dim: int, out_dim: int, edge_width: int):
        super().__init__(spec, in_dim, out_dim, edge_width)
        from torch_geometric.nn import GINEConv

        self.convs = nn.ModuleList(GINEConv(nn.Identity(), eps=0.0) for _ in range(spec.layers))

    def aggregate(self, index: int, graph, h: torch.Tensor) -> torch.Tensor:
        return self.convs[index](h, graph.edge_index, self.edge_maps[index](graph.edge_attr))
