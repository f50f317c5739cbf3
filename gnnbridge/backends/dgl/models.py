"""GraphSAGE, GCN and GAT from a neutral :class:`ModelSpec`, with DGL layers on blocks.

Made to match the PyG backend layer for layer, so one spec means one model:

* GCN and GAT add self-loops to each block (PyG's ``GCNConv`` / ``GATConv`` add them by
  default); a block's dst nodes are the first of its src nodes, so loop ``i -> i`` is valid.
* GCN is a bias-free linear map, DGL's normalised aggregation, then a bias: PyG's order, and
  a weight stored ``[out, in]`` like PyG's (DGL's own ``GraphConv`` weight is ``[in, out]``).
* ``neutral_parameters`` names parameters the same way on both backends.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gnnbridge.backends.dgl.compat import import_dgl
from gnnbridge.core.config import ModelSpec
from gnnbridge.core.interfaces import GNNModel

# neutral name -> DGL parameter name (relative to a layer), per architecture
NEUTRAL_NAMES = {
    "sage": {"neigh.weight": "fc_neigh.weight", "root.weight": "fc_self.weight", "bias": "fc_self.bias"},
    "gcn": {"weight": "lin.weight", "bias": "bias"},
    "gat": {"weight": "fc.weight", "att_src": "attn_l", "att_dst": "attn_r", "bias": "bias"},
}


def with_self_loops(block):
    """The block plus an edge ``i -> i`` for every dst node."""
    dgl = import_dgl()
    src, dst = block.edges()
    loops = torch.arange(block.num_dst_nodes(), device=src.device)
    return dgl.create_block((torch.cat([src, loops]), torch.cat([dst, loops])),
                            num_src_nodes=block.num_src_nodes(), num_dst_nodes=block.num_dst_nodes(),
                            device=src.device)


class GCNLayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        from dgl.nn import GraphConv

        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        nn.init.xavier_uniform_(self.lin.weight)
        self.conv = GraphConv(out_dim, out_dim, norm="both", weight=False, bias=False, allow_zero_in_degree=True)
        self.bias = nn.Parameter(torch.zeros(out_dim))

    def forward(self, block, x: torch.Tensor) -> torch.Tensor:
        return self.conv(with_self_loops(block), self.lin(x)) + self.bias


class GATLayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, heads: int):
        super().__init__()
        from dgl.nn import GATConv

        self.conv = GATConv(in_dim, out_dim, num_heads=heads, allow_zero_in_degree=True)

    def forward(self, block, x: torch.Tensor) -> torch.Tensor:
        return self.conv(with_self_loops(block), x).flatten(1)  # concatenate heads, like PyG


class SAGELayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, aggr: str):
        super().__init__()
        from dgl.nn import SAGEConv

        self.conv = SAGEConv(in_dim, out_dim, aggregator_type=aggr)

    def forward(self, block, x: torch.Tensor) -> torch.Tensor:
        return self.conv(block, x)


class DglGNN(GNNModel):
    def __init__(self, spec: ModelSpec, in_dim: int, out_dim: int):
        super().__init__()
        import_dgl()
        self.spec = spec
        self.layers = nn.ModuleList()
        for d_in, d_out, heads in spec.layer_dims(in_dim, out_dim):
            if spec.arch == "sage":
                self.layers.append(SAGELayer(d_in, d_out, spec.aggr))
            elif spec.arch == "gcn":
                self.layers.append(GCNLayer(d_in, d_out))
            else:
                self.layers.append(GATLayer(d_in, d_out, heads))

    def _activate(self, index: int, h: torch.Tensor) -> torch.Tensor:
        if index == self.spec.layers - 1:
            return h
        return F.dropout(F.relu(h), p=self.spec.dropout, training=self.training)

    def forward(self, graph, x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, graph)):
            h = self._activate(i, layer(block, h))
        return h

    def layer_forward(self, index: int, graph, x: torch.Tensor) -> torch.Tensor:
        return self._activate(index, self.layers[index](graph[0], x))

    def neutral_parameters(self) -> dict[str, torch.Tensor]:
        names = NEUTRAL_NAMES[self.spec.arch]
        out = {}
        for i, layer in enumerate(self.layers):
            inner = layer if self.spec.arch == "gcn" else layer.conv
            params = dict(inner.named_parameters())
            for neutral, native in names.items():
                out[f"layers.{i}.{neutral}"] = params[native]
        return out
