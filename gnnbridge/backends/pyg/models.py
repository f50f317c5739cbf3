"""GraphSAGE, GCN, GAT and GINE from a neutral :class:`ModelSpec`, with PyG layers.

Training batches carry per-hop node and edge counts, so each layer reads only the nodes and
edges it needs and computes only the nodes the next layer reads (a bipartite call on a prefix
of the batch): the same work DGL's blocks do. Running every layer on the whole L-hop subgraph
(or trimming its inputs but not its outputs) computes the first layer, its activation and its
dropout for about twice as many nodes at fanouts [25, 10].

GCN is normalised by full-graph degrees (:func:`gnnbridge.core.models.graphops.gcn_edge_weights`),
not by ``GCNConv``'s in-batch degrees, so it computes what the DGL backend computes.
"""

from __future__ import annotations

import torch
from torch import nn

from gnnbridge.backends.catalogue import LAYER_INIT
from gnnbridge.backends.pyg.sparse import FUSED_AGGREGATIONS, layer_adjacency
from gnnbridge.core.config import ModelSpec
from gnnbridge.core.contracts.interfaces import GNNModel
from gnnbridge.core.models.gine import GINE_NAMES, GINEParts, summing
from gnnbridge.core.models.graphops import attention_heads, gcn_edge_weights, layer_bounds, layer_dims
from gnnbridge.core.records.batches import IndexedRows


class PygGNN(GNNModel):
    NEUTRAL_INIT = LAYER_INIT  # one initialisation on every backend (gnnbridge.core.models.init)
    NEUTRAL_NAMES = {
        "sage": {"neigh.weight": "lin_l.weight", "root.weight": "lin_r.weight", "bias": "lin_l.bias"},
        "gcn": {"weight": "lin.weight", "bias": "bias"},
        "gat": {
            "weight": "lin.weight",
            "att_src": "att_src",
            "att_dst": "att_dst",
            "bias": "bias",
            "edge.weight": "lin_edge.weight",
            "att_edge": "att_edge",
        },
        "gine": GINE_NAMES,
    }

    def __init__(self, spec: ModelSpec, in_dim: int, out_dim: int, edge_width: int = 0):
        """``edge_width``: the edge features' width (GINE reads them, GAT where there are some)."""
        super().__init__()
        from torch_geometric.nn import GATConv, GCNConv, GINEConv, SAGEConv

        self.spec = spec
        # The fused aggregation reads a layer's input rows by global id from the feature table.
        self.reads_indexed_rows = spec.arch == "sage" and spec.aggr in FUSED_AGGREGATIONS
        self.convs = nn.ModuleList()
        gat_heads = attention_heads(spec) if spec.arch == "gat" else 1
        for d_in, d_out, heads in layer_dims(spec.layers, spec.hidden, in_dim, out_dim, gat_heads):
            if spec.arch == "sage":
                conv = SAGEConv(d_in, d_out, aggr=spec.aggr)
            elif spec.arch == "gcn":
                conv = GCNConv(d_in, d_out, normalize=False, add_self_loops=False)
            elif spec.arch == "gine":
                conv = GINEParts(d_in, d_out, edge_width, spec.hidden)
                conv.conv = summing(GINEConv(nn.Identity(), eps=0.0))  # the parts hold the parameters
            else:  # edge features, where the graph has them, enter the attention (GATConv's edge_dim)
                conv = GATConv(d_in, d_out, heads=heads, edge_dim=edge_width or None)
            self.convs.append(conv)

    def _layer_module(self, index: int) -> nn.Module:
        return self.convs[index]

    def forward(self, graph, x: torch.Tensor) -> torch.Tensor:
        n_id = getattr(graph, "n_id", None)
        nodes = getattr(graph, "num_sampled_nodes", None)
        edges = getattr(graph, "num_sampled_edges", None)
        features = getattr(graph, "edge_attr", None)
        if nodes is None or edges is None:  # an unlayered batch: every layer on every node
            x = x.rows() if isinstance(x, IndexedRows) else x
            for i in range(self.spec.layers):
                x = self._layer(i, x, graph.edge_index, x.shape[0], n_id, edge_attr=features)
            return x[: graph.batch_size]
        dst_ptr = getattr(graph, "dst_ptr", None)
        for i, (n_src, n_dst, n_edges) in enumerate(layer_bounds(nodes, edges, self.spec.layers)):
            ids = n_id[:n_src] if n_id is not None else None
            x = x.head(n_src) if isinstance(x, IndexedRows) else x[:n_src]
            e = features[:n_edges] if features is not None else None
            x = self._layer(i, x, graph.edge_index[:, :n_edges], n_dst, ids, dst_ptr, e)
        return x

    def layer_forward(self, index: int, graph, x: torch.Tensor) -> torch.Tensor:
        return self._layer(
            index, x, graph.edge_index, graph.batch_size, getattr(graph, "n_id", None), getattr(graph, "dst_ptr", None),
            getattr(graph, "edge_attr", None),
        )  # fmt: skip

    def _layer(
        self,
        index: int,
        x: torch.Tensor,
        edge_index: torch.Tensor,
        n_dst: int,
        n_id: torch.Tensor | None,
        dst_ptr: torch.Tensor | None = None,
        edge_attr: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Layer ``index`` for the first ``n_dst`` rows of ``x`` (dst nodes lead the src nodes);
        ``n_id`` are the global ids of ``x``'s rows (GCN's degrees are looked up by them);
        ``dst_ptr``: the batch's CSR offsets by destination, for the fused aggregation. ``x`` may
        be :class:`IndexedRows`: the fused aggregation then reads the neighbours' rows from the
        table by global id, and only the ``n_dst`` rows of the root term are gathered."""
        conv = self.convs[index]
        if (
            dst_ptr is not None
            and self.spec.arch == "sage"
            and self.spec.aggr in FUSED_AGGREGATIONS
            and edge_index.shape[1]
        ):
            if isinstance(x, IndexedRows):
                adj = layer_adjacency(dst_ptr, x.ids[edge_index[0]], n_dst, x.table.shape[0], x.table.dtype)
                return self.activate(index, conv((x.table, x.rows(n_dst)), adj))
            adj = layer_adjacency(dst_ptr, edge_index[0], n_dst, x.shape[0], x.dtype)
            return self.activate(index, conv((x, x[:n_dst]), adj))
        x = x.rows() if isinstance(x, IndexedRows) else x
        if self.spec.arch == "gcn":
            if n_id is None:
                raise ValueError("GCN batches must carry global node ids (n_id)")
            row, col = edge_index
            edge_w, loop_w = gcn_edge_weights(self.degrees(), n_id, n_id[:n_dst], row, col)
            loops = torch.arange(n_dst, device=x.device)
            full = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
            h = conv(x, full, torch.cat([edge_w, loop_w]))[:n_dst]
        elif self.spec.arch == "gine":  # edge_attr: a row per edge of edge_index, in its order
            h = conv.mlp(conv.conv((x, x[:n_dst]), edge_index, conv.edge(edge_attr), size=(x.shape[0], n_dst)))
        elif self.spec.arch == "gat" and edge_attr is not None:
            h = conv((x, x[:n_dst]), edge_index, edge_attr=edge_attr, size=(x.shape[0], n_dst))
        else:
            h = conv((x, x[:n_dst]), edge_index, size=(x.shape[0], n_dst))
        return self.activate(index, h)
