"""A user's PyG model instance (``forward(x, edge_index)``) trained as PyG's ``NeighborLoader``
tutorials train it: the model runs on the whole sampled subgraph (every sampled node and edge, the
seeds first) and the seeds' rows are scored (:mod:`gnnbridge.core.models.instance`)."""

from __future__ import annotations

from torch import nn

from gnnbridge.core.interfaces import IndexedRows
from gnnbridge.core.models.instance import idiom


class PygUserModel(nn.Module):
    def __init__(self, user_model: nn.Module):
        super().__init__()
        self.user_model = user_model

    def forward(self, graph, x):
        x = x.rows() if isinstance(x, IndexedRows) else x
        return self.user_model(x, graph.edge_index)[: graph.batch_size]


def adopt(model: nn.Module) -> nn.Module | None:
    return PygUserModel(model) if idiom(model) == "pyg" else None
