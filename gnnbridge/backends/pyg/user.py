"""A user's PyG model instance (``forward(x, edge_index)``) trained as PyG's ``NeighborLoader``
tutorials train it: the model runs on the whole sampled subgraph (every sampled node and edge, the
seeds first) and the seeds' rows are scored (:mod:`gnnbridge.core.models.instance`). A forward
that takes ``edge_attr`` (a ``GINEConv`` model's) gets the batch's edge features there, a row per
edge of ``edge_index``. For graph
classification it gets a batch of whole graphs as PyG's ``DataLoader`` gives one, with ``batch``
(each node's graph) to pool by, and returns a row per graph."""

from __future__ import annotations

from torch import nn

from gnnbridge.core.models.instance import EDGE_FEATURES, UserModel, idiom, takes


class PygUserModel(UserModel):
    def __init__(self, user_model: nn.Module):
        super().__init__(user_model)
        self.reads_edges = takes(user_model, EDGE_FEATURES)  # forward(x, edge_index, edge_attr)

    def forward(self, graph, x):
        x = self.rows(x)
        features = getattr(graph, "edge_attr", None) if self.reads_edges else None
        edges = {} if features is None else {EDGE_FEATURES: features}  # a row per edge of edge_index
        batch = getattr(graph, "batch", None)
        if batch is not None:  # whole graphs (graph classification): a row per graph
            return self.user_model(x, graph.edge_index, batch=batch, **edges)[: graph.num_graphs]
        return self.user_model(x, graph.edge_index, **edges)[: graph.batch_size]


def adopt(model: nn.Module) -> nn.Module | None:
    return PygUserModel(model) if idiom(model) == "pyg" else None
