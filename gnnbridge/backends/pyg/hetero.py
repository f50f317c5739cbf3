"""Heterogeneous graphs with PyG: a core sample as ``HeteroData`` (each node type's ``n_id``,
each edge type's local ``edge_index``), and heterogeneous GraphSAGE as ``HeteroConv`` over a
``SAGEConv`` per edge type (:class:`~gnnbridge.core.models.hetero.HeteroSAGE` holds the rest)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gnnbridge.core.models.hetero import HeteroSAGE


def to_hetero_data(sub) -> Any:
    from torch_geometric.data import HeteroData

    graph = HeteroData()
    for t, ids in sub.node.items():
        graph[t].n_id = ids
        graph[t].num_nodes = ids.numel()
    for et in sub.row:
        graph[et].edge_index = torch.stack([sub.row[et], sub.col[et]])
        graph[et].e_id = sub.edge[et]
    return graph


class PygHeteroSAGE(HeteroSAGE):
    SAGE_NAMES = {"neigh.weight": "lin_l.weight", "root.weight": "lin_r.weight", "bias": "lin_l.bias"}

    def relation_conv(self, index: int, edge_type: tuple) -> nn.Module:
        return self.convs[index].convs[edge_type]

    def make_conv(self, edge_types: list, hidden: int) -> nn.Module:
        from torch_geometric.nn import HeteroConv, SAGEConv

        return HeteroConv({et: SAGEConv(hidden, hidden, aggr=self.spec.aggr) for et in edge_types}, aggr="sum")

    def conv(self, index: int, graph: Any, h: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        # Relations without a sampled edge pass no message (as in DGL's HeteroGraphConv, which skips them).
        edges = {
            et: graph[et].edge_index
            for et in graph.edge_types
            if graph[et].edge_index.shape[1] and et[0] in h and et[2] in h
        }
        return self.convs[index](h, edges) if edges else {}
