"""Heterogeneous graphs with DGL: a core sample as a heterograph (each node type's ids in
``ndata[dgl.NID]``, every declared type present even when the sample has none of its nodes), and
heterogeneous GraphSAGE as ``HeteroGraphConv`` over a ``SAGEConv`` per canonical edge type
(:class:`~gnnbridge.core.models.hetero.HeteroSAGE` holds the rest)."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gnnbridge.backends.dgl.compat import import_dgl
from gnnbridge.core.models.hetero import HeteroSAGE


def to_heterograph(sub) -> Any:
    dgl = import_dgl()
    empty = torch.zeros(0, dtype=torch.int64)
    graph = dgl.heterograph({et: (sub.row.get(et, empty), sub.col.get(et, empty)) for et in sub.edge_types},
                            num_nodes_dict={t: int(sub.node[t].numel()) if t in sub.node else 0 for t in sub.node_types})
    for t, ids in sub.node.items():
        graph.nodes[t].data[dgl.NID] = ids
    return graph


class DglHeteroSAGE(HeteroSAGE):
    def make_conv(self, edge_types: list, hidden: int) -> nn.Module:
        import_dgl()
        from dgl.nn import HeteroGraphConv, SAGEConv

        return HeteroGraphConv({et: SAGEConv(hidden, hidden, self.spec.aggr) for et in edge_types}, aggregate="sum")

    def conv(self, index: int, graph: Any, h: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return self.convs[index](graph, h)
