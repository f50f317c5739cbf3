"""Two models: one for every backend (it reads no graph), one written with DGL layers."""

import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    """gnnbridge passes in_dim, out_dim and the model.* values this signature names."""

    def __init__(self, in_dim, out_dim, hidden=64, dropout=0.5):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, out_dim))

    def forward(self, graph, x):
        return self.net(x)  # a row per input node, seeds first: gnnbridge keeps the seeds' rows


class ResSAGE(nn.Module):
    """GraphSAGE with a residual projection per layer; ``graph`` is DGL's list of blocks."""

    def __init__(self, in_dim, out_dim, hidden=64, layers=2, dropout=0.5):
        super().__init__()
        from dgl.nn import SAGEConv

        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.convs = nn.ModuleList(SAGEConv(a, b, "mean") for a, b in zip(dims, dims[1:]))
        self.skips = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in zip(dims, dims[1:]))
        self.dropout = dropout
        self.num_layers = layers

    def layer_forward(self, i, graph, x):
        """Optional: one layer on a one-hop graph, for exact layer-wise evaluation."""
        block = graph[0]
        h = self.convs[i](block, x) + self.skips[i](x[: block.num_dst_nodes()])
        return h if i == self.num_layers - 1 else F.dropout(F.relu(h), self.dropout, self.training)

    def forward(self, graph, x):
        for i, block in enumerate(graph):
            x = self.layer_forward(i, [block], x)
        return x


def build_ressage(in_dim, out_dim, hidden, layers, dropout):
    return ResSAGE(in_dim, out_dim, hidden, layers, dropout)
