"""GINE: GIN with edge features (Hu et al., ICLR 2020; PyG's and DGL's ``GINEConv``), for node
tasks (one model on sampled blocks, with layer-wise inference) and graph tasks (GIN's readout).

A layer computes ``MLP(h_v + sum over in-edges u -> v of ReLU(h_u + W_e e_uv))``: only the sum is
the library's ``GINEConv``; the map of an edge's features to the layer's input width (``W_e``;
PyG's ``GINEConv(edge_dim=...)`` holds one, DGL's none) and the MLP after the sum are held here,
so every parameter has one name, one shape and one initial draw on every backend, and a model
trained on one library loads into the other.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gnnbridge.core.config import ModelSpec
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.models import init
from gnnbridge.core.models.gin import GIN

# A node model's layer parameters by neutral name (the same on every backend) and how they start.
GINE_NAMES = {
    name: name for name in ("edge.weight", "edge.bias", "mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias")
}
GINE_INIT = {name: init.kaiming_uniform if name.endswith("weight") else init.zeros for name in GINE_NAMES}


def edge_dim(data: Any) -> int:
    """The width of ``data``'s edge features, or one line: GINE has nothing to read without them."""
    features = getattr(data, "edge_attr", None)
    if features is None:
        raise ConfigError(
            f"model.arch=gine reads edge features, but dataset '{getattr(data, 'name', '?')}' has none; give them "
            "(edge_attr float32 [E, D] in an .npz, data.edge_attr in PyG, g.edata['feat'] in DGL) or use "
            "model.arch=gin (graphs) or sage (nodes)."
        )
    return int(features.shape[1])


class GINEParts(nn.Module):
    """One node-model layer's own parameters: the edge map and the MLP; the backend adds ``conv``,
    its library's ``GINEConv`` (which sums, and holds no parameter)."""

    def __init__(self, d_in: int, d_out: int, edge_width: int, inner: int):
        """``inner``: the MLP's hidden width (``model.hidden``; not ``d_out``, which on the last
        layer is the class count: a ReLU between two class-wide maps starves the logits)."""
        super().__init__()
        self.edge = nn.Linear(edge_width, d_in)
        self.mlp = nn.Sequential(nn.Linear(d_in, inner), nn.ReLU(), nn.Linear(inner, d_out))


def summing(conv: nn.Module) -> nn.Module:
    """A library's ``GINEConv`` (fixed epsilon, no inner network) as a node layer's sum: its
    epsilon buffer (a constant 0) kept out of checkpoints, where it would sit under each
    backend's own module path and stop a model from moving between the libraries."""
    eps = getattr(conv, "eps", None)
    if isinstance(eps, torch.Tensor) and "eps" in dict(conv.named_buffers(recurse=False)):
        conv.register_buffer("eps", eps, persistent=False)
    return conv


class GINE(GIN):
    """GIN for graph tasks with an edge map per layer: a backend's ``aggregate`` sums
    ``ReLU(h_u + edge_maps[i](e_uv))`` onto ``h_v`` with its ``GINEConv``."""

    def __init__(self, spec: ModelSpec, in_dim: int, out_dim: int, edge_width: int):
        super().__init__(spec, in_dim, out_dim)
        widths = [in_dim] + [spec.hidden] * spec.layers
        self.edge_maps = nn.ModuleList(nn.Linear(edge_width, widths[i]) for i in range(spec.layers))
