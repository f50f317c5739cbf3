"""A user's PyG model instance (``forward(x, edge_index)``) trained as PyG's ``NeighborLoader``
tutorials train it: the model runs on the whole sampled subgraph (every sampled node and edge, the
seeds first) and the seeds' rows are scored (:mod:`gnnbridge.core.models.instance`). For graph
classification it gets a batch of whole graphs as PyG's ``DataLoader`` gives one, with ``batch``
(each node's graph) to pool by, and returns a row per graph."""

from __future__ import annotations

from torch import nn

from gnnbridge.core.models.instance import UserModel, idiom


class PygUserModel(UserModel):
    def forward(self, graph, x):
        x = self.rows(x)
        batch = getattr(graph, "batch", None)
        if batch is not None:  # whole graphs (graph classification): a row per graph
            return self.user_model(x, graph.edge_index, batch=batch)[: graph.num_graphs]
        return self.user_model(x, graph.edge_index)[: graph.batch_size]


def adopt(model: nn.Module) -> nn.Module | None:
    return PygUserModel(model) if idiom(model) == "pyg" else None
