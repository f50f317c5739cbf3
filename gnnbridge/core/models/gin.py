"""GIN for graph classification, with every parameter owned by core.

The Graph Isomorphism Network (Xu et al., ICLR 2019), as DGL's multi-GPU graph-classification
tutorial builds it: each layer sums the in-neighbours' states onto the node's own
(``h + sum_{u->v} h_u``, epsilon fixed at 0), runs an MLP (Linear, BatchNorm, ReLU, Linear),
then BatchNorm and ReLU. The readout pools the input features and every layer's output
(``model.pooling``: sum or mean), maps each through its own linear head, applies dropout and sums
the class scores, so shallow and deep structure both reach the prediction.

Only the neighbour sum and the pooling are library calls (PyG's or DGL's ``GINConv`` without an
inner network, and their global pooling); a backend fills in :meth:`GIN.aggregate` and
:meth:`GIN.readout`. So the parameters have the same names and shapes on every backend by
construction, and a state dict trained on one backend loads into the other unchanged.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnbridge.core.config import ModelSpec
from gnnbridge.core.contracts.interfaces import GraphClassifier


class BatchNorm(nn.BatchNorm1d):
    """BatchNorm over a batch's nodes that uses its running statistics when the batch has a
    single node: batch statistics of one row are undefined and PyTorch raises, which a batch
    holding one one-node graph would otherwise turn into a crashed rank."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and x.shape[0] == 1:
            return F.batch_norm(
                x, self.running_mean, self.running_var, self.weight, self.bias, training=False, eps=self.eps
            )
        return super().forward(x)


def gin_mlp(in_dim: int, hidden: int) -> nn.Sequential:
    # No linear biases: each Linear feeds a BatchNorm, whose shift does that job.
    return nn.Sequential(
        nn.Linear(in_dim, hidden, bias=False), BatchNorm(hidden), nn.ReLU(), nn.Linear(hidden, hidden, bias=False)
    )


class GIN(GraphClassifier):
    def __init__(self, spec: ModelSpec, in_dim: int, out_dim: int):
        super().__init__()
        self.spec = spec
        widths = [in_dim] + [spec.hidden] * spec.layers
        self.mlps = nn.ModuleList(gin_mlp(widths[i], spec.hidden) for i in range(spec.layers))
        self.norms = nn.ModuleList(BatchNorm(spec.hidden) for _ in range(spec.layers))
        self.heads = nn.ModuleList(nn.Linear(w, out_dim) for w in widths)
        self.dropout = nn.Dropout(spec.dropout)

    def init_rules(self) -> dict:
        """Every parameter is a core-owned torch module's, drawn as torch draws it
        (:mod:`gnnbridge.core.models.init`); no library layer to name rules for."""
        return {}

    @abstractmethod
    def aggregate(self, index: int, graph: Any, h: torch.Tensor) -> torch.Tensor:
        """``h_v + sum of h_u over in-edges u -> v`` for every node of the batched graph."""

    @abstractmethod
    def readout(self, graph: Any, h: torch.Tensor) -> torch.Tensor:
        """``[num_graphs, width]``: ``h`` pooled per graph by ``spec.pooling`` (sum or mean)."""

    def forward(self, graph: Any, x: torch.Tensor) -> torch.Tensor:
        states = [x]
        h = x
        for i in range(self.spec.layers):
            h = torch.relu(self.norms[i](self.mlps[i](self.aggregate(i, graph, h))))
            states.append(h)
        return sum(self.dropout(head(self.readout(graph, s))) for head, s in zip(self.heads, states))
