"""HGT, the Heterogeneous Graph Transformer (Hu et al., 2020), written once for every backend
(:mod:`~gnnbridge.core.models.relational` says why not the libraries' layers); a backend
supplies only the softmax over a destination's incoming edges and the weighted sum.

Layer ``l``, with ``H = model.heads`` heads of width ``d = hidden / H``, for an edge ``s -> t``
of relation ``r`` (types ``τ(s)``, ``τ(t)``), per head::

    score(s, t) = (K_τ(s) h_s  W_att^r) · (Q_τ(t) h_t)  μ_r / sqrt(d)
    msg(s, t)   =  V_τ(s) h_s  W_msg^r
    agg(t)      =  sum over every edge into t, of any relation, of softmax_t(score) msg
    h_t'        =  σ(skip_τ(t)) A_τ(t)(GELU(agg(t))) + (1 - σ(skip_τ(t))) h_t

``K, Q, V, A`` are linear maps per node type, ``W_att^r, W_msg^r`` a ``d × d`` matrix per
relation and head, ``μ_r`` a prior per relation and head (initially 1), ``skip`` a gate per
node type (initially 1). The attention is one softmax over all of ``t``'s incoming edges across
relations (the paper's, and PyG's ``HGTConv``'s). A destination with no incoming edge aggregates
zero: its new state is the gated skip term plus ``A``'s bias. The relative temporal encoding is
left out (the graphs here carry no edge times). Between layers: dropout (the GELU is inside).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from gnnbridge.core.config import ModelSpec
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.models import init
from gnnbridge.core.models.relational import RelationalModel


def relation_name(edge_type: tuple) -> str:
    return "__".join(edge_type)


class HGTLayer(nn.Module):
    def __init__(self, edge_types: list, hidden: int, heads: int):
        super().__init__()
        sources, targets = sorted({et[0] for et in edge_types}), sorted({et[2] for et in edge_types})
        self.heads, self.width = heads, hidden // heads
        linears = lambda types: nn.ModuleDict({t: nn.Linear(hidden, hidden) for t in types})  # noqa: E731
        self.k, self.v, self.q, self.a = linears(sources), linears(sources), linears(targets), linears(targets)
        self.skip = nn.ParameterDict({t: nn.Parameter(torch.ones(1)) for t in targets})
        per_head = lambda: nn.Parameter(torch.empty(heads, self.width, self.width))  # noqa: E731
        self.k_rel = nn.ParameterDict({relation_name(et): per_head() for et in edge_types})
        self.v_rel = nn.ParameterDict({relation_name(et): per_head() for et in edge_types})
        self.p_rel = nn.ParameterDict({relation_name(et): nn.Parameter(torch.ones(heads)) for et in edge_types})
        bound = math.sqrt(6.0 / (2 * self.width))  # Glorot over each head's d x d matrix
        for param in [*self.k_rel.values(), *self.v_rel.values()]:
            nn.init.uniform_(param, -bound, bound)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], self.heads, self.width)


class HeteroHGT(RelationalModel):
    # Each head's relation matrices Glorot, the priors and skip gates 1, drawn by core
    # (:mod:`gnnbridge.core.models.init`); the per-type maps are torch Linears, drawn as torch does.
    LAYER_INIT = {"k_rel": init.glorot, "v_rel": init.glorot, "p_rel": init.ones, "skip": init.ones}

    def __init__(self, spec: ModelSpec, data, out_dim: int, decoder: str = "dot"):
        if spec.hidden % spec.heads:
            raise ConfigError(
                f"model.hidden={spec.hidden} is not divisible by model.heads={spec.heads}; HGT splits each "
                f"state over its heads: use a multiple of {spec.heads} for model.hidden, or a divisor of "
                f"{spec.hidden} for model.heads."
            )
        super().__init__(spec, data, out_dim, decoder)

    def make_conv(self, edge_types: list, hidden: int) -> nn.Module:
        return HGTLayer([tuple(et) for et in edge_types], hidden, self.spec.heads)

    def activate(self, h: torch.Tensor) -> torch.Tensor:
        return nn.functional.dropout(h, self.spec.dropout, self.training)

    def conv(self, index: int, graph, h: dict[str, torch.Tensor], block: int) -> dict[str, torch.Tensor]:
        layer = self.convs[index]
        x_src, x_dst, _, n_dst = self.inputs_of(graph, block, h)
        k = {t: layer.split(layer.k[t](x)) for t, x in x_src.items()}
        v = {t: layer.split(layer.v[t](x)) for t, x in x_src.items()}
        q = {t: layer.split(layer.q[t](x)) for t, x in x_dst.items()}
        scores, values = {}, {}
        for et in self.edge_types:
            s, _, d = et
            rel = relation_name(et)
            src, dst = self.edges(graph, block, et)
            key = torch.einsum("nhi,hio->nho", k[s], layer.k_rel[rel])
            scores[et] = (key[src] * q[d][dst]).sum(-1) * layer.p_rel[rel] / math.sqrt(layer.width)
            values[et] = torch.einsum("nhi,hio->nho", v[s], layer.v_rel[rel])[src]
        agg = self.attend(graph, block, scores, values, n_dst)
        out = {}
        for d, x in x_dst.items():
            gate = torch.sigmoid(layer.skip[d])
            y = layer.a[d](nn.functional.gelu(agg[d].reshape(x.shape)))
            out[d] = gate * y + (1 - gate) * x
        return out
