"""Heterogeneous models from one neutral spec: :class:`HeteroModel` holds what every one of them
shares; :class:`HeteroSAGE` is GraphSAGE over each library's own relation-wise layers (PyG
``HeteroConv``, DGL ``HeteroGraphConv``, each over its ``SAGEConv``); R-GCN and HGT are written in
core (:mod:`~gnnbridge.core.models.relational`).

Shared, so that one spec builds the same model on both backends:

* the input layer: a linear projection of each featured node type to ``model.hidden``, and a
  learnable embedding per node of each featureless type (the model reads the type's node ids;
  ``model.embeddings=sparse`` gives the tables sparse gradients, :mod:`~gnnbridge.core.training.sparse`);
* between layers: ReLU and dropout (HGT: dropout) on every node type a layer updated; a node type no relation
  points into keeps its representation (both libraries return nothing for it); every relation
  adds its root term even where the batch drew none of its edges, so a node's output is a
  function of its own neighbourhood alone, as exact layer-wise inference needs;
* the heads: a linear classifier on the labelled node type, or a link decoder on (source,
  destination) pairs: ``dot`` (the inner product of the two embeddings) or ``mlp`` (a two-layer
  perceptron on their concatenation); an edge task's head is that perceptron with a column per
  class, label or value (``model.options.decoder`` is link prediction's).

HeteroSAGE's relation-wise sum is called per relation by each backend (not through ``HeteroConv`` /
``HeteroGraphConv``'s forward, which skip a relation without edges), in one fixed order.

``forward(graph, x)`` gives logits for the labelled type's sampled nodes, seeds first;
``forward(graph, x, pairs)`` gives one score per pair (an edge task: a row per pair). ``x`` maps
each node type to the features of the batch's nodes, or, for a featureless type, their ids.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import torch
from torch import nn

from gnnbridge.core.config import DECODERS, ModelSpec
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.models import init
from gnnbridge.core.models.init import Rule
from gnnbridge.core.records.hetero import HeteroGraphData


class HeteroModel(nn.Module):
    """What every heterogeneous model shares, whatever its layers: the input layer, the heads,
    ``layer`` / ``encode`` / ``classify`` / ``decode`` (so core's typed layer-wise inference runs
    it) and neutral parameter names. A subclass gives the layers: ``make_conv`` (one layer's
    module), ``conv`` (that layer on a batch) and ``carry`` (the rows an unreached type keeps)."""

    # Checkpoints record it (``model_revision``) and refuse another: revision 2 adds every
    # relation's root term even where a batch drew none of its edges (revision 1 skipped the
    # relation), so a revision-1 checkpoint would no longer reproduce its own numbers.
    revision = 2

    heterogeneous = True
    typed_layerwise = True  # core's typed layer-wise inference can run it (embed_inputs, layer, classify, decode)
    # Rules for the layers' own parameters by their name inside a layer (see :meth:`init_rules`);
    # None: the model keeps its own initialisation (a plugin's subclass that names none).
    LAYER_INIT: dict[str, Rule] | None = None

    def __init__(self, spec: ModelSpec, data: Any, out_dim: int, decoder: str = "dot"):
        super().__init__()
        if decoder not in DECODERS:
            raise ConfigError(
                f"model.options.decoder={decoder!r} is not a link decoder; choose one of: {', '.join(DECODERS)}."
            )
        self.spec = spec
        self.is_link = data.is_link
        # Link and edge tasks score (source, destination) pairs; an edge task's pairs get its
        # target's columns (classes, labels or values) from a perceptron on both ends' states.
        self.scores_pairs = data.target_edge is not None
        self.target = data.target_edge if self.scores_pairs else data.target_node
        hidden = spec.hidden
        self.inputs = nn.ModuleDict(
            {
                t: nn.Linear(width, hidden)
                if width
                else nn.Embedding(data.num_nodes[t], hidden, sparse=spec.embeddings == "sparse")
                for t, width in data.feature_dims().items()
            }
        )
        self.edge_types = [tuple(et) for et in data.edge_types]
        self.convs = nn.ModuleList(self.make_conv(data.edge_types, hidden) for _ in range(spec.layers))
        self.decoder = decoder
        # An edge task's head also reads the scored edge's own features, where its type has some.
        features = getattr(data, "edge_attr", {}) if data.is_edge else {}
        self.pair_features = int(features[self.target].shape[1]) if self.target in features else 0
        if not self.scores_pairs:
            self.head = nn.Linear(hidden, out_dim)
        elif decoder == "mlp" or not self.is_link:
            width = 2 * hidden + self.pair_features
            self.head = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))

    def leaves_parameters_unused(self) -> bool:
        """Whether a training step may leave some of the parameters without a gradient (what DDP's
        ``find_unused_parameters`` is for). Every relation runs on every batch, edges or none, so
        only node types the heads never read can: a batch always holds the types the heads read
        (the seeds'), but may draw no node of another, whose input layer then takes no part, and
        the last layers' relations into such a type never reach the loss. Over the heads' types
        alone (a homogeneous graph's link or edge task, users rating items) every parameter takes
        part in every step, and DDP, told otherwise, warns once per rank that it found none unused."""
        read = {self.target[0], self.target[2]} if self.scores_pairs else {self.target}
        return any(t not in read for t in self.inputs)

    def init_rules(self) -> dict[str, Rule] | None:
        """``{neutral name: rule}`` for the layers' parameters that ``LAYER_INIT`` names (by
        their name inside a layer, its first part: ``weight``, ``k_rel``); the input layer, the
        heads and a layer's torch modules are drawn as torch draws them
        (:mod:`gnnbridge.core.models.init`). None (``LAYER_INIT`` unset): the model keeps its
        own initialisation."""
        if self.LAYER_INIT is None:
            return None
        rules = {}
        for name, _ in self.convs.named_parameters():
            inner = name.split(".")[1]  # "0.k_rel.paper__cites__paper" -> "k_rel"
            if inner in self.LAYER_INIT:
                rules[f"convs.{name}"] = self.LAYER_INIT[inner]
        return rules

    @abstractmethod
    def make_conv(self, edge_types: list, hidden: int) -> nn.Module:
        """One layer's module, over every edge type."""

    def neutral_parameters(self) -> dict[str, torch.Tensor]:
        """Every parameter under its own name: right for a model whose layers are core modules,
        the same on every backend; a model over a library's layers renames those."""
        return dict(self.named_parameters())

    @abstractmethod
    def conv(self, index: int, graph: Any, h: dict[str, torch.Tensor], block: int) -> dict[str, torch.Tensor]:
        """Layer ``index``'s weights on layer ``block`` of the native graph: the new states of
        every destination type of a relation. Every relation takes part even with no edge in
        the batch, so a node's state never depends on which other nodes share its batch (what
        makes layer-wise inference exact)."""

    def layer_inputs(self, h: dict, n_src: dict[str, int], n_dst: dict[str, int]) -> tuple[dict, dict]:
        """Each relation type's source and destination rows, cut once per node type and layer
        (each cut is a zero-filled gradient of the whole state in the backward pass, so not once
        per relation)."""
        sources = {s for s, _, _ in self.edge_types}
        targets = {d for _, _, d in self.edge_types}
        return (
            {t: states(h, t, n_src.get(t, 0)) for t in sources},
            {t: states(h, t, n_dst.get(t, 0)) for t in targets},
        )

    @abstractmethod
    def carry(self, block: int, graph: Any, node_type: str, h: torch.Tensor) -> torch.Tensor:
        """The rows of a node type no relation points into that layer ``block`` passes on (its
        destination nodes, a prefix of its sources)."""

    def activate(self, h: torch.Tensor) -> torch.Tensor:
        """What follows every layer but the last: ReLU and dropout."""
        return nn.functional.dropout(torch.relu(h), self.spec.dropout, self.training)

    def embed_inputs(self, x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The input layer: each type's features projected (or its node ids embedded)."""
        return {t: self.inputs[t](feats) for t, feats in x.items()}

    def layer(self, index: int, graph: Any, h: dict[str, torch.Tensor], block: int | None = None) -> dict:
        """Layer ``index`` on the graph's layer ``block`` (default ``index``), with the activation
        that follows it (none after the last): what core's typed layer-wise inference calls on a
        one-layer graph (``block=0``) for every node of a type."""
        out = self.conv(index, graph, h, index if block is None else block)
        if index == self.spec.layers - 1:
            return out
        return {t: self.activate(v) for t, v in out.items()}

    def encode(self, graph: Any, x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        h = self.embed_inputs(x)
        for i in range(self.spec.layers):
            out = self.layer(i, graph, h)
            h = out | {t: self.carry(i, graph, t, v) for t, v in h.items() if t not in out}
        return h

    def classify(self, h: torch.Tensor) -> torch.Tensor:
        """Class logits from the labelled type's final states."""
        return self.head(torch.relu(h))

    def decode(self, src: torch.Tensor, dst: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        """One score per (source, destination) row pair of final states (a link task's), or a
        row of the target's columns per pair (an edge task's, from the edge's ``features`` too
        where its type has them)."""
        if not self.is_link:
            return self.head(torch.cat([src, dst, *([features] if self.pair_features else [])], dim=-1))
        if self.decoder == "dot":
            return (src * dst).sum(-1)
        return self.head(torch.cat([src, dst], dim=-1)).squeeze(-1)

    def forward(
        self,
        graph: Any,
        x: dict[str, torch.Tensor],
        pairs: torch.Tensor | None = None,
        pair_features: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``pair_features``: an edge task's scored edges' features (a row per pair)."""
        h = self.encode(graph, x)
        if not self.scores_pairs:
            return self.classify(h[self.target])
        return self.decode(h[self.target[0]][pairs[0]], h[self.target[2]][pairs[1]], pair_features)


class HeteroSAGE(HeteroModel):
    """GraphSAGE over the library's own ``SAGEConv``, one per relation, summed per destination."""

    # The relation's SAGEConv parameters by neutral name (see :meth:`neutral_parameters`).
    SAGE_NAMES: dict[str, str] = {}
    # How a SAGEConv starts, by neutral name, on either library and on homogeneous graphs too (the
    # libraries' own draws differ: DGL Xavier with ReLU's gain, PyG Kaiming-uniform, which with a
    # dot-product decoder made first scores an order of magnitude apart): Kaiming-uniform
    # matrices, as torch's nn.Linear and PyG draw them, and a zero bias.
    SAGE_INIT: dict[str, Rule] = {
        "neigh.weight": init.kaiming_uniform,
        "root.weight": init.kaiming_uniform,
        "bias": init.zeros,
    }

    def init_rules(self) -> dict[str, Rule]:
        """Each relation's SAGEConv by :data:`SAGE_INIT`, under its neutral name."""
        return {
            f"layers.{i}.{'__'.join(et)}.{name}": rule
            for i in range(self.spec.layers)
            for et in self.edge_types
            for name, rule in self.SAGE_INIT.items()
        }

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


def states(h: dict[str, torch.Tensor], node_type: str, rows: int) -> torch.Tensor:
    """``h[node_type]``'s first ``rows`` rows, or an empty state where the batch has none of it.

    All of them is the tensor itself, not a slice: a slice's backward allocates and zero-fills a
    gradient of the whole tensor's size, and with a million rows a batch, on a graph of several
    relations, those fills were a quarter of a CPU step."""
    if node_type in h:
        return h[node_type] if rows == h[node_type].shape[0] else h[node_type][:rows]
    some = next(iter(h.values()))
    return some.new_zeros(0, some.shape[1])


def leaves_parameters_unused(model: nn.Module, data: Any) -> bool:
    """Whether DDP must look for parameters a training step of ``model`` on ``data`` left unused:
    what the model says (:meth:`HeteroModel.leaves_parameters_unused`), else yes for any model of
    a heterogeneous graph (a batch may hold no node of a type, or no edge of a relation, and
    nothing tells which parameters those feed)."""
    decide = getattr(model, "leaves_parameters_unused", None)
    if callable(decide):
        return bool(decide())
    return isinstance(data, HeteroGraphData) or bool(getattr(model, "heterogeneous", False))
