"""Heterogeneous graphs with PyG: a core sample as ``HeteroData`` (each node type's ``n_id`` and
``num_sampled_nodes``, each edge type's local ``edge_index`` and ``num_sampled_edges``, as PyG's
own loaders give them), and heterogeneous GraphSAGE as a ``SAGEConv`` per edge type, summed per
destination type (:class:`~gnnbridge.core.models.hetero.HeteroSAGE` holds the rest).

Each layer computes only the nodes the next one reads: its sources are the nodes within L-i hops,
its destinations those within L-i-1 (the last layer: the seeds alone). PyG's ``trim_to_layer``
drops the outermost hop after each layer but still computes every remaining node, one hop more
than needed, so the relations are called here with ``(x_src, x_dst)`` and ``size`` instead of
through ``HeteroConv.forward``; ``HeteroConv`` still holds the modules, so parameter names stay
PyG's.

Each relation's aggregation is fused where it can be: core's typed sampler emits a relation's
edges in destination order, so the batch carries each relation's CSR offsets (``dst_ptr``, a
prefix sum, no sort) and ``SAGEConv`` gets a sparse adjacency instead of ``edge_index`` (see
:mod:`~gnnbridge.backends.pyg.sparse`): it reads neighbours' rows straight from the CSR instead
of materialising a message per edge, as DGL's kernels do.

R-GCN and HGT are core's (:mod:`~gnnbridge.core.models.relational`); :class:`PygRelations`
gives them a relation's edges, a per-relation mean (through the same CSR adjacency, else
``torch_geometric.utils.scatter``) and the softmax over a destination's incoming edges
(``torch_geometric.utils.softmax``)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gnnbridge.backends.pyg.sparse import FUSED_AGGREGATIONS, layer_adjacency
from gnnbridge.core.models.graphops import hetero_layer_bounds
from gnnbridge.core.models.hetero import HeteroSAGE
from gnnbridge.core.models.hgt import HeteroHGT
from gnnbridge.core.models.relational import RelationalModel
from gnnbridge.core.models.rgcn import HeteroRGCN
from gnnbridge.core.records.csc import dst_offsets


def to_hetero_data(sub) -> Any:
    from torch_geometric.data import HeteroData

    graph = HeteroData()
    for t, ids in sub.node.items():
        graph[t].n_id = ids
        graph[t].num_nodes = ids.numel()
    graph.bounds = hetero_layer_bounds(sub.num_sampled_nodes, sub.num_sampled_edges, sub.layers)
    for et in sub.row:
        graph[et].edge_index = torch.stack([sub.row[et], sub.col[et]])
        graph[et].e_id = sub.edge[et]
        if sub.edge_attr and et in sub.edge_attr:  # a row per edge of edge_index, in its order
            graph[et].edge_attr = sub.edge_attr[et]
        ptr = dst_offsets(sub.col[et], graph.bounds[0][1][et[2]])  # None: not in destination order
        if ptr is not None:
            graph[et].dst_ptr = ptr
    return graph


class PygHeteroSAGE(HeteroSAGE):
    SAGE_NAMES = {"neigh.weight": "lin_l.weight", "root.weight": "lin_r.weight", "bias": "lin_l.bias"}

    def relation_conv(self, index: int, edge_type: tuple) -> nn.Module:
        return self.convs[index].convs[edge_type]

    def make_conv(self, edge_types: list, hidden: int) -> nn.Module:
        from torch_geometric.nn import HeteroConv, SAGEConv

        return HeteroConv({et: SAGEConv(hidden, hidden, aggr=self.spec.aggr) for et in edge_types}, aggr="sum")

    def conv(self, index: int, graph: Any, h: dict[str, torch.Tensor], block: int) -> dict[str, torch.Tensor]:
        n_src, n_dst, n_edges = graph.bounds[block]
        sources, targets = self.layer_inputs(h, n_src, n_dst)
        out: dict[str, torch.Tensor] = {}
        for et in self.edge_types:
            s, _, d = et
            x = (sources[s], targets[d])
            y = self.relation_conv(index, et)(x, *self._adjacency(graph, et, n_src[s], n_dst[d], n_edges, x[0]))
            out[d] = out[d] + y if d in out else y
        return out

    def _adjacency(self, graph: Any, et: tuple, n_src: int, n_dst: int, n_edges: dict, x: torch.Tensor) -> tuple:
        """The relation's edges for SAGEConv: a CSR adjacency where the batch has its offsets and
        the aggregation fuses, else ``edge_index`` and ``size`` (none drawn: empty, so the
        relation still adds its root term)."""
        if et not in graph.edge_types:  # made here: a module-level tensor made under a meta-device build would be meta
            return torch.zeros(2, 0, dtype=torch.int64, device=x.device), (n_src, n_dst)
        store, count = graph[et], n_edges[et]
        if count and "dst_ptr" in store and self.spec.aggr in FUSED_AGGREGATIONS:
            return (layer_adjacency(store.dst_ptr, store.edge_index[0, :count], n_dst, n_src, x.dtype),)
        return store.edge_index[:, :count], (n_src, n_dst)

    def carry(self, block: int, graph: Any, node_type: str, h: torch.Tensor) -> torch.Tensor:
        return h[: graph.bounds[block][1][node_type]]


class PygRelations(RelationalModel):
    """Core's relational layers on a PyG ``HeteroData`` batch, per-hop trimmed by its ``bounds``."""

    def sizes(self, graph: Any, block: int) -> tuple[dict[str, int], dict[str, int]]:
        n_src, n_dst, _ = graph.bounds[block]
        return n_src, n_dst

    def edges(self, graph: Any, block: int, edge_type: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        if edge_type in graph.edge_types:
            edges = graph[edge_type].edge_index[:, : graph.bounds[block][2].get(edge_type, 0)]
        else:  # made here: a module-level tensor made under a meta-device build would be meta
            edges = torch.zeros(2, 0, dtype=torch.int64, device=self.head_device())
        return edges[0], edges[1]

    def mean(self, graph: Any, block: int, edge_type: tuple, x: torch.Tensor, n_dst: int) -> torch.Tensor:
        """Through the relation's CSR adjacency where the batch has it (no message per edge)."""
        from torch_geometric.utils import scatter, spmm

        src, dst = self.edges(graph, block, edge_type)
        if src.numel() and "dst_ptr" in graph[edge_type]:
            return spmm(layer_adjacency(graph[edge_type].dst_ptr, src, n_dst, x.shape[0], x.dtype), x, reduce="mean")
        return scatter(x[src], dst, dim=0, dim_size=n_dst, reduce="mean")

    def attend(self, graph: Any, block: int, scores: dict, values: dict, n_dst: dict[str, int]) -> dict:
        from torch_geometric.utils import scatter, softmax

        out = {}
        for d, n in n_dst.items():
            into = [et for et in scores if et[2] == d]
            dst = torch.cat([self.edges(graph, block, et)[1] for et in into])
            weights = softmax(torch.cat([scores[et] for et in into]), dst, num_nodes=n)
            out[d] = scatter(weights.unsqueeze(-1) * torch.cat([values[et] for et in into]), dst, 0, dim_size=n)
        return out

    def head_device(self) -> torch.device:
        return next(self.parameters()).device


class PygHeteroRGCN(PygRelations, HeteroRGCN):
    pass


class PygHeteroHGT(PygRelations, HeteroHGT):
    pass
