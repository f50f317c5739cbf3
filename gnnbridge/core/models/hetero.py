"""Heterogeneous GraphSAGE from one neutral spec: the parts both backends share live here, the
relation-wise message passing is each library's own (PyG ``HeteroConv``, DGL ``HeteroGraphConv``,
each over its ``SAGEConv``).

Shared, so that one spec builds the same model on both backends:

* the input layer: a linear projection of each featured node type to ``model.hidden``, and a
  learnable embedding per node of each featureless type (the model reads the type's node ids);
* between layers: ReLU and dropout on every node type a layer updated; a node type no relation
  points into keeps its representation (both libraries return nothing for it);
* the heads: a linear classifier on the labelled node type, or a link decoder on (source,
  destination) pairs: ``dot`` (the inner product of the two embeddings) or ``mlp`` (a two-layer
  perceptron on their concatenation).

``forward(graph, x)`` gives logits for the labelled type's sampled nodes, seeds first;
``forward(graph, x, pairs)`` gives one score per pair. ``x`` maps each node type to the features
of the batch's nodes, or, for a featureless type, their ids.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import torch
from torch import nn

from gnnbridge.core.config import DECODERS, ModelSpec
from gnnbridge.core.errors import ConfigError


class HeteroSAGE(nn.Module):
    heterogeneous = True
    # The relation's SAGEConv parameters by neutral name (see :meth:`neutral_parameters`).
    SAGE_NAMES: dict[str, str] = {}

    def __init__(self, spec: ModelSpec, data: Any, out_dim: int, decoder: str = "dot"):
        super().__init__()
        if decoder not in DECODERS:
            raise ConfigError(
                f"model.options.decoder={decoder!r} is not a link decoder; choose one of: {', '.join(DECODERS)}."
            )
        self.spec = spec
        self.is_link = data.is_link
        self.target = data.target_edge if data.is_link else data.target_node
        hidden = spec.hidden
        self.inputs = nn.ModuleDict(
            {
                t: nn.Linear(width, hidden) if width else nn.Embedding(data.num_nodes[t], hidden)
                for t, width in data.feature_dims().items()
            }
        )
        self.edge_types = [tuple(et) for et in data.edge_types]
        self.convs = nn.ModuleList(self.make_conv(data.edge_types, hidden) for _ in range(spec.layers))
        self._neutral_init()
        self.decoder = decoder
        if not self.is_link:
            self.head = nn.Linear(hidden, out_dim)
        elif decoder == "mlp":
            self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def _neutral_init(self) -> None:
        """The libraries initialise SAGEConv differently (DGL: Xavier with the ReLU gain, PyG:
        Kaiming-uniform), which with a dot-product decoder makes first scores an order of magnitude
        apart. Both get torch's ``nn.Linear`` initialisation here, so one spec starts alike."""
        for param in self.convs.parameters():
            if param.dim() == 2:
                nn.init.kaiming_uniform_(param, a=5**0.5)
            else:
                nn.init.zeros_(param)

    @abstractmethod
    def make_conv(self, edge_types: list, hidden: int) -> nn.Module:
        """One layer: the library's relation-wise wrapper over a SAGEConv per edge type, summed."""

    @abstractmethod
    def relation_conv(self, index: int, edge_type: tuple) -> nn.Module:
        """Layer ``index``'s SAGEConv for ``edge_type`` (the module ``SAGE_NAMES`` names)."""

    def neutral_parameters(self) -> dict[str, torch.Tensor]:
        """Core-held parameters under their own names (``inputs.*``, ``head.*``) and each
        relation's as ``layers.{i}.{src}__{rel}__{dst}.{neigh.weight|root.weight|bias}``."""
        out = {name: p for name, p in self.named_parameters() if not name.startswith("convs.")}
        for i in range(self.spec.layers):
            for et in self.edge_types:
                params = dict(self.relation_conv(i, et).named_parameters())
                for neutral, native in self.SAGE_NAMES.items():
                    out[f"layers.{i}.{'__'.join(et)}.{neutral}"] = params[native]
        return out

    @abstractmethod
    def conv(self, index: int, graph: Any, h: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Layer ``index`` on the native graph: new states of the node types some relation reaches."""

    def encode(self, graph: Any, x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        h = {t: self.inputs[t](feats) for t, feats in x.items()}
        for i in range(self.spec.layers):
            out = self.conv(i, graph, h)
            last = i == self.spec.layers - 1
            h = {
                t: (v if last else nn.functional.dropout(torch.relu(v), self.spec.dropout, self.training))
                for t, v in out.items()
            } | {t: self.carry(i, graph, t, v) for t, v in h.items() if t not in out}
        return h

    def carry(self, index: int, graph: Any, node_type: str, h: torch.Tensor) -> torch.Tensor:
        """The state a node type no relation reaches in layer ``index`` keeps (all of it, unless
        the library's layer computes fewer nodes than it reads, as DGL's blocks do)."""
        return h

    def forward(self, graph: Any, x: dict[str, torch.Tensor], pairs: torch.Tensor | None = None) -> torch.Tensor:
        h = self.encode(graph, x)
        if not self.is_link:
            return self.head(torch.relu(h[self.target]))
        src, dst = h[self.target[0]][pairs[0]], h[self.target[2]][pairs[1]]
        if self.decoder == "dot":
            return (src * dst).sum(-1)
        return self.head(torch.cat([src, dst], dim=-1)).squeeze(-1)
