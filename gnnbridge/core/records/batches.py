"""Batch records: what a sampler hands the training loop, in the library-neutral form.

:class:`SampledSubgraph` is the core sampler's output and follows PyG's ``SamplerOutput``
conventions: seeds come first in ``node``, edges are local ``(row -> col)`` pairs ordered by hop,
and per-hop node/edge counts let a model trim layers (each layer only computes what the next one
needs). :class:`MiniBatch` is what every sampler, native or core, yields to the trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from gnnbridge.core.records.features import gather_rows


@dataclass
class SampledSubgraph:
    """A sampled L-hop neighbourhood of ``batch_size`` seeds.

    Fields:
        node: global ids of all sampled nodes; the first ``batch_size`` are the seeds.
        row, col: local ids (into ``node``) of each sampled edge ``row -> col`` (message flows
            from the neighbour ``row`` into the node ``col`` being computed).
        edge: global edge ids (positions in the graph's destination-sorted edge list).
        num_sampled_nodes: nodes added at hop 0 (the seeds), 1, ..., L.
        num_sampled_edges: edges sampled at hop 1, ..., L (in that order within row/col).
        edge_attr: the sampled edges' features (a row per edge, in ``row``/``col``'s order),
            where the graph has them (:func:`with_edge_features`).
    """

    node: torch.Tensor
    row: torch.Tensor
    col: torch.Tensor
    edge: torch.Tensor
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]
    batch_size: int
    edge_attr: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if sum(self.num_sampled_nodes) != self.node.numel():
            raise ValueError("num_sampled_nodes does not add up to the number of sampled nodes")
        if sum(self.num_sampled_edges) != self.row.numel() or self.row.shape != self.col.shape:
            raise ValueError("num_sampled_edges does not add up to the number of sampled edges")
        if self.num_sampled_nodes[0] != self.batch_size:
            raise ValueError("the seeds must be the first num_sampled_nodes[0] nodes")

    @property
    def seeds(self) -> torch.Tensor:
        return self.node[: self.batch_size]


class IndexedRows:
    """A layer's input left where it is: the rows ``table[ids]``, not yet gathered.

    Why: before each batch core gathered ``x[input_nodes]``, at Reddit scale ~200k sampled rows
    of 602 features, a 0.48 GB copy per rank per batch (and in layer-wise inference, per layer)
    of rows that already sit in the one shared table. A sparse aggregation can read them there
    by global id. Core hands this instead of the gathered tensor only to a model whose
    ``reads_indexed_rows`` is True, and only when the table is on the model's device; such a
    model calls :meth:`rows` wherever a layer needs the rows themselves.

    A plain class, not a tuple: DDP's input mover (``device_ids`` on a GPU) rebuilds tensors,
    tuples, lists and dicts on their way to the device and passes anything else through; the
    table is already there.
    """

    __slots__ = ("table", "ids")

    def __init__(self, table: torch.Tensor, ids: torch.Tensor):
        self.table = table
        self.ids = ids

    def rows(self, count: int | None = None) -> torch.Tensor:
        """``table[ids]`` (its first ``count`` ids only, if given), as a new float32 tensor."""
        return gather_rows(self.table, self.ids if count is None else self.ids[:count])

    def head(self, count: int) -> IndexedRows:
        """The first ``count`` rows, still ungathered (a layer's sources are a prefix of the batch)."""
        return IndexedRows(self.table, self.ids[:count])

    def __len__(self) -> int:
        return self.ids.numel()


# --------------------------------------------------------------------------- seed sharding


@dataclass
class MiniBatch:
    """One training or inference step's input, as a sampler yields it.

    Fields:
        seeds: global ids of the nodes (or, for graph tasks, the graphs) whose outputs are
            wanted, in output row order; core reads their labels as ``y[seeds]``.
        input_nodes: global ids of every node whose features the model reads, in the order the
            native graph expects them (core gathers ``x[input_nodes]``); for a heterogeneous
            graph, {node type: ids}.
        graph: the backend's native structure (PyG edge_index data, a list of DGL blocks ...).
        features: ``x[input_nodes]`` as float32, where the sampler fetched them itself (a
            partitioned graph's rows come from the machines that own them); None: core gathers.
    """

    seeds: torch.Tensor
    input_nodes: torch.Tensor
    graph: Any
    features: torch.Tensor | None = None

    def __post_init__(self) -> None:
        nodes = self.input_nodes.values() if isinstance(self.input_nodes, dict) else [self.input_nodes]
        if self.seeds.dim() != 1 or any(ids.dim() != 1 for ids in nodes):
            raise ValueError("seeds and input_nodes must be 1-D id tensors")


def with_edge_features(sub: SampledSubgraph, data) -> SampledSubgraph:
    """``sub`` with its edges' rows of ``data.edge_attr`` (by edge id), where the graph has edge
    features: every backend then puts them on its batch (PyG ``edge_attr``, DGL ``edata["feat"]``)."""
    table = getattr(data, "edge_attr", None)
    if table is not None and sub.edge_attr is None:
        sub.edge_attr = table[sub.edge]
    return sub
