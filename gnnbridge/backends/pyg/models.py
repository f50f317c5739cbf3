"""GraphSAGE, GCN and GAT from a neutral :class:`ModelSpec`, with PyG layers.

Training batches carry per-hop node and edge counts, so each layer reads only the nodes and
edges it needs and computes only the nodes the next layer reads (a bipartite call on a prefix
of the batch): the same work DGL's blocks do. Running every layer on the whole L-hop subgraph
(or trimming its inputs but not its outputs) computes the first layer, its activation and its
dropout for about twice as many nodes at fanouts [25, 10].
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
        nodes = getattr(graph, "num_sampled_nodes", None)
        edges = getattr(graph, "num_sampled_edges", None)
        if nodes is None or edges is None:  # an unlayered batch: every layer on every node
            for i in range(self.spec.layers):
                x = self._layer(i, x, graph.edge_index, x.shape[0])
            return x[: graph.batch_size]
        node_bounds = torch.tensor(nodes).cumsum(0).tolist()
        edge_bounds = torch.tensor(edges).cumsum(0).tolist()
        for i in range(self.spec.layers):
            # Layer i computes the nodes within L-i-1 hops of the seeds from those within L-i
            # hops, over the edges of hops 1..L-i (a prefix: samplers emit hop by hop).
            reach = self.spec.layers - i
            x = self._layer(i, x[: node_bounds[reach]], graph.edge_index[:, : edge_bounds[reach - 1]],
                            node_bounds[reach - 1])
        return x

    def layer_forward(self, index: int, graph, x: torch.Tensor) -> torch.Tensor:
        return self._layer(index, x, graph.edge_index, graph.batch_size)

    def _layer(self, index: int, x: torch.Tensor, edge_index: torch.Tensor, n_dst: int) -> torch.Tensor:
        """Layer ``index`` for the first ``n_dst`` nodes of ``x`` (the dst nodes lead the src nodes)."""
        conv = self.convs[index]
        if self.spec.arch == "gcn":  # GCNConv has no bipartite form
            h = conv(x, edge_index)[:n_dst]
        else:
            h = conv((x, x[:n_dst]), edge_index, size=(x.shape[0], n_dst))
        return self._activate(index, h)

    def neutral_parameters(self) -> dict[str, torch.Tensor]:
        names = NEUTRAL_NAMES[self.spec.arch]
        out = {}
        for i, conv in enumerate(self.convs):
            params = dict(conv.named_parameters())
            for neutral, native in names.items():
                out[f"layers.{i}.{neutral}"] = params[native]
        return out
