"""GraphSAGE, GCN and GAT from a neutral :class:`ModelSpec`, with PyG layers.

Training batches carry per-hop node and edge counts, so layer ``i`` is trimmed to the nodes
and edges the remaining layers still need (PyG's ``trim_to_layer``): the same work DGL's
blocks do, instead of running every layer on the whole L-hop subgraph.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gnnbridge.core.config import ModelSpec
from gnnbridge.core.interfaces import GNNModel

# neutral name -> PyG parameter name, per architecture
NEUTRAL_NAMES = {
    "sage": {"neigh.weight": "lin_l.weight", "root.weight": "lin_r.weight", "bias": "lin_l.bias"},
    "gcn": {"weight": "lin.weight", "bias": "bias"},
    "gat": {"weight": "lin.weight", "att_src": "att_src", "att_dst": "att_dst", "bias": "bias"},
}


class PygGNN(GNNModel):
    def __init__(self, spec: ModelSpec, in_dim: int, out_dim: int):
        super().__init__()
        from torch_geometric.nn import GATConv, GCNConv, SAGEConv

        self.spec = spec
        self.convs = nn.ModuleList()
        for d_in, d_out, heads in spec.layer_dims(in_dim, out_dim):
            if spec.arch == "sage":
                conv = SAGEConv(d_in, d_out, aggr=spec.aggr)
            elif spec.arch == "gcn":
                conv = GCNConv(d_in, d_out)
            else:
                conv = GATConv(d_in, d_out, heads=heads)
            self.convs.append(conv)

    def _activate(self, index: int, h: torch.Tensor) -> torch.Tensor:
        if index == self.spec.layers - 1:
            return h
        return F.dropout(F.relu(h), p=self.spec.dropout, training=self.training)

    def forward(self, graph, x: torch.Tensor) -> torch.Tensor:
        from torch_geometric.utils import trim_to_layer

        edge_index = graph.edge_index
        nodes, edges = getattr(graph, "num_sampled_nodes", None), getattr(graph, "num_sampled_edges", None)
        for i, conv in enumerate(self.convs):
            if nodes is not None and edges is not None:
                x, edge_index, _ = trim_to_layer(i, nodes, edges, x, edge_index)
            x = self._activate(i, conv(x, edge_index))
        return x[: graph.batch_size]

    def layer_forward(self, index: int, graph, x: torch.Tensor) -> torch.Tensor:
        conv = self.convs[index]
        n_dst = graph.batch_size
        if self.spec.arch == "gcn":  # GCNConv has no bipartite form
            h = conv(x, graph.edge_index)[:n_dst]
        else:
            h = conv((x, x[:n_dst]), graph.edge_index, size=(x.shape[0], n_dst))
        return self._activate(index, h)

    def neutral_parameters(self) -> dict[str, torch.Tensor]:
        names = NEUTRAL_NAMES[self.spec.arch]
        out = {}
        for i, conv in enumerate(self.convs):
            params = dict(conv.named_parameters())
            for neutral, native in names.items():
                out[f"layers.{i}.{neutral}"] = params[native]
        return out
