"""PyG's model zoo by class name: ``model.arch=GraphSAGE`` (or GCN, GAT, GIN, PNA, EdgeCNN) builds
``torch_geometric.nn.models.<name>`` with ``model.hidden``, ``model.layers``, ``model.dropout`` and
every ``model.options`` entry as its keyword arguments (``jk``, ``norm``, ``act``, ``v2`` ...).

These models take ``(x, edge_index)`` and return a row per node. On node tasks they get core's
per-hop counts (``num_sampled_nodes_per_hop`` / ``num_sampled_edges_per_hop``), so each layer
computes only what the next one reads, as the neutral models do; with ``jk`` (which concatenates
every layer's full output) trimming is off, and for GCN too: ``GCNConv`` normalises by degrees
counted inside the batch, which trimming would change (use the built-in ``gcn`` for GCN
normalised by full-graph degrees, whose full-neighbourhood evaluation is exact). On graph tasks
the node outputs are pooled per graph by ``model.pooling``. PNA's required ``deg`` histogram is
computed from the dataset, and its aggregators and scalers default to the PNA paper's.
"""

from __future__ import annotations

import torch
from torch import nn

from gnnbridge.core.errors import ConfigError
from gnnbridge.core.records.collection import GraphCollection

ZOO = {
    "GraphSAGE": "PyG's torch_geometric.nn.models.GraphSAGE (options: jk, norm, act, project ...)",
    "GCN": "PyG's torch_geometric.nn.models.GCN (options: jk, norm, act, improved ...)",
    "GAT": "PyG's torch_geometric.nn.models.GAT (options: v2, heads, jk, norm ...)",
    "GIN": "PyG's torch_geometric.nn.models.GIN (options: jk, norm, train_eps ...)",
    "PNA": "PyG's torch_geometric.nn.models.PNA (deg from the data; options: aggregators, scalers, towers ...)",
    "EdgeCNN": "PyG's torch_geometric.nn.models.EdgeCNN (options: jk, norm, aggr ...)",
}
UNTRIMMED = ("GCN",)  # normalised by in-batch degrees: trimming the batch changes the function
PNA_DEFAULTS = {"aggregators": ["mean", "min", "max", "std"], "scalers": ["identity", "amplification", "attenuation"]}


class ZooModel(nn.Module):
    """A zoo model behind gnnbridge's ``forward(graph, x)``; its parameters live under ``net.``."""

    def __init__(self, net: nn.Module, graph_task: bool, pooling: str, trim: bool = True):
        super().__init__()
        self.net = net
        self.graph_task = graph_task
        self.pooling = pooling
        self.trim = trim and net.jk_mode is None

    def forward(self, graph, x: torch.Tensor) -> torch.Tensor:
        if self.graph_task:
            from torch_geometric.nn import global_add_pool, global_mean_pool

            pool = global_add_pool if self.pooling == "sum" else global_mean_pool
            return pool(self.net(x, graph.edge_index, batch=graph.batch), graph.batch, size=graph.num_graphs)
        nodes = getattr(graph, "num_sampled_nodes", None)
        edges = getattr(graph, "num_sampled_edges", None)
        trim = self.trim and nodes is not None and edges is not None
        out = self.net(
            x,
            graph.edge_index,
            num_sampled_nodes_per_hop=list(nodes) if trim else None,
            num_sampled_edges_per_hop=list(edges) if trim else None,
        )
        return out[: graph.batch_size]


# The zoo classes' own arguments that gnnbridge fills: from the data, or from a model.* key.
SET_BY_GNNBRIDGE = {
    "in_channels": "the data (its feature width)",
    "out_channels": "the data (its class count)",
    "hidden_channels": "model.hidden",
    "num_layers": "model.layers",
    "dropout": "model.dropout",
}


def zoo_builder(name: str):
    def build(in_dim, out_dim, hidden, layers, dropout, pooling, data, **options):
        import torch_geometric.nn.models as zoo

        for key in options:
            if key in SET_BY_GNNBRIDGE:
                source = SET_BY_GNNBRIDGE[key]
                fix = f"set {source} instead (--set {source}=...)" if source.startswith("model.") else "remove it"
                raise ConfigError(f"model.options.{key} of {name} is set by gnnbridge from {source}; {fix}.")
        if name == "PNA":
            options = {**PNA_DEFAULTS, "deg": degree_histogram(data), **options}
        net = getattr(zoo, name)(in_dim, hidden, layers, out_channels=out_dim, dropout=dropout, **options)
        return ZooModel(net, isinstance(data, GraphCollection), pooling, trim=name not in UNTRIMMED)

    build.__name__ = name
    build.builds = f"torch_geometric.nn.models.{name}"  # model.arch=torch_geometric.nn.models:NAME is this model
    return build


def degree_histogram(data) -> torch.Tensor:
    """How many nodes have each in-degree (PNA scales its aggregations by it)."""
    if isinstance(data, GraphCollection):
        in_degree = torch.bincount(data.edge_index[1], minlength=data.x.shape[0])
    else:
        in_degree = data.indptr.diff()
    return torch.bincount(in_degree)
