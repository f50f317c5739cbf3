"""GraphSAGE, GCN, GAT and GINE from a neutral :class:`ModelSpec`, with DGL layers on blocks.

Made to match the PyG backend layer for layer, so one spec means one model:

* GAT adds one self-loop per dst node after dropping any the graph already has (what PyG's
  ``GATConv`` does); a block's dst nodes are the first of its src nodes, so ``i -> i`` is valid.
* GCN is a bias-free linear map, an aggregation weighted by full-graph degrees
  (:func:`gnnbridge.core.models.graphops.gcn_edge_weights`, the same weights the PyG backend uses),
  then a bias, with the weight stored ``[out, in]`` like PyG's (DGL's ``GraphConv`` stores
  ``[in, out]``).
"""

from __future__ import annotations

import torch
from torch import nn

from gnnbridge.backends.catalogue import LAYER_INIT
from gnnbridge.backends.dgl.blocks import EDGE_FEATURES, csc_block
from gnnbridge.backends.dgl.compat import import_dgl
from gnnbridge.core.config import ModelSpec
from gnnbridge.core.contracts.interfaces import GNNModel
from gnnbridge.core.models.gine import GINE_NAMES, GINEParts, summing
from gnnbridge.core.models.graphops import attention_heads, gcn_edge_weights, layer_dims
from gnnbridge.core.records.batches import IndexedRows


def with_self_loops(block, replace_existing: bool):
    """The block plus one ``i -> i`` edge per dst node.

    ``replace_existing`` first drops self-loops the graph already has (PyG's ``GATConv``);
    otherwise they stay as ordinary edges (GCN here, on both backends).
    """
    dgl = import_dgl()
    src, dst = block.edges()
    if replace_existing:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    n_dst = block.num_dst_nodes()
    loops = torch.arange(n_dst, device=src.device)
    return dgl.create_block(
        (torch.cat([src, loops]), torch.cat([dst, loops])),
        num_src_nodes=block.num_src_nodes(),
        num_dst_nodes=n_dst,
        device=src.device,
    )


def global_ids(block) -> tuple[torch.Tensor, torch.Tensor]:
    dgl = import_dgl()
    return block.srcdata[dgl.NID], block.dstdata[dgl.NID]


class GCNLayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        from dgl.nn import GraphConv

        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        nn.init.xavier_uniform_(self.lin.weight)
        self.conv = GraphConv(out_dim, out_dim, norm="none", weight=False, bias=False, allow_zero_in_degree=True)
        self.bias = nn.Parameter(torch.zeros(out_dim))

    def forward(self, block, x: torch.Tensor, in_degree: torch.Tensor) -> torch.Tensor:
        src, dst = block.edges()
        src_ids, dst_ids = global_ids(block)
        edge_w, loop_w = gcn_edge_weights(in_degree, src_ids, dst_ids, src, dst)
        full = with_self_loops(block, replace_existing=False)  # loops appended after the edges
        return self.conv(full, self.lin(x), edge_weight=torch.cat([edge_w, loop_w])) + self.bias


class GATLayer(nn.Module):
    """DGL's ``GATConv``; with edge features (``edge_width``), its parameters in the attention
    PyG's ``GATConv(edge_dim=...)`` computes (see :meth:`_with_edges`)."""

    def __init__(self, in_dim: int, out_dim: int, heads: int, edge_width: int = 0):
        super().__init__()
        from dgl.nn import GATConv

        self.conv = GATConv(in_dim, out_dim, num_heads=heads, allow_zero_in_degree=True)
        if edge_width:
            self.lin_edge = nn.Linear(edge_width, heads * out_dim, bias=False)
            self.att_edge = nn.Parameter(torch.empty(1, heads, out_dim))
            nn.init.xavier_uniform_(self.att_edge)

    def forward(self, block, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "lin_edge"):
            return self._with_edges(block, x)
        return self.conv(with_self_loops(block, replace_existing=True), x).flatten(1)  # concatenate heads, like PyG

    def _with_edges(self, block, x: torch.Tensor) -> torch.Tensor:
        """GAT whose attention logit adds ``att_edge . W_e e_uv`` to the two nodes' terms, as PyG's
        ``GATConv`` with ``edge_dim`` does: existing self-loops dropped, one per dst node added
        whose features are the mean of its in-edges' (PyG's ``fill_value="mean"``); messages are
        the sources' mapped states, as without edge features. Written with DGL's ops because
        DGL's ``GATConv`` takes no edge features (its ``EdgeGATConv`` adds them to the messages too)."""
        dgl = import_dgl()
        from dgl import function as fn
        from dgl.nn.functional import edge_softmax

        conv, n_dst = self.conv, block.num_dst_nodes()
        heads, width = conv._num_heads, conv._out_feats
        src, dst = block.edges(order="eid")
        features = block.edata[EDGE_FEATURES]
        keep = src != dst
        src, dst, features = src[keep], dst[keep], features[keep]
        counts = torch.bincount(dst, minlength=n_dst).clamp(min=1).unsqueeze(1).to(features.dtype)
        loop_features = features.new_zeros(n_dst, features.shape[1]).index_add_(0, dst, features) / counts
        loops = torch.arange(n_dst, device=src.device)
        graph = dgl.create_block(
            (torch.cat([src, loops]), torch.cat([dst, loops])),
            num_src_nodes=block.num_src_nodes(),
            num_dst_nodes=n_dst,
            device=src.device,
        )
        mapped = conv.fc(x).view(-1, heads, width)
        graph.srcdata.update({"ft": mapped, "el": (mapped * conv.attn_l).sum(-1, keepdim=True)})
        graph.dstdata["er"] = (mapped[:n_dst] * conv.attn_r).sum(-1, keepdim=True)
        graph.apply_edges(fn.u_add_v("el", "er", "e"))
        edge_terms = self.lin_edge(torch.cat([features, loop_features])).view(-1, heads, width)
        logits = graph.edata.pop("e") + (edge_terms * self.att_edge).sum(-1, keepdim=True)
        graph.edata["a"] = edge_softmax(graph, torch.nn.functional.leaky_relu(logits, 0.2))
        graph.update_all(fn.u_mul_e("ft", "a", "m"), fn.sum("m", "ft"))
        return (graph.dstdata["ft"] + conv.bias.view(1, heads, width)).flatten(1)


class SAGELayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, aggr: str):
        super().__init__()
        from dgl.nn import SAGEConv

        self.conv = SAGEConv(in_dim, out_dim, aggregator_type=aggr)

    def forward(self, block, x: torch.Tensor | IndexedRows) -> torch.Tensor:
        if isinstance(x, IndexedRows):  # only with the mean aggregation (DglGNN.reads_indexed_rows)
            return self._mean_from_table(block, x)
        return self.conv(block, x)

    def _mean_from_table(self, block, x: IndexedRows) -> torch.Tensor:
        """``SAGEConv``'s mean aggregation with the neighbours' rows read from the feature table
        by global id: DGL's fused ``copy_u_mean`` on the same block with its sources renumbered
        to table rows, so the sampled rows are never gathered. The linear map comes after the
        mean (``SAGEConv`` maps every source row first when it narrows the features: the same
        numbers, on ~8x more rows at fanouts [25, 10])."""
        dgl = import_dgl()
        indptr, indices, eids = block.adj_tensors("csc")
        n_dst = block.num_dst_nodes()
        wide = csc_block(indptr, x.ids[indices], x.table.shape[0], n_dst, eids)
        return self.conv.fc_self(x.rows(n_dst)) + self.conv.fc_neigh(dgl.ops.copy_u_mean(wide, x.table))


class GINELayer(GINEParts):
    """GINE's layer (:mod:`gnnbridge.core.models.gine`): DGL's ``GINEConv`` sums over the block's
    edges with their features (``edata["feat"]``), the core-held parts map and transform."""

    def __init__(self, d_in: int, d_out: int, edge_width: int, inner: int):
        super().__init__(d_in, d_out, edge_width, inner)
        from dgl.nn import GINEConv

        self.conv = summing(GINEConv(None, init_eps=0.0))

    def forward(self, block, x: torch.Tensor) -> torch.Tensor:
        edges = self.edge(block.edata[EDGE_FEATURES])
        return self.mlp(self.conv(block, (x, x[: block.num_dst_nodes()]), edges))


class DglGNN(GNNModel):
    NEUTRAL_INIT = LAYER_INIT  # one initialisation on every backend (gnnbridge.core.models.init)
    NEUTRAL_NAMES = {
        "sage": {
            "neigh.weight": "conv.fc_neigh.weight",
            "root.weight": "conv.fc_self.weight",
            "bias": "conv.fc_self.bias",
        },
        "gcn": {"weight": "lin.weight", "bias": "bias"},
        "gat": {
            "weight": "conv.fc.weight",
            "att_src": "conv.attn_l",
            "att_dst": "conv.attn_r",
            "bias": "conv.bias",
            "edge.weight": "lin_edge.weight",
            "att_edge": "att_edge",
        },
        "gine": GINE_NAMES,
    }

    def __init__(self, spec: ModelSpec, in_dim: int, out_dim: int, edge_width: int = 0):
        """``edge_width``: the edge features' width (GINE reads them, GAT where there are some)."""
        super().__init__()
        import_dgl()
        self.spec = spec
        self.reads_indexed_rows = spec.arch == "sage" and spec.aggr == "mean"  # SAGELayer reads them in place
        self.layers = nn.ModuleList()
        gat_heads = attention_heads(spec) if spec.arch == "gat" else 1
        for d_in, d_out, heads in layer_dims(spec.layers, spec.hidden, in_dim, out_dim, gat_heads):
            if spec.arch == "sage":
                self.layers.append(SAGELayer(d_in, d_out, spec.aggr))
            elif spec.arch == "gcn":
                self.layers.append(GCNLayer(d_in, d_out))
            elif spec.arch == "gine":
                self.layers.append(GINELayer(d_in, d_out, edge_width, spec.hidden))
            else:
                self.layers.append(GATLayer(d_in, d_out, heads, edge_width))

    def _layer_module(self, index: int) -> nn.Module:
        return self.layers[index]

    def _run_layer(self, index: int, block, x: torch.Tensor) -> torch.Tensor:
        layer = self.layers[index]
        h = layer(block, x, self.degrees()) if self.spec.arch == "gcn" else layer(block, x)
        return self.activate(index, h)

    def forward(self, graph, x: torch.Tensor | IndexedRows) -> torch.Tensor:
        for i, block in enumerate(graph):
            if isinstance(x, IndexedRows):  # a block's sources lead the batch's input nodes
                x = x.head(block.num_src_nodes()) if self.reads_indexed_rows else x.rows(block.num_src_nodes())
            x = self._run_layer(i, block, x)
        return x

    def layer_forward(self, index: int, graph, x: torch.Tensor | IndexedRows) -> torch.Tensor:
        if isinstance(x, IndexedRows) and not self.reads_indexed_rows:
            x = x.rows()
        return self._run_layer(index, graph[0], x)
