"""Neutral heterogeneous graph records: typed nodes and typed edges, for node classification on
one node type and for link prediction on one edge type.

A :class:`HeteroGraphData` is the heterogeneous sibling of
:class:`~gnnbridge.core.records.data.GraphData`. Node ids are local to their type
(``0 .. num_nodes[t] - 1``), as in PyG's ``HeteroData`` and DGL's heterographs, so both backends
build their native view without relabelling. Each edge type ``(src_type, relation, dst_type)``
keeps its edges sorted by destination with CSC offsets (``indptr``), which is what the core
sampler reads.

A link task's record holds the target's split (val and test edges with their fixed negatives) and
maps each target edge to its reverse; how they are drawn is :mod:`gnnbridge.core.tasks`' job.
A :class:`HeteroSource` is the graph before a task is chosen.

Like the homogeneous records, this one is built once per machine, validated in
``__post_init__``, moved to shared memory and attached by every rank. From a prepared folder
(:mod:`gnnbridge.core.storage.folder`) a node task is not built: ``gnnbridge prepare`` wrote
each edge type's CSC (and each ``rev_`` type's, for ``dataset.reverse_edges``), and the record
maps those files read-only, so a machine's ranks share them through the page cache. A link
task's topology depends on the seed and the ``link`` settings (which edges it holds out, and so
which pass messages), so prepare cannot write it ahead: the first run that needs it builds it
through the disk into the folder, and every later run and rank maps it
(:mod:`gnnbridge.core.storage.linkcache`); from a read-only folder it is built in each rank's memory.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields

import torch

from gnnbridge.core.errors import ConfigError, DataError
from gnnbridge.core.records.data import (
    all_finite,
    check_disjoint_splits,
    check_features,
    check_ids,
    check_tensor,
)
from gnnbridge.core.records.labels import check_form, check_values, inferred, stored
from gnnbridge.core.records.mapped import Mapped

EdgeType = tuple[str, str, str]
REVERSE_PREFIX = "rev_"
HOMOGENEOUS_EDGE = ("node", "to", "node")  # a homogeneous graph's edges as one typed relation


def edge_name(et: EdgeType) -> str:
    return f"{et[0]},{et[1]},{et[2]}"


@dataclass
class HeteroGraphData(Mapped):
    """A heterogeneous graph with one supervised target: node labels of ``target_node`` (task
    node) or edges of ``target_edge`` (task link).

    Fields:
        num_nodes: {node type: count}; every type has at least one node.
        x: {node type: float32 [count, F]} for the types that have features; the others are
            featureless (models learn an embedding per node).
        edge_index: {(src, relation, dst): int64 [2, E]} message-passing edges, type-local ids,
            sorted by destination; ``indptr`` the CSC offsets over each type's destinations.
        target_node, y, train_idx, val_idx, test_idx, num_classes: node classification; for an
            edge task (``target_edge`` and ``y`` both set), ``y`` holds a label per edge of
            ``target_edge`` (in its sorted order) and the splits are edge ids there.
        target_edge: the predicted edge type; for link prediction its message-passing edges are
            the train edges, for an edge task all of its edges.
        edge_column: an edge task's column in the given ``edge_index`` of each sorted target
            edge (what ``predict`` orders its rows by).
        edge_attr: {edge type: float32 [E, D]} edge features of the types that have them, in the
            type's sorted edge order (a reverse type's are its mirror's).
        reverse_edge, reverse_eid: the type mirroring ``target_edge`` (if any) and, per target
            edge, its mirror's id there (excluded with it from its own neighbourhood).
        val_edges, test_edges: int64 [2, E] held-out (src, dst) pairs, absent from message passing.
        val_negatives, test_negatives: int64 [E, K] fixed negative destinations per held-out edge
            (K = 0 under the shared protocol).
        val_negative_pairs, test_negative_pairs: int64 [2, M] the split's shared negative (src,
            dst) pairs, which every held-out edge of it is ranked against (``link.protocol=shared``);
            None under the per-edge protocol.
        twin_eid: between nodes of one type, per target edge (u, v) the id of (v, u), or -1.
        undirected: the target's pairs stand for undirected edges (a homogeneous graph's).
    """

    # False: an edge task's record of edges without labels, for predict only (formats.unlabelled_edges)
    labelled = True

    num_nodes: dict[str, int]
    x: dict[str, torch.Tensor]
    edge_index: dict[EdgeType, torch.Tensor]
    indptr: dict[EdgeType, torch.Tensor] = field(default_factory=dict)
    target_node: str | None = None
    y: torch.Tensor | None = None
    train_idx: torch.Tensor | None = None
    val_idx: torch.Tensor | None = None
    test_idx: torch.Tensor | None = None
    num_classes: int = 0
    target_edge: EdgeType | None = None
    reverse_edge: EdgeType | None = None
    reverse_eid: torch.Tensor | None = None
    val_edges: torch.Tensor | None = None
    test_edges: torch.Tensor | None = None
    val_negatives: torch.Tensor | None = None
    test_negatives: torch.Tensor | None = None
    val_negative_pairs: torch.Tensor | None = None
    test_negative_pairs: torch.Tensor | None = None
    twin_eid: torch.Tensor | None = None
    undirected: bool = False
    edge_column: torch.Tensor | None = None
    edge_attr: dict[EdgeType, torch.Tensor] = field(default_factory=dict)
    name: str = "hetero"
    labels: str = ""  # y's form (core/records/labels.py); "": what y shows (labels.inferred)

    def __post_init__(self) -> None:
        canonical_order(self, ("num_nodes", "x", "edge_index", "indptr", "edge_attr"))
        self.labels = self.labels or inferred(self.y)
        if isinstance(self.y, torch.Tensor):
            self.y = stored(self.y, self.labels)
        if self.target_edge is not None:
            self.target_edge = tuple(self.target_edge)
        self._check_node_types()
        if not self.indptr:
            self._sort_edges()
        self.validate()

    @classmethod
    def unchecked(cls, **values) -> HeteroGraphData:
        """The record without sorting or :meth:`validate`: for topology ``gnnbridge prepare``
        has sorted and checked, memory-mapped from a folder, which validating would read whole."""
        record = object.__new__(cls)
        for f in fields(cls):
            default = f.default_factory() if f.default_factory is not MISSING else f.default
            setattr(record, f.name, values[f.name] if f.name in values else default)
        canonical_order(record, ("num_nodes", "x", "edge_index", "indptr"))
        return record

    # ------------------------------------------------------------------ views

    @property
    def node_types(self) -> list[str]:
        return list(self.num_nodes)

    @property
    def edge_types(self) -> list[EdgeType]:
        return list(self.edge_index)

    @property
    def is_link(self) -> bool:
        """Link prediction: pairs of ``target_edge`` scored as edges or not (no labels)."""
        return self.target_edge is not None and self.y is None

    @property
    def is_edge(self) -> bool:
        """An edge task: a label per edge of ``target_edge`` (``y``), split by edge ids."""
        return self.target_edge is not None and self.y is not None

    @property
    def scores_pairs(self) -> bool:
        """Whether a model's outputs come from (source, destination) pairs: link and edge tasks."""
        return self.target_edge is not None

    @property
    def item_name(self) -> str:
        return "edge" if self.scores_pairs else "node"

    @property
    def total_nodes(self) -> int:
        return sum(self.num_nodes.values())

    def feature_dims(self) -> dict[str, int]:
        """{node type: feature width}, 0 for featureless types (what a model's input layer needs)."""
        return {t: int(self.x[t].shape[1]) if t in self.x else 0 for t in self.num_nodes}

    def split(self, name: str) -> torch.Tensor:
        """The items of a split: node ids of ``target_node``, or edge ids (train: positions among
        the target type's message-passing edges; val/test: columns of ``val_edges``/``test_edges``)."""
        if not self.is_link:
            return {"train": self.train_idx, "val": self.val_idx, "test": self.test_idx}[name]
        count = {
            "train": self.edge_index[self.target_edge].shape[1],
            "val": self.val_edges.shape[1],
            "test": self.test_edges.shape[1],
        }[name]
        return torch.arange(count)

    def given_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """An edge task's rows of its sorted target edges (labels, outputs) in the order its
        ``edge_index`` gave the edges, which is how a user reads them."""
        out = torch.empty_like(rows)
        out[self.edge_column] = rows
        return out

    def given_split(self, name: str) -> torch.Tensor:
        """An edge task's split as columns of the given ``edge_index``, sorted."""
        return self.edge_column[self.split(name)].sort().values

    def excluded(self, eids: torch.Tensor) -> dict[EdgeType, torch.Tensor]:
        """The edges a batch of train edges ``eids`` must not see: themselves, their opposite
        direction within the target type, and their mirrors in the reverse type."""
        if self.twin_eid is not None:
            twins = self.twin_eid[eids]
            eids = torch.cat([eids, twins[twins >= 0]])
        out = {self.target_edge: eids}
        if self.reverse_edge is not None:
            out[self.reverse_edge] = self.reverse_eid[eids]
        return out

    def train_pairs(self, eids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(sources, destinations) of the train edges ``eids`` of the target type."""
        src, dst = self.edge_index[self.target_edge][:, eids]
        return src, dst

    def known_pairs(self) -> torch.Tensor:
        """[2, K] pairs a recommendation should not repeat: the train edges (both directions when
        undirected) and, between nodes of one type, each node itself."""
        train = self.edge_index[self.target_edge]
        parts = [train, train.flip(0)] if self.undirected else [train]
        if self.target_edge[0] == self.target_edge[2]:
            nodes = torch.arange(self.num_nodes[self.target_edge[0]])
            parts.append(torch.stack([nodes, nodes]))
        return torch.cat(parts, dim=1)

    def held_out(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(edges [2, E], negatives [E, K]) of the val or test split."""
        return (self.val_edges, self.val_negatives) if name == "val" else (self.test_edges, self.test_negatives)

    def negative_pairs(self, name: str) -> torch.Tensor | None:
        """The shared negative pairs [2, M] of the val or test split (None: per-edge negatives)."""
        return self.val_negative_pairs if name == "val" else self.test_negative_pairs

    @property
    def protocol(self) -> str:
        """How held-out edges are ranked: ``per-edge`` (each among its own negatives) or ``shared``."""
        return "per-edge" if self.val_negative_pairs is None else "shared"

    def tensors(self):
        for value in vars(self).values():
            if isinstance(value, torch.Tensor):
                yield value
            elif isinstance(value, dict):
                yield from (v for v in value.values() if isinstance(v, torch.Tensor))

    def share_memory_(self) -> HeteroGraphData:
        if self.is_mapped:  # shared through its files (see gnnbridge.core.records.mapped)
            return self
        for t in self.tensors():
            t.share_memory_()
        return self

    def _sort_edges(self) -> None:
        for et, ei in self.edge_index.items():
            check_tensor(f"edge_index[{edge_name(et)}]", ei, torch.int64, ndim=2)
            if ei.shape[0] != 2:
                raise DataError(f"edge_index[{edge_name(et)}] has shape {list(ei.shape)}; expected [2, E].")
            if et[2] not in self.num_nodes:
                continue  # validate() names the undeclared type
            check_ids(f"edge_index[{edge_name(et)}] destination", ei[1], self.num_nodes[et[2]], unit=f"'{et[2]}' node")
            order = torch.argsort(ei[1], stable=True)
            ei = ei[:, order].contiguous()
            self.edge_index[et] = ei
            self.indptr[et] = csc_offsets(ei[1], self.num_nodes[et[2]])
            if et in self.edge_attr:  # a row per edge, as given: it follows its edge (validate checks the rows)
                if self.edge_attr[et].shape[0] == ei.shape[1]:
                    self.edge_attr[et] = self.edge_attr[et][order].contiguous()

    # ------------------------------------------------------------------ invariants

    def _check_node_types(self) -> None:
        check_node_types(self.num_nodes)

    def validate(self) -> None:
        self._check_node_types()
        for t, x in self.x.items():
            self._check_features(t, x)
        if not self.edge_index:
            raise DataError("The graph has no edge types; a GNN needs edges to pass messages along.")
        for et, ei in self.edge_index.items():
            self._check_edges(et, ei)
        for et in self.edge_attr:
            self._check_edge_features(et, int(self.edge_index[et].shape[1]) if et in self.edge_index else -1)
        if self.is_link:
            self._check_link()
        elif self.is_edge:
            self._check_edge_task()
        else:
            self._check_node_task()

    def _check_features(self, t: str, x: torch.Tensor) -> None:
        if t not in self.num_nodes:
            raise DataError(
                f"Features are given for node type '{t}', which is not declared; node types: "
                f"{', '.join(self.num_nodes)}."
            )
        check_features(f"x[{t}]", x)
        if x.shape[0] != self.num_nodes[t] or x.shape[1] == 0:
            raise DataError(f"x[{t}] has shape {list(x.shape)}; expected [{self.num_nodes[t]}, F] with F >= 1.")
        if not all_finite(x):  # a block of rows at a time: x may be memory-mapped and large
            raise DataError(f"x[{t}] holds NaN or inf values; clean the features first.")

    def _check_edges(self, et: EdgeType, ei: torch.Tensor) -> None:
        name = edge_name(et)
        if len(et) != 3 or not all(isinstance(p, str) and p for p in et):
            raise DataError(f"Edge type {et!r} must be (source type, relation, destination type).")
        for end, t in (("source", et[0]), ("destination", et[2])):
            if t not in self.num_nodes:
                raise DataError(
                    f"Edge type ({name}) has {end} type '{t}', which is not declared; node types: "
                    f"{', '.join(self.num_nodes)}."
                )
        check_tensor(f"edge_index[{name}]", ei, torch.int64, ndim=2)
        check_ids(f"edge_index[{name}] source", ei[0], self.num_nodes[et[0]], unit=f"'{et[0]}' node")
        check_ids(f"edge_index[{name}] destination", ei[1], self.num_nodes[et[2]], unit=f"'{et[2]}' node")
        indptr = self.indptr.get(et)
        if (
            indptr is None
            or indptr.numel() != self.num_nodes[et[2]] + 1
            or int(indptr[-1]) != ei.shape[1]
            or not bool(ei[1].diff().ge(0).all())
        ):
            raise DataError(
                f"edge_index[{name}] is not sorted by destination with matching indptr; build the record "
                "without indptr and it is sorted for you."
            )

    def _check_node_task(self) -> None:
        t = self.target_node
        if t not in self.num_nodes:
            raise DataError(f"The labelled node type {t!r} is not declared; node types: {', '.join(self.num_nodes)}.")
        self._check_labels(f"y[{t}]", self.num_nodes[t], f"'{t}' node")
        for name in ("train", "val", "test"):
            check_tensor(f"{name}_idx", self.split(name), torch.int64, ndim=1)
        check_disjoint_splits(self, self.num_nodes[t])

    def _target_type(self, role: str) -> EdgeType:
        """``target_edge``, which must be one of the graph's edge types."""
        if self.target_edge not in self.edge_index:
            raise DataError(
                f"The {role} edge type ({edge_name(self.target_edge)}) is not among the edge types: "
                f"{'; '.join(map(edge_name, self.edge_index))}."
            )
        return self.target_edge

    def _check_labels(self, where: str, items: int, unit: str) -> None:
        """``y``: one label per item (a node of the labelled type, or an edge of the labelled
        type), in its form; classes in ``[0, num_classes)``."""
        check_form(self.y, self.labels, where)
        if self.y.shape[0] != items:
            raise DataError(f"{where} has {self.y.shape[0]} labels for {items} {unit}s.")
        if self.labels == "class" and (
            self.num_classes < 2 or int(self.y.min()) < 0 or int(self.y.max()) >= self.num_classes
        ):
            raise DataError(
                f"{where} holds labels in [{int(self.y.min())}, {int(self.y.max())}] but num_classes="
                f"{self.num_classes}; labels must be in [0, num_classes) with num_classes >= 2."
            )
        check_values(self.y, self.labels, self.num_classes, items, unit, where)

    def _check_edge_features(self, et: EdgeType, count: int) -> None:
        name = f"edge_attr[{edge_name(et)}]"
        if count < 0:
            raise DataError(f"{name} is given for an edge type the graph does not have.")
        check_features(name, self.edge_attr[et])
        if self.edge_attr[et].shape[0] != count or self.edge_attr[et].shape[1] == 0:
            raise DataError(f"{name} has shape {list(self.edge_attr[et].shape)}; expected [{count}, D] with D >= 1.")
        if not all_finite(self.edge_attr[et]):
            raise DataError(f"{name} holds NaN or inf values; clean the edge features first.")

    def _check_edge_task(self) -> None:
        """Labels per edge of the target type, in form; splits of its edge ids, disjoint."""
        et = self._target_type("labelled")
        edges = int(self.edge_index[et].shape[1])
        self._check_labels(f"edge_label[{edge_name(et)}]", edges, f"({edge_name(et)}) edge")
        for name in ("train", "val", "test"):
            check_tensor(f"edge_{name}_idx", self.split(name), torch.int64, ndim=1)
        if any(self.split(name).numel() for name in ("train", "val", "test")):  # none: edges predict scores
            check_disjoint_splits(self, edges)

    def _check_link(self) -> None:
        et = self._target_type("target")
        n_src, n_dst = self.num_nodes[et[0]], self.num_nodes[et[2]]
        if n_dst < 2:
            raise DataError(f"Link prediction on ({edge_name(et)}) needs at least 2 '{et[2]}' nodes to draw negatives.")
        train = self.edge_index[et]
        for name in ("val", "test"):
            edges, negatives = self.held_out(name)
            check_tensor(f"{name}_edges", edges, torch.int64, ndim=2)
            check_tensor(f"{name}_negatives", negatives, torch.int64, ndim=2)
            if edges.shape[0] != 2 or edges.shape[1] == 0 or negatives.shape[0] != edges.shape[1]:
                raise DataError(f"{name}_edges must be [2, E>0] with one row of {name}_negatives per edge.")
            check_ids(f"{name}_edges source", edges[0], n_src, unit=f"'{et[0]}' node")
            check_ids(f"{name}_edges destination", edges[1], n_dst, unit=f"'{et[2]}' node")
            # (A negative may be the edge's own destination: gnnbridge never draws one, but a
            # benchmark's fixed negatives (ogbl-citation2's) may hold it; it ties, counted half, as
            # OGB's evaluator counts it.)
            check_ids(f"{name}_negatives", negatives, n_dst, unit=f"'{et[2]}' node")
            leaked = torch.isin(pair_keys(edges, n_dst), pair_keys(train, n_dst))
            if bool(leaked.any()):
                e = int(leaked.nonzero()[0])
                raise DataError(
                    f"The {name} edge {int(edges[0, e])} -> {int(edges[1, e])} is also a message-passing "
                    "edge; held-out edges must not be visible while training."
                )
        self._check_negative_pairs(n_src, n_dst)
        if bool(torch.isin(pair_keys(self.val_edges, n_dst), pair_keys(self.test_edges, n_dst)).any()):
            raise DataError("The val and test edges overlap; splits must be disjoint.")
        if train.shape[1] == 0:
            raise DataError(f"The train split of ({edge_name(et)}) is empty.")

    def _check_negative_pairs(self, n_src: int, n_dst: int) -> None:
        """Both splits have shared negative pairs [2, M>0] of valid ids, or neither has."""
        pairs = {name: self.negative_pairs(name) for name in ("val", "test")}
        if sum(p is None for p in pairs.values()) == 1:
            raise DataError("val_negative_pairs and test_negative_pairs come together: give both or neither.")
        for name, p in pairs.items():
            if p is None:
                continue
            check_tensor(f"{name}_negative_pairs", p, torch.int64, ndim=2)
            if p.shape[0] != 2 or p.shape[1] == 0:
                raise DataError(f"{name}_negative_pairs has shape {list(p.shape)}; expected [2, M>0].")
            et = self.target_edge
            check_ids(f"{name}_negative_pairs source", p[0], n_src, unit=f"'{et[0]}' node")
            check_ids(f"{name}_negative_pairs destination", p[1], n_dst, unit=f"'{et[2]}' node")

    def summary(self) -> dict:
        out = {
            "name": self.name,
            "heterogeneous": True,
            "num_nodes": self.total_nodes,
            "num_edges": sum(int(e.shape[1]) for e in self.edge_index.values()),
            "node_types": dict(self.num_nodes),
            "edge_types": {edge_name(et): int(e.shape[1]) for et, e in self.edge_index.items()},
            "num_features": self.feature_dims(),
            "num_classes": self.num_classes,
            "edge_features": {edge_name(et): int(rows.shape[1]) for et, rows in self.edge_attr.items()},
        }
        if self.is_edge:
            out["target_edge"] = edge_name(self.target_edge)
        elif self.is_link:
            out["target_edge"] = edge_name(self.target_edge)
            shared = self.val_negative_pairs
            out["protocol"] = self.protocol
            out["eval_negatives"] = int(self.val_negatives.shape[1] if shared is None else shared.shape[1])
        else:
            out["target_node"] = self.target_node
        out.update({name: int(self.split(name).numel()) for name in ("train", "val", "test")})
        return out


def canonical_order(record, names: tuple[str, ...]) -> None:
    """Sort the record's typed dicts (``names``) by type name, edge types as (source, relation,
    destination) tuples. Everything derived from a graph iterates its types in dict order (the
    model's parameters and their initial draws, the sampler's draws, the layer-wise pass), so
    the order must not depend on how the graph was stored: an ``.npz`` lists its keys as they
    were written, a folder its files by name, a library's object as it was built, and the same
    arrays trained differently from each."""
    for name in names:
        typed = getattr(record, name)
        if typed is not None:
            setattr(record, name, {_key(k): typed[k] for k in sorted(typed, key=_key)})


def _key(k):
    return tuple(k) if isinstance(k, (list, tuple)) else k


def check_node_types(num_nodes: dict) -> None:
    if not num_nodes:
        raise DataError("The graph declares no node types.")
    for t, n in num_nodes.items():
        if not isinstance(t, str) or not t or "__" in t:
            raise DataError(f"Node type {t!r} must be a non-empty name without '__'.")
        if type(n) is not int or n <= 0:
            raise DataError(f"Node type '{t}' has {n!r} nodes; every type needs at least one.")


def csc_offsets(dst_sorted: torch.Tensor, n: int) -> torch.Tensor:
    indptr = torch.zeros(n + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(dst_sorted, minlength=n), 0, out=indptr[1:])
    return indptr


def pair_keys(edges: torch.Tensor, n_dst: int) -> torch.Tensor:
    """One integer per (src, dst) pair, to compare edge sets vectorised."""
    return edges[0] * n_dst + edges[1]


def with_reverse_edges(num_nodes: dict, edges: dict, skip: set = frozenset()) -> dict:
    """``edges`` plus ``(dst, rev_<relation>, src)`` for every type that has no reverse yet (and
    is not in ``skip``)."""
    return {**edges, **{rev: edges[et].flip(0) for rev, et in reverse_types(edges, skip).items()}}


def message_passing_features(features: dict | None, edges: dict, origin: dict) -> dict:
    """Edge features of the message-passing types ``edges``: each type's own rows where
    ``features`` has them, else those of the type it was built from (``origin``: a ``rev_`` type
    from its original, flipped in the same order; a rebuilt mirror from the target)."""
    features = features or {}
    out = {}
    for et in edges:
        source = et if et in features else origin.get(et)
        if source in features:
            out[et] = features[source]
    return out


def reverse_types(edge_types, skip: set = frozenset()) -> dict[EdgeType, EdgeType]:
    """``{(dst, rev_<relation>, src): (src, relation, dst)}``: the reverse types that
    :func:`with_reverse_edges` adds to ``edge_types``, in the order it adds them (by name only,
    so ``gnnbridge prepare`` knows them without building anything)."""
    out: dict[EdgeType, EdgeType] = {}
    for s, r, d in edge_types:
        rev = (d, REVERSE_PREFIX + r, s)
        if rev not in edge_types and rev not in out and not r.startswith(REVERSE_PREFIX) and (s, r, d) not in skip:
            out[rev] = (s, r, d)
    return out


def find_edge_type(edge_types, text: str) -> EdgeType:
    """The edge type ``text`` names: a relation name, or ``src,relation,dst``."""
    parts = tuple(p.strip() for p in text.split(","))
    matches = [et for et in edge_types if (len(parts) == 3 and et == parts) or (len(parts) == 1 and et[1] == parts[0])]
    if len(matches) != 1:
        names = "; ".join(edge_name(et) for et in edge_types)
        why = "names several edge types" if matches else "is not an edge type"
        raise ConfigError(
            f"link.edge_type={text!r} {why}; edge types: {names} (give the relation, or src,relation,dst)."
        )
    return matches[0]


@dataclass
class HeteroSource(Mapped):
    """A heterogeneous graph as a dataset loader returns it, before a task is chosen: the task
    decides what is held out (labels of ``target_node``, or edges of ``target_edge``), and so
    which edges may pass messages. Core turns it into a :class:`HeteroGraphData`.

    Fields:
        num_nodes, x: as in :class:`HeteroGraphData`; ``edges``: {edge type: int64 [2, E]}, any order.
        target_node, y, splits: the labelled node type, its labels and (optionally) its
            (train, val, test) node ids.
        target_edge, held_out: the edge type a link task predicts by default and (optionally) its
            (val, test) edges [2, E], which are then left out of message passing.
        edge_y, edge_splits: an edge task's labels, one per edge of ``target_edge`` in the
            order given, and (optionally) its (train, val, test) edge ids (columns of its edges).
        edge_attr: {edge type: float32 [E, D]} edge features of the types that have them, a row
            per edge in the order given (node and edge tasks carry them; link prediction not yet).
        held_out_negatives, negatives_protocol: the (val, test) negatives of ``held_out`` a
            dataset brings, as its benchmark fixes them (OGB's): ``per-edge`` int64 [E, K]
            destinations per held-out edge, or ``shared`` int64 [2, M] (src, dst) pairs per split.
    """

    num_nodes: dict[str, int]
    x: dict[str, torch.Tensor]
    edges: dict[EdgeType, torch.Tensor]
    target_node: str | None = None
    y: torch.Tensor | None = None
    splits: tuple | None = None
    target_edge: EdgeType | None = None
    held_out: tuple | None = None
    name: str = "hetero"
    undirected: bool = False  # the target's pairs stand for undirected edges
    edge_y: torch.Tensor | None = None
    edge_splits: tuple | None = None
    edge_attr: dict | None = None  # {edge type: float32 [E, D]} a row per edge, in the order given
    held_out_negatives: tuple | None = None  # (val, test) negatives the dataset brings (OGB's)
    negatives_protocol: str = "per-edge"  # how they rank: per-edge [E, K] or shared [2, M] pairs
    # Set by a prepared folder (gnnbridge.core.storage.folder): {edge type: (indptr, edges sorted
    # by destination [2, E])}, memory-mapped, for every edge type and its rev_ type; and the
    # class count prepare found. A node task then maps its topology instead of building it.
    topology: dict[EdgeType, tuple[torch.Tensor, torch.Tensor]] | None = None
    # the edge features of the message-passing types that have them, in ``topology``'s CSC order
    topology_edge_attr: dict[EdgeType, torch.Tensor] = field(default_factory=dict)
    num_classes: int | None = None
    # Set when opened from a prepared folder (see LabelledRecord.folder; Mapped.mapped_from).
    folder = None
    # False: a graph handed to ``predict`` whose edges carry no labels (formats.unlabelled_edges)
    labelled = True

    def __post_init__(self) -> None:
        canonical_order(self, ("num_nodes", "x", "edges", "topology"))
        if self.target_edge is not None:
            self.target_edge = tuple(self.target_edge)

    def summary(self) -> dict:
        return {
            "name": self.name,
            "heterogeneous": True,
            "node_types": dict(self.num_nodes),
            "edge_types": {edge_name(et): int(e.shape[1]) for et, e in self.edges.items()},
        }

    def task_record(self, **values) -> HeteroGraphData:
        """The task record over this source's mapped topology, unchecked (see
        :meth:`HeteroGraphData.unchecked`); a machine's part of a partitioned folder returns its own kind."""
        return HeteroGraphData.unchecked(**values)

    def mapped_topology(self, reverse: bool) -> dict[EdgeType, tuple[torch.Tensor, torch.Tensor]] | None:
        """``{edge type: (indptr, sorted edges)}`` of a node task's message-passing types, in the
        order the build in memory gives them, when a prepared folder holds all of them; else None."""
        wanted = [*self.edges, *(reverse_types(self.edges) if reverse else ())]
        if self.topology is None or not all(et in self.topology for et in wanted):
            return None
        return {et: self.topology[et] for et in wanted}

    def link_target(self, edge_type: str) -> EdgeType:
        """The edge type a link task predicts: ``link.edge_type``, else the dataset's default, else
        the only edge type."""
        if edge_type:
            return find_edge_type(list(self.edges), edge_type)
        if self.target_edge is not None:
            return tuple(self.target_edge)
        if len(self.edges) == 1:
            return next(iter(self.edges))
        raise ConfigError(
            f"Dataset '{self.name}' has {len(self.edges)} edge types; name the one to predict with "
            f"--set link.edge_type=RELATION (one of: {', '.join(et[1] for et in self.edges)})."
        )


def edge_source(num_nodes: int, x: torch.Tensor, edge_index: torch.Tensor, edge_y, edge_splits, name: str):
    """A homogeneous graph whose edges carry labels, as the one-relation source an edge task reads
    (:mod:`gnnbridge.core.tasks.edge`): its edges as given, so messages flow from source to
    destination as on the homogeneous graph (no reverse type is added)."""
    return HeteroSource(
        {"node": num_nodes},
        {"node": x},
        {HOMOGENEOUS_EDGE: edge_index},
        target_edge=HOMOGENEOUS_EDGE,
        edge_y=edge_y,
        edge_splits=tuple(edge_splits) if edge_splits is not None else None,
        name=name,
    )
