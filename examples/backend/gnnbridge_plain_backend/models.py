"""GraphSAGE (mean) and GCN in plain torch, laid out as the neutral catalogue names them.

A layer's parameters carry the neutral names themselves (``neigh.weight``, ``root.weight`` and
``bias`` for GraphSAGE; ``weight`` and ``bias`` for GCN), so weights port to and from PyG and
DGL, and core starts them from the same initialisation as theirs for one seed.
"""

from __future__ import annotations

import torch
from torch import nn

from gnnbridge.backends.catalogue import LAYER_INIT
from gnnbridge.core.config import ModelSpec
from gnnbridge.core.contracts.interfaces import GNNModel
from gnnbridge.core.models.graphops import gcn_edge_weights, layer_bounds, layer_dims


class SAGELayer(nn.Module):
    """``neigh(mean of the in-neighbours' rows) + root(own row) + bias``."""

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.neigh = nn.Linear(d_in, d_out, bias=False)
        self.root = nn.Linear(d_in, d_out, bias=False)
        self.bias = nn.Parameter(torch.zeros(d_out))

    def forward(self, x, row, col, n_dst, n_id, degrees):
        total = x.new_zeros(n_dst, x.shape[1]).index_add_(0, col, x[row])
        count = torch.bincount(col, minlength=n_dst).clamp(min=1).unsqueeze(1)
        return self.neigh(total / count) + self.root(x[:n_dst]) + self.bias


class GCNLayer(nn.Module):
    """GCN normalised by full-graph degrees (core's :func:`gcn_edge_weights`), a self-loop per node."""

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_out, d_in))
        self.bias = nn.Parameter(torch.zeros(d_out))
        nn.init.xavier_uniform_(self.weight)

    def forward(self, x, row, col, n_dst, n_id, degrees):
        edge_w, loop_w = gcn_edge_weights(degrees, n_id, n_id[:n_dst], row, col)
        h = x @ self.weight.T
        out = h[:n_dst] * loop_w.unsqueeze(1)
        return out.index_add_(0, col, h[row] * edge_w.unsqueeze(1)) + self.bias


class PlainGNN(GNNModel):
    NEUTRAL_INIT = LAYER_INIT
    NEUTRAL_NAMES = {
        "sage": {"neigh.weight": "neigh.weight", "root.weight": "root.weight", "bias": "bias"},
        "gcn": {"weight": "weight", "bias": "bias"},
    }

    def __init__(self, spec: ModelSpec, in_dim: int, out_dim: int):
        super().__init__()
        if spec.arch == "sage" and spec.aggr != "mean":
            from gnnbridge.core.errors import ConfigError

            raise ConfigError(f"model.aggr={spec.aggr!r}: backend 'plain' aggregates by mean only; use model.aggr=mean")
        self.spec = spec
        layer = SAGELayer if spec.arch == "sage" else GCNLayer
        self.layers = nn.ModuleList(
            layer(d_in, d_out) for d_in, d_out, _ in layer_dims(spec.layers, spec.hidden, in_dim, out_dim)
        )

    def _layer_module(self, index: int) -> nn.Module:
        return self.layers[index]

    def forward(self, graph, x: torch.Tensor) -> torch.Tensor:
        """Layer ``i`` reads the nodes within ``L - i`` hops and computes those within ``L - i - 1``."""
        bounds = layer_bounds(graph.num_sampled_nodes, graph.num_sampled_edges, self.spec.layers)
        for i, (n_src, n_dst, n_edges) in enumerate(bounds):
            x = self._layer(i, x[:n_src], graph.row[:n_edges], graph.col[:n_edges], n_dst, graph.n_id[:n_src])
        return x

    def layer_forward(self, index: int, graph, x: torch.Tensor) -> torch.Tensor:
        return self._layer(index, x, graph.row, graph.col, graph.batch_size, graph.n_id)

    def _layer(self, index, x, row, col, n_dst, n_id):
        degrees = self.degrees() if self.spec.arch == "gcn" else None
        return self.activate(index, self.layers[index](x, row, col, n_dst, n_id, degrees))
