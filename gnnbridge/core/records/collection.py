"""Neutral graph collections: many small graphs for graph-level tasks, stored packed.

A :class:`GraphCollection` is the graph-classification sibling of
:class:`~gnnbridge.core.records.data.GraphData`. The graphs are laid end to end as one disconnected
graph: graph ``g`` owns the node rows ``node_ptr[g]:node_ptr[g+1]`` of ``x`` and the edges
``edge_ptr[g]:edge_ptr[g+1]`` of ``edge_index`` (global node ids, sorted by destination, so each
graph's edges are contiguous). A handful of flat tensors instead of thousands of per-graph
objects means the collection is loaded once, validated once, moved to shared memory in one
call, and attached by every rank without pickling a list of graphs per process.

:func:`pack` cuts any set of graphs out of the collection into one batch, vectorised (no Python
loop over graphs). Backends either convert such a packed batch to their native batched graph
(the core loader) or hand per-graph views to their library's own loader.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gnnbridge.core.errors import DataError
from gnnbridge.core.records.data import (
    LabelledRecord,
    check_edge_features,
    check_edge_index,
    check_features,
    check_ids,
    check_tensor,
    in_edge_order,
    random_split,
)
from gnnbridge.core.records.labels import check_form, inferred, width

# Graph classification's customary split (the DGL GIN tutorial's 80/10/10).
GRAPH_SPLIT = (0.8, 0.1)


@dataclass
class GraphCollection(LabelledRecord):
    """Many graphs, one label each, with splits over graphs.

    Fields:
        x: float32 [N, F] features of every node of every graph, finite.
        edge_index: int64 [2, E] global node ids, sorted by destination; no edge joins two graphs.
        node_ptr: int64 [G + 1]; graph g owns nodes ``node_ptr[g]`` to ``node_ptr[g+1] - 1``.
        edge_ptr: int64 [G + 1]; graph g owns edges ``edge_ptr[g]`` to ``edge_ptr[g+1] - 1``.
        y: int64 [G] one class label per graph; for other targets (``labels``, see
            :mod:`.labels`) float32 [G] or [G, T], NaN for a missing label (the ogbg-mol* shapes).
        train_idx, val_idx, test_idx: int64 graph ids, non-empty, pairwise disjoint.
        num_classes: number of classes (>= 2).
    """

    x: torch.Tensor
    edge_index: torch.Tensor
    node_ptr: torch.Tensor
    edge_ptr: torch.Tensor
    y: torch.Tensor
    train_idx: torch.Tensor
    val_idx: torch.Tensor
    test_idx: torch.Tensor
    num_classes: int
    name: str = "graphs"
    labels: str = ""  # y's form (core/records/labels.py); "": what y shows (labels.inferred)
    edge_attr: torch.Tensor | None = None  # float32 [E, D] per edge, in edge_index's (sorted) order

    item_name = "graph"  # what a split counts, for messages

    def __post_init__(self) -> None:
        self._take_labels()
        self.validate()

    @property
    def num_graphs(self) -> int:
        return int(self.node_ptr.numel() - 1)

    def graph_of(self, nodes: torch.Tensor) -> torch.Tensor:
        """The graph that owns each node id."""
        return torch.searchsorted(self.node_ptr, nodes, right=True) - 1

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_edges(
        cls,
        x: torch.Tensor,
        edge_index: torch.Tensor,
        node_ptr: torch.Tensor,
        y: torch.Tensor,
        splits: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
        num_classes: int | None = None,
        seed: int = 0,
        name: str = "graphs",
        edge_attr: torch.Tensor | None = None,
        labels: str | None = None,
    ) -> GraphCollection:
        """Build from an unsorted edge list (``edge_attr``: a row per column, which follows its
        edge); without ``splits``, a seeded 80/10/10 split; ``y`` read in the form ``labels`` (a
        loader's ``config.label_form``; None: what ``y`` shows)."""
        check_features("x", x)
        check_edge_index(edge_index)
        check_ids("edge_index", edge_index, int(x.shape[0]))
        _check_node_ptr(node_ptr, int(x.shape[0]))
        edge_attr = in_edge_order(edge_attr, edge_index)
        edge_index = edge_index[:, torch.argsort(edge_index[1], stable=True)].contiguous()
        edge_ptr = torch.searchsorted(edge_index[1].contiguous(), node_ptr)
        form = labels or inferred(y)
        if num_classes is None:
            num_classes = width(y, form)
        if splits is None:
            splits = random_split(int(node_ptr.numel() - 1), seed, GRAPH_SPLIT, unit="graph")
        return cls(
            x, edge_index, node_ptr, edge_ptr, y, *splits, num_classes=int(num_classes), name=name, labels=form,
            edge_attr=edge_attr,
        )  # fmt: skip

    # ------------------------------------------------------------------ invariants

    def validate(self) -> None:
        check_features("x", self.x)
        check_edge_index(self.edge_index)
        check_tensor("edge_ptr", self.edge_ptr, torch.int64, ndim=1)
        check_form(self.y, self.labels)
        n = self.num_nodes
        if self.num_features == 0:
            raise DataError("x has 0 feature columns; give every node at least one feature (e.g. a constant 1).")
        _check_node_ptr(self.node_ptr, n)
        g = self.num_graphs
        if self.y.shape[0] != g:
            raise DataError(
                f"y has {self.y.shape[0]} labels but node_ptr describes {g} graphs; give one label per graph."
            )
        check_ids("edge_index", self.edge_index, n)
        check_edge_features(self.edge_attr, self.num_edges)
        self._check_edges_stay_inside()
        self._check_labels_features_splits(g)

    def _check_edges_stay_inside(self) -> None:
        src, dst = self.edge_index
        src_graph, dst_graph = self.graph_of(src), self.graph_of(dst)
        crossing = (src_graph != dst_graph).nonzero()
        if crossing.numel():
            e = int(crossing[0])
            raise DataError(
                f"edge_index joins two graphs: edge {int(src[e])} -> {int(dst[e])} runs from graph "
                f"{int(src_graph[e])} to graph {int(dst_graph[e])}; every edge must stay inside one graph "
                "(check node_ptr and the node ids in edge_index)."
            )
        if not bool(dst.diff().ge(0).all()):
            raise DataError(
                "edge_index must be sorted by destination; build the record with GraphCollection.from_edges."
            )
        expected = torch.searchsorted(dst.contiguous(), self.node_ptr)
        if self.edge_ptr.shape != self.node_ptr.shape or not torch.equal(self.edge_ptr, expected):
            raise DataError(
                "edge_ptr does not match edge_index and node_ptr; build the record with GraphCollection.from_edges."
            )

    def summary(self) -> dict:
        return {
            "name": self.name,
            "num_graphs": self.num_graphs,
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "num_features": self.num_features,
            "num_classes": self.num_classes,
            "edge_features": 0 if self.edge_attr is None else int(self.edge_attr.shape[1]),
            **self._split_sizes(),
        }


def _check_node_ptr(node_ptr: torch.Tensor, n: int) -> None:
    check_tensor("node_ptr", node_ptr, torch.int64, ndim=1)
    if node_ptr.numel() < 2:
        raise DataError(
            f"node_ptr has {node_ptr.numel()} entries; a collection of G graphs needs G+1 offsets (G >= 1)."
        )
    if int(node_ptr[0]) != 0:
        raise DataError(f"node_ptr starts at {int(node_ptr[0])}; it must start at 0 (graph 0 owns the first nodes).")
    sizes = node_ptr.diff()
    if bool((sizes <= 0).any()):
        g = int((sizes <= 0).nonzero()[0])
        raise DataError(
            f"node_ptr gives graph {g} {int(sizes[g])} nodes; every graph needs at least one node and "
            "node_ptr must increase."
        )
    if int(node_ptr[-1]) != n:
        raise DataError(
            f"node_ptr ends at {int(node_ptr[-1])} but x has {n} rows; node_ptr must cover every row of x "
            f"exactly (node_ptr[-1] == {n})."
        )


# --------------------------------------------------------------------------- packing


@dataclass
class PackedGraphs:
    """Some graphs of a collection cut out as one batch, node ids relabelled to ``0..n-1``.

    Fields:
        graph_ids: [B] collection ids of the batch's graphs, in batch order.
        node: [n] collection ids of the batch's nodes, graph by graph (core gathers ``x[node]``).
        edge_index: [2, e] local (batch) node ids.
        num_nodes, num_edges: [B] per-graph counts.
        edge_attr: [e, D] the batch's edge features, where the collection has them.
    """

    graph_ids: torch.Tensor
    node: torch.Tensor
    edge_index: torch.Tensor
    num_nodes: torch.Tensor
    num_edges: torch.Tensor
    edge_attr: torch.Tensor | None = None


def ranges(starts: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """``cat([arange(s, s + c) for s, c in zip(starts, counts)])`` without a Python loop."""
    total = int(counts.sum())
    offsets = torch.cumsum(counts, 0) - counts  # where each range starts in the output
    return torch.repeat_interleave(starts - offsets, counts, output_size=total) + torch.arange(total)


def pack(data: GraphCollection, graph_ids: torch.Tensor) -> PackedGraphs:
    """The graphs ``graph_ids`` as one :class:`PackedGraphs` batch."""
    node_start = data.node_ptr[graph_ids]
    num_nodes = data.node_ptr[graph_ids + 1] - node_start
    edge_start = data.edge_ptr[graph_ids]
    num_edges = data.edge_ptr[graph_ids + 1] - edge_start
    node = ranges(node_start, num_nodes)
    edge_ids = ranges(edge_start, num_edges)
    edges = data.edge_index[:, edge_ids]
    # Each graph's nodes move from node_start to their offset inside the batch.
    batch_start = torch.cumsum(num_nodes, 0) - num_nodes
    shift = torch.repeat_interleave(batch_start - node_start, num_edges, output_size=edges.shape[1])
    edge_attr = data.edge_attr[edge_ids] if data.edge_attr is not None else None
    return PackedGraphs(graph_ids, node, edges + shift, num_nodes, num_edges, edge_attr)
