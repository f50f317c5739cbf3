"""The built-in models as plain torch programs: what ``gnnbridge export`` writes.

Both backends' layouts of a built-in model map onto one set of neutral names
(:mod:`gnnbridge.core.models.neutral`), so one pure-torch forward per architecture serves runs
trained on either library. These modules are written for tracing, not for training:

* every aggregation is an ``index_add`` / ``scatter_reduce`` into a tensor sized by the input's
  own node count (``x.shape[0]``), never by a value read out of a tensor (``int(index.max())``
  is what breaks PyG's and DGL's layers under ``torch.export`` and ONNX);
* GAT's self-loops are added as a second term beside the edges instead of by concatenating
  edges and dropping the graph's own loops (a boolean mask would give a data-dependent edge
  count): an existing ``i -> i`` edge's attention is set to ``-inf``, which is what PyG's
  ``GATConv`` computes after ``remove_self_loops`` / ``add_self_loops``;
* a graph task's count of graphs is the one data-dependent size (``batch.max() + 1``), used only
  to cut the pooled rows.

Their state-dict keys *are* the neutral names (``layers.0.neigh.weight``; GIN's core-owned
names), so a safetensors file of them is the neutral layout and loads back unchanged.
"""

from __future__ import annotations

import torch
from torch import nn

from gnnbridge.core.config import ModelSpec
from gnnbridge.core.models.gin import GIN
from gnnbridge.core.models.gine import GINE
from gnnbridge.core.models.graphops import layer_dims

NODE_ARCHS = ("sage", "gcn", "gat", "gine")
GRAPH_ARCHS = ("gin", "gine")
TYPED_ARCHS = ("sage",)  # heterogeneous graphs: node and link tasks


def _summed(values: torch.Tensor, dst: torch.Tensor, n: int) -> torch.Tensor:
    """Rows of ``values`` (one per edge) summed onto their destination, ``[n, ...]``.

    ``scatter_add`` with the index spread over every column, not ``index_add``: the exporter
    turns ``index_add`` into ONNX ``ScatterND(reduction="add")``, which onnxruntime (1.32) sums
    on several threads without guarding repeated indices, so rows of nodes with several
    in-edges came out wrong, differently on every call; ``ScatterElements`` sums them right."""
    index = dst.view(-1, *([1] * (values.dim() - 1))).expand_as(values)
    return values.new_zeros((n, *values.shape[1:])).scatter_add(0, index, values)


def _in_degree(dst: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    return _summed(torch.ones_like(dst, dtype=dtype), dst, n)


class SageLayer(nn.Module):
    """GraphSAGE, mean aggregation: ``neigh(mean of in-neighbours) + root(x) + bias``; ``x_dst``:
    a relation's destination rows where they are another node type's (heterogeneous graphs)."""

    def __init__(self, d_in: int, d_out: int, heads: int = 1):
        super().__init__()
        self.neigh = nn.Linear(d_in, d_out, bias=False)
        self.root = nn.Linear(d_in, d_out, bias=False)
        self.bias = nn.Parameter(torch.zeros(d_out))

    def forward(
        self, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, x_dst: torch.Tensor | None = None
    ) -> torch.Tensor:
        x_dst = x if x_dst is None else x_dst
        n = x_dst.shape[0]
        mean = _summed(x[src], dst, n) / _in_degree(dst, n, x.dtype).clamp(min=1).unsqueeze(-1)
        return self.neigh(mean) + self.bias + self.root(x_dst)


class GCNLayer(nn.Module):
    """GCN by the graph's own degrees (:func:`~gnnbridge.core.models.graphops.gcn_edge_weights`
    with every neighbour present): ``1/sqrt((d_u+1)(d_v+1))`` per edge, ``1/(d_v+1)`` per self-loop."""

    def __init__(self, d_in: int, d_out: int, heads: int = 1):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(d_out, d_in))
        self.bias = nn.Parameter(torch.zeros(d_out))

    def forward(self, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        h = x @ self.weight.t()
        d = _in_degree(dst, n, h.dtype) + 1
        w = (d[src] * d[dst]).rsqrt().unsqueeze(-1)
        return _summed(h[src] * w, dst, n) + h / d.unsqueeze(-1) + self.bias


class GATLayer(nn.Module):
    """PyG's ``GATConv`` (heads concatenated, one self-loop per node, slope 0.2), in eval mode;
    with edge features (``edge_width``), their map and attention vector enter each edge's score,
    and a node's self-loop reads the mean of its other in-edges' features (``fill_value="mean"``)."""

    def __init__(self, d_in: int, d_out: int, heads: int = 1, edge_width: int = 0):
        super().__init__()
        self.heads, self.width = heads, d_out
        self.weight = nn.Parameter(torch.zeros(heads * d_out, d_in))
        self.att_src = nn.Parameter(torch.zeros(1, heads, d_out))
        self.att_dst = nn.Parameter(torch.zeros(1, heads, d_out))
        self.bias = nn.Parameter(torch.zeros(heads * d_out))
        if edge_width:
            self.edge = nn.Linear(edge_width, heads * d_out, bias=False)
            self.att_edge = nn.Parameter(torch.zeros(1, heads, d_out))

    def _edge_scores(self, e: torch.Tensor) -> torch.Tensor:
        return (self.edge(e).view(-1, self.heads, self.width) * self.att_edge).sum(-1)

    def forward(
        self, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, edge_attr: torch.Tensor | None = None
    ) -> torch.Tensor:
        n = x.shape[0]
        h = (x @ self.weight.t()).view(n, self.heads, self.width)
        a_src, a_dst = (h * self.att_src).sum(-1), (h * self.att_dst).sum(-1)  # [n, heads]
        slope = nn.functional.leaky_relu
        own = src == dst  # the graph's own loops: replaced by one per node
        edge, loop = a_src[src] + a_dst[dst], a_src + a_dst
        if edge_attr is not None:
            other = (~own).to(edge_attr.dtype).unsqueeze(-1)
            mean = _summed(edge_attr * other, dst, n) / _summed(other, dst, n).clamp(min=1)
            edge, loop = edge + self._edge_scores(edge_attr), loop + self._edge_scores(mean)
        edge = slope(edge, 0.2).masked_fill(own.unsqueeze(-1), float("-inf"))
        loop = slope(loop, 0.2)
        top = loop.scatter_reduce(0, dst.unsqueeze(-1).expand_as(edge), edge, "amax", include_self=True)
        e_edge, e_loop = torch.exp(edge - top[dst]), torch.exp(loop - top)
        total = _summed(e_edge, dst, n) + e_loop
        out = _summed(h[src] * e_edge.unsqueeze(-1), dst, n) + h * e_loop.unsqueeze(-1)
        return (out / total.unsqueeze(-1)).reshape(n, self.heads * self.width) + self.bias


class GINELayer(nn.Module):
    """GINE: ``mlp(h_v + sum over in-edges of ReLU(h_u + edge(e_uv)))`` (core's ``GINEParts``)."""

    def __init__(self, d_in: int, d_out: int, heads: int = 1, edge_width: int = 0, inner: int = 0):
        super().__init__()
        self.edge = nn.Linear(edge_width, d_in)
        self.mlp = nn.Sequential(nn.Linear(d_in, inner), nn.ReLU(), nn.Linear(inner, d_out))

    def forward(self, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        return self.mlp(x + _summed(torch.relu(x[src] + self.edge(edge_attr)), dst, x.shape[0]))


LAYERS = {"sage": SageLayer, "gcn": GCNLayer, "gat": GATLayer, "gine": GINELayer}


class Units(nn.Module):
    """A fitted regression's outputs back in the labels' units (``z * std + mean``), as
    ``predict`` writes them; identity where the run learnt the values themselves."""

    def __init__(self, width: int, scaled: bool):
        super().__init__()
        self.scaled = scaled
        if scaled:
            self.register_buffer("mean", torch.zeros(width))
            self.register_buffer("std", torch.ones(width))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z * self.std + self.mean if self.scaled else z


class NodeProgram(nn.Module):
    """``(x [N, F] float32, edge_index [2, E] int64) -> logits [N, C]``: a homogeneous node model
    over every edge it is given (full neighbourhoods), ReLU between layers, no dropout."""

    def __init__(self, spec: dict):
        super().__init__()
        arch, width = spec["arch"], spec.get("edge_dim", 0)
        heads = spec["heads"] if arch == "gat" else 1
        dims = layer_dims(spec["layers"], spec["hidden"], spec["in_dim"], spec["out_dim"], heads)
        extra = {"gat": {"edge_width": width}, "gine": {"edge_width": width, "inner": spec["hidden"]}}.get(arch, {})
        self.layers = nn.ModuleList(LAYERS[arch](d_in, d_out, h, **extra) for d_in, d_out, h in dims)
        self.units = Units(spec["out_dim"], spec["scaled"])

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, *edge_attr: torch.Tensor) -> torch.Tensor:
        """``edge_attr`` (float32 [E, D], in ``edge_index``'s order): where the run read edge features."""
        src, dst = edge_index[0], edge_index[1]
        for i, layer in enumerate(self.layers):
            x = layer(x, src, dst, *edge_attr)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        return self.units(x)


class GraphProgram(GIN):
    """``(x [N, F], edge_index [2, E], batch [N] int64, graphs numbered 0..G-1) -> logits [G, C]``:
    core's GIN with its two library calls written in torch, the neighbour sum and the pooling."""

    def __init__(self, spec: dict):
        super().__init__(_graph_spec(spec), spec["in_dim"], spec["out_dim"])
        self.units = Units(spec["out_dim"], spec["scaled"])

    def aggregate(self, index: int, graph, h: torch.Tensor) -> torch.Tensor:
        edge_index = graph[0]
        return h + _summed(h[edge_index[0]], edge_index[1], h.shape[0])

    def readout(self, graph, h: torch.Tensor) -> torch.Tensor:
        batch = graph[1]
        count = batch.max() + 1  # the one data-dependent size: graphs in the batch
        pooled = _summed(h, batch, h.shape[0])
        if self.spec.pooling == "mean":
            pooled = pooled / _in_degree(batch, h.shape[0], h.dtype).clamp(min=1).unsqueeze(-1)
        return pooled[:count]

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor, *edge_attr) -> torch.Tensor:
        return self.units(GIN.forward(self, (edge_index, batch, *edge_attr), x))


class EdgeGraphProgram(GraphProgram, GINE):
    """GINE for graph tasks: ``(x, edge_index, batch, edge_attr [E, D]) -> logits [G, C]``; each
    layer sums ``ReLU(h_u + edge_maps[i](e_uv))`` onto ``h_v``."""

    def __init__(self, spec: dict):
        GINE.__init__(self, _graph_spec(spec), spec["in_dim"], spec["out_dim"], spec["edge_dim"])
        self.units = Units(spec["out_dim"], spec["scaled"])

    def aggregate(self, index: int, graph, h: torch.Tensor) -> torch.Tensor:
        edge_index, _, edge_attr = graph
        messages = torch.relu(h[edge_index[0]] + self.edge_maps[index](edge_attr))
        return h + _summed(messages, edge_index[1], h.shape[0])


def _graph_spec(spec: dict) -> ModelSpec:
    return ModelSpec(arch=spec["arch"], hidden=spec["hidden"], layers=spec["layers"], pooling=spec["pooling"])


def type_key(edge_type) -> str:
    return "__".join(edge_type)


class TypedProgram(nn.Module):
    """Heterogeneous GraphSAGE (core's ``HeteroSAGE`` on either library): one flat input per node
    type (``x__TYPE`` float32 [N_t, F_t], or ``ids__TYPE`` int64 for a featureless type's
    embedding rows) and per given edge type (``edge_index__SRC__REL__DST`` [2, E]); a reverse
    type the run added (``rev_REL``) is its mirror flipped, not an input. Every relation adds its
    mean into its destination type; ReLU between layers on the types a layer updated, the others
    keep their states. Out: the labelled type's logits (node tasks), or the final states of a link
    task's two end types (``states__TYPE``), scored by the decoder the description names."""

    def __init__(self, spec: dict):
        super().__init__()
        self.spec = spec
        hidden = spec["hidden"]
        self.inputs = nn.ModuleDict(
            {
                t: nn.Linear(w, hidden) if w else nn.Embedding(spec["num_nodes"][t], hidden)
                for t, w in spec["in_dims"].items()
            }
        )
        self.edge_types = [tuple(et) for et in spec["edge_types"]]
        self.mirrors = {tuple(rev): tuple(et) for rev, et in spec["mirrors"]}
        self.layers = nn.ModuleList(
            nn.ModuleDict({type_key(et): SageLayer(hidden, hidden) for et in self.edge_types})
            for _ in range(spec["layers"])
        )
        if spec["task"] == "node":
            self.head = nn.Linear(hidden, spec["out_dim"])
            self.units = Units(spec["out_dim"], spec["scaled"])

    def forward(self, *flat: torch.Tensor) -> tuple[torch.Tensor, ...] | torch.Tensor:
        names = self.spec["inputs"]
        given = dict(zip(names, flat))
        h = {t: self.inputs[t](given[f"x__{t}"] if f"x__{t}" in given else given[f"ids__{t}"]) for t in self.inputs}
        edges = {et: given[f"edge_index__{type_key(et)}"] for et in self.edge_types if et not in self.mirrors}
        edges |= {rev: edges[et].flip(0) for rev, et in self.mirrors.items()}
        for i, layer in enumerate(self.layers):
            out: dict[str, torch.Tensor] = {}
            for et in self.edge_types:
                src_t, _, dst_t = et
                y = layer[type_key(et)](h[src_t], edges[et][0], edges[et][1], h[dst_t])
                out[dst_t] = out[dst_t] + y if dst_t in out else y
            if i < len(self.layers) - 1:
                out = {t: torch.relu(v) for t, v in out.items()}
            h = h | out
        if self.spec["task"] == "node":
            return self.units(self.head(torch.relu(h[self.spec["target"]])))
        return tuple(h[t] for t in self.spec["outputs_of"])


def program(spec: dict) -> nn.Module:
    """The module for an export description (see :mod:`gnnbridge.core.export`), weights unset."""
    if spec.get("typed"):
        return TypedProgram(spec).eval()
    if spec["task"] == "graph":
        return (EdgeGraphProgram if spec.get("edge_dim") else GraphProgram)(spec).eval()
    return NodeProgram(spec).eval()
