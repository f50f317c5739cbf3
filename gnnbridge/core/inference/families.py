"""The built-in task families (:mod:`gnnbridge.core.contracts.families`): what differs between
node, graph, link and edge tasks when a run's parts are assembled, one object per family
(:data:`BUILTIN_FAMILIES`, registered through ``register_tasks`` as a plugin's are), so that
:class:`~gnnbridge.core.inference.assembly.RunParts` and the trainer above it hold no branch on
the task.

A family says how a run samples (nodes, whole graphs, or pairs of one edge type), the width of a
training batch's outputs, which evaluator validates each epoch and which evaluates at the end
(``eval.mode``: layer-wise, every neighbour, or the training fanouts; whole graphs have one way
only), and in which order ``predict``'s rows come. What each item is predicted *as* (classes,
labels, values: the loss, the metrics, the monitor) is the target's business
(:mod:`gnnbridge.core.contracts.targets`), which every family takes.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from gnnbridge.core.config import SamplerKind, Task
from gnnbridge.core.contracts.families import TaskFamily
from gnnbridge.core.contracts.interfaces import Sampler
from gnnbridge.core.inference.evaluation import (
    EdgeEvaluator,
    Evaluator,
    GraphEvaluator,
    LayerwiseEvaluator,
    LinkEvaluator,
    SampledEvaluator,
    supports_layerwise,
)
from gnnbridge.core.inference.partitioned import PartitionedLayerwise, PartitionedTypedLayerwise, PartitionedTypedLinks
from gnnbridge.core.inference.placement import attach_remote_cache
from gnnbridge.core.inference.typed_layerwise import (
    TypedLayerwiseEdges,
    TypedLayerwiseEvaluator,
    TypedLayerwiseLinks,
    supports_typed_layerwise,
)
from gnnbridge.core.records.hetero import HeteroGraphData
from gnnbridge.core.sampling.build import make_hetero_sampler, make_sampler, partitioned_sampler
from gnnbridge.core.sampling.neighbors import ALL_NEIGHBORS


class RunParts(Protocol):
    """What a family reads of a run's parts (:class:`~gnnbridge.core.inference.assembly.RunParts`,
    which holds its family: named here by shape, not imported)."""

    config: Any
    data: Any
    backend: Any
    ctx: Any
    call: Any
    target: Any
    model: torch.nn.Module
    sampler: Sampler


class NodeFamily(TaskFamily):
    """Items that are nodes of one graph (homogeneous, or of one type of a heterogeneous one),
    sampled around each seed; the other families change what differs."""

    name = "node"
    kind = Task.NODE
    description = "a label (class, labels or values) per node of one graph"
    evaluator: type[SampledEvaluator] = SampledEvaluator  # items through a sampler
    typed: type[Evaluator] = TypedLayerwiseEvaluator  # items from one typed layer-wise pass

    def output_width(self, parts: RunParts) -> int:
        """The columns of a training batch's outputs: the record's (classes, labels or values)."""
        return parts.data.num_classes

    def negatives(self, parts: RunParts) -> int:
        """Training negatives per positive pair (link prediction's alone)."""
        return 0

    def sampler(self, parts: RunParts, every_neighbour: bool = False) -> Sampler:
        """The training sampler, or (``every_neighbour``) one taking all neighbours at every hop."""
        cfg = parts.config.sampler
        fanouts = [ALL_NEIGHBORS] * len(cfg.fanouts) if every_neighbour else cfg.fanouts
        if parts.data.partition is not None:
            sampler = partitioned_sampler(
                parts, fanouts, {} if every_neighbour else cfg.edge_fanouts, self.negatives(parts)
            )
            attach_remote_cache(sampler, parts.config.placement, parts.ctx)
            return sampler
        if isinstance(parts.data, HeteroGraphData):
            return make_hetero_sampler(
                parts.backend,
                parts.data,
                fanouts,
                {} if every_neighbour else cfg.edge_fanouts,
                SamplerKind.AUTO.value if every_neighbour else cfg.kind,
                self.negatives(parts),
            )
        if every_neighbour:
            return parts.backend.sampler(parts.sampler.store, fanouts, SamplerKind.AUTO)
        return make_sampler(parts.backend, parts.backend.graph_store(parts.data), fanouts, cfg.kind)

    def through(self, parts: RunParts, sampler: Sampler) -> Evaluator:
        """An evaluator scoring the items through ``sampler`` (the training one, or every neighbour)."""
        cfg = parts.config
        return self.evaluator(
            parts.backend, parts.data, parts.ctx, cfg.eval.batch_size, sampler, cfg.train.seed, parts.call,
            cfg.eval.layer_store, parts.target,
        )  # fmt: skip

    def layerwise(self, parts: RunParts) -> Evaluator:
        """The exact layer-wise evaluator (typed on a heterogeneous graph)."""
        cfg = parts.config.eval
        kind = self.typed if isinstance(parts.data, HeteroGraphData) else LayerwiseEvaluator
        if parts.data.partition is not None:
            kind = PartitionedTypedLayerwise if isinstance(parts.data, HeteroGraphData) else PartitionedLayerwise
        return kind(parts.backend, parts.data, parts.ctx, cfg.batch_size, parts.call, cfg.layer_store, parts.target)

    def in_given_order(self, parts: RunParts, rows: torch.Tensor) -> torch.Tensor:
        """``predict``'s rows in the order a user reads them (here: item ids)."""
        return rows

    def can_run_layerwise(self, parts: RunParts) -> bool:
        if isinstance(parts.data, HeteroGraphData):
            return supports_typed_layerwise(parts.model)
        return supports_layerwise(parts.model)


class GraphFamily(NodeFamily):
    """Whole graphs of a collection, batched by the library's graph loader; scored whole."""

    name = "graph"
    kind = Task.GRAPH
    description = "a label (class, labels or values) per graph of a collection"

    per_graph = True
    layered = False

    def sampler(self, parts: RunParts, every_neighbour: bool = False) -> Sampler:
        backend = parts.backend
        return backend.collection_sampler(backend.collection_store(parts.data), SamplerKind(parts.config.sampler.kind))

    def through(self, parts: RunParts, sampler: Sampler) -> Evaluator:
        cfg = parts.config.eval
        return GraphEvaluator(
            parts.backend, parts.data, parts.ctx, cfg.batch_size, sampler, parts.call, cfg.layer_store, parts.target
        )


class LinkFamily(NodeFamily):
    """Pairs of one edge type scored as edges or not: each pair's score the logits of two classes
    (``[0, score]``), held-out edges ranked against their negatives."""

    name = "link"
    kind = Task.LINK
    description = "whether an edge of one type exists (ranked against negatives)"
    targets = ("class",)
    node_labels = False  # a pair's score reads the two nodes' features and the edges, no label

    typed = TypedLayerwiseLinks

    def output_width(self, parts: RunParts) -> int:
        return 2

    def negatives(self, parts: RunParts) -> int:
        return parts.config.link.negatives

    def through(self, parts: RunParts, sampler: Sampler) -> LinkEvaluator:
        cfg = parts.config
        return LinkEvaluator(
            parts.backend, parts.data, parts.ctx, cfg.train.batch_size, sampler, cfg.train.seed, parts.call,
            cfg.link.ks,
        )  # fmt: skip

    def layerwise(self, parts: RunParts) -> Evaluator:
        full = self.sampler(parts, every_neighbour=True)  # only reseeded: every pair is scored from states
        cfg = parts.config
        kind = PartitionedTypedLinks if parts.data.partition is not None else TypedLayerwiseLinks
        return kind(
            parts.backend, parts.data, parts.ctx, cfg.eval.batch_size, full, cfg.train.seed, parts.call, cfg.link.ks,
            layer_store=cfg.eval.layer_store,
        )  # fmt: skip


class EdgeFamily(NodeFamily):
    """A label per given edge of one type (:mod:`gnnbridge.core.tasks.edge`), scored from both
    ends' states; ``predict`` writes its rows in the order the dataset gave the edges."""

    name = "edge"
    kind = Task.EDGE
    description = "a label (class, labels or values) per given edge of one type"
    node_labels = False  # its labels are the edges'

    evaluator = EdgeEvaluator
    typed = TypedLayerwiseEdges

    def in_given_order(self, parts: RunParts, rows: torch.Tensor) -> torch.Tensor:
        return parts.data.given_rows(rows)  # the record holds its edges sorted by destination


BUILTIN_FAMILIES = (NodeFamily(), GraphFamily(), LinkFamily(), EdgeFamily())
