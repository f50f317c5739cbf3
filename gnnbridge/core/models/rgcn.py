"""R-GCN (Schlichtkrull et al., 2018) on heterogeneous graphs, written once for every backend
(:mod:`~gnnbridge.core.models.relational` says why not the libraries' layers).

Layer ``l`` gives each node ``i`` of a type some relation points into::

    h_i' = W_0 h_i + b + sum over relations r into i's type of  W_r mean_{j in N_r(i)} h_j

(the paper's ``1/c_{i,r} = 1/|N_r(i)|``; a relation with no edge into ``i`` adds nothing). The
self-loop ``W_0`` and bias ``b`` are one per layer, shared by all node types, as in the paper.
``W_r`` is a full matrix per relation, or (``model.options.num_bases=B``) a combination
``sum_b a_rb V_b`` of ``B`` shared bases, or (``num_blocks=B``) block-diagonal with ``B`` blocks
of ``hidden/B`` squared. Weights are stored ``[in, out]`` (``x @ W``) under PyG ``RGCNConv``'s
names (``weight``, ``comp``, ``root``, ``bias``), with its Glorot initialisation.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from gnnbridge.core.config import ModelSpec
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.models import init
from gnnbridge.core.models.relational import RelationalModel


def check_decomposition(num_bases: int | None, num_blocks: int | None, hidden: int) -> None:
    """One line for options that cannot build an R-GCN."""
    if num_bases is not None and num_blocks is not None:
        raise ConfigError(
            f"model.options.num_bases={num_bases} and model.options.num_blocks={num_blocks} are both set; "
            "R-GCN decomposes its relation weights one way: keep one (bases or blocks), or neither."
        )
    for name, value in (("num_bases", num_bases), ("num_blocks", num_blocks)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"model.options.{name}={value!r} is not a positive integer.")
    if num_blocks is not None and hidden % num_blocks:
        divisors = [d for d in range(2, hidden + 1) if hidden % d == 0][:4]
        raise ConfigError(
            f"model.options.num_blocks={num_blocks} does not divide model.hidden={hidden}; the block-diagonal "
            f"weights split each state into equal blocks: use a divisor of {hidden} "
            f"({', '.join(map(str, divisors))}, ...) or another model.hidden."
        )


def glorot(param: torch.Tensor) -> None:
    """Uniform in ``±sqrt(6 / (fan_in + fan_out))`` over the last two dimensions (PyG's glorot)."""
    bound = math.sqrt(6.0 / (param.size(-2) + param.size(-1)))
    nn.init.uniform_(param, -bound, bound)


class RGCNLayer(nn.Module):
    def __init__(self, relations: int, hidden: int, num_bases: int | None, num_blocks: int | None):
        super().__init__()
        self.num_bases, self.num_blocks = num_bases, num_blocks
        if num_bases is not None:
            self.weight = nn.Parameter(torch.empty(num_bases, hidden, hidden))
            self.comp = nn.Parameter(torch.empty(relations, num_bases))
            glorot(self.comp)
        elif num_blocks is not None:
            size = hidden // num_blocks
            self.weight = nn.Parameter(torch.empty(relations, num_blocks, size, size))
        else:
            self.weight = nn.Parameter(torch.empty(relations, hidden, hidden))
        self.root = nn.Parameter(torch.empty(hidden, hidden))
        self.bias = nn.Parameter(torch.zeros(hidden))
        glorot(self.weight)
        glorot(self.root)

    def relation_weights(self) -> torch.Tensor:
        """``[R, in, out]`` (bases combined once per layer call), or ``[R, B, in/B, out/B]``."""
        if self.num_bases is None:
            return self.weight
        bases, width, out = self.weight.shape
        return (self.comp @ self.weight.reshape(bases, -1)).view(-1, width, out)

    def transform(self, weights: torch.Tensor, relation: int, m: torch.Tensor) -> torch.Tensor:
        """``m @ W_r``: block by block for block-diagonal weights."""
        if self.num_blocks is None:
            return m @ weights[relation]
        rows, width = m.shape  # sized in full: a batch may hold no destination of the relation
        blocks = m.view(rows, self.num_blocks, width // self.num_blocks)
        return torch.einsum("nbi,bio->nbo", blocks, weights[relation]).reshape(rows, width)


class HeteroRGCN(RelationalModel):
    # Glorot over the last two dimensions (per relation, basis or block), a zero bias: PyG
    # RGCNConv's initialisation, drawn by core (:mod:`gnnbridge.core.models.init`).
    LAYER_INIT = {"weight": init.glorot, "comp": init.glorot, "root": init.glorot, "bias": init.zeros}

    def __init__(
        self,
        spec: ModelSpec,
        data,
        out_dim: int,
        decoder: str = "dot",
        num_bases: int | None = None,
        num_blocks: int | None = None,
    ):
        check_decomposition(num_bases, num_blocks, spec.hidden)
        self.num_bases, self.num_blocks = num_bases, num_blocks
        super().__init__(spec, data, out_dim, decoder)

    def make_conv(self, edge_types: list, hidden: int) -> nn.Module:
        return RGCNLayer(len(edge_types), hidden, self.num_bases, self.num_blocks)

    def conv(self, index: int, graph, h: dict[str, torch.Tensor], block: int) -> dict[str, torch.Tensor]:
        layer = self.convs[index]
        x_src, x_dst, _, n_dst = self.inputs_of(graph, block, h)
        weights = layer.relation_weights()
        out = {d: x @ layer.root + layer.bias for d, x in x_dst.items()}
        for r, et in enumerate(self.edge_types):
            s, _, d = et
            out[d] = out[d] + layer.transform(weights, r, self.mean(graph, block, et, x_src[s], n_dst[d]))
        return out
