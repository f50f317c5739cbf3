"""Neutral heterogeneous graph records: typed nodes and typed edges, for node classification on
one node type and for link prediction on one edge type.

A :class:`HeteroGraphData` is the heterogeneous sibling of
:class:`~gnnbridge.core.records.data.GraphData`. Node ids are local to their type
(``0 .. num_nodes[t] - 1``), as in PyG's ``HeteroData`` and DGL's heterographs, so both backends
build their native view without relabelling. Each edge type ``(src_type, relation, dst_type)``
keeps its edges sorted by destination with CSC offsets (``indptr``), which is what the core
sampler reads.

Link prediction splits the *target* edge type into train / val / test edges. Only the train
edges are message-passing edges (and so are their reverses, when reverse edges are added), so no
validation or test edge can be seen while training or while scoring itself. Each val and test
edge gets ``eval_negatives`` fixed destination nodes, drawn once from the train seed alone:
every backend and every world size ranks each edge among the same candidates, so MRR and
Hits@K compare across runs. Where the destination type has no more than ``eval_negatives``
other nodes, the negatives are all of them, each once (an exact ranking, not duplicates).
Training edges are kept out of their own neighbourhood by the sampler (it excludes a batch's seed
edges and their reverses, see :mod:`gnnbridge.core.sampling.hetero`), which is why the record maps
each target edge to its reverse edge.

Like the homogeneous records, this one is built once per machine, validated in
``__post_init__``, moved to shared memory and attached by every rank. From a prepared folder
(:mod:`gnnbridge.core.records.folder`) a node task is not built: ``gnnbridge prepare`` wrote
each edge type's CSC (and each ``rev_`` type's, for ``dataset.reverse_edges``), and the record
maps those files read-only, so a machine's ranks share them through the page cache. A link
task's topology depends on the seed and the ``link`` settings (which edges it holds out, and so
which pass messages), so prepare cannot write it ahead: the first run that needs it builds it
through the disk into the folder, and every later run and rank maps it
(:mod:`gnnbridge.core.app.linkcache`); from a read-only folder it is built in each rank's memory.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields

import torch

from gnnbridge.core.errors import ConfigError, DataError
from gnnbridge.core.records.data import (
    GraphData,
    all_finite,
    check_disjoint_splits,
    check_features,
    check_ids,
    check_tensor,
    infer_num_classes,
    random_split,
)
from gnnbridge.core.records.mapped import Mapped

EdgeType = tuple[str, str, str]
REVERSE_PREFIX = "rev_"


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
        target_node, y, train_idx, val_idx, test_idx, num_classes: node classification.
        target_edge: the predicted edge type; its message-passing edges are the train edges.
        reverse_edge, reverse_eid: the type mirroring ``target_edge`` (if any) and, per target
            edge, its mirror's id there (excluded with it from its own neighbourhood).
        val_edges, test_edges: int64 [2, E] held-out (src, dst) pairs, absent from message passing.
        val_negatives, test_negatives: int64 [E, K] fixed negative destinations per held-out edge.
        twin_eid: between nodes of one type, per target edge (u, v) the id of (v, u), or -1.
        undirected: the target's pairs stand for undirected edges (a homogeneous graph's).
    """

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
    twin_eid: torch.Tensor | None = None
    undirected: bool = False
    name: str = "hetero"

    def __post_init__(self) -> None:
        self.edge_index = {tuple(et): ei for et, ei in self.edge_index.items()}
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
        return self.target_edge is not None

    @property
    def item_name(self) -> str:
        return "edge" if self.is_link else "node"

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
            ei = ei[:, torch.argsort(ei[1], stable=True)].contiguous()
            self.edge_index[et] = ei
            self.indptr[et] = csc_offsets(ei[1], self.num_nodes[et[2]])

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
        if self.is_link:
            self._check_link()
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
        check_tensor(f"y[{t}]", self.y, torch.int64, ndim=1)
        if self.y.shape[0] != self.num_nodes[t]:
            raise DataError(f"y[{t}] has {self.y.shape[0]} labels for {self.num_nodes[t]} '{t}' nodes.")
        if self.num_classes < 2 or int(self.y.min()) < 0 or int(self.y.max()) >= self.num_classes:
            raise DataError(
                f"y[{t}] holds labels in [{int(self.y.min())}, {int(self.y.max())}] but num_classes="
                f"{self.num_classes}; labels must be in [0, num_classes) with num_classes >= 2."
            )
        for name in ("train", "val", "test"):
            check_tensor(f"{name}_idx", self.split(name), torch.int64, ndim=1)
        check_disjoint_splits(self, self.num_nodes[t])

    def _check_link(self) -> None:
        et = self.target_edge
        if et not in self.edge_index:
            raise DataError(
                f"The target edge type ({edge_name(et)}) is not among the edge types: "
                f"{'; '.join(map(edge_name, self.edge_index))}."
            )
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
            check_ids(f"{name}_negatives", negatives, n_dst, unit=f"'{et[2]}' node")
            if bool((negatives == edges[1].unsqueeze(1)).any()):
                raise DataError(f"{name}_negatives holds an edge's own destination; negatives must differ from it.")
            leaked = torch.isin(pair_keys(edges, n_dst), pair_keys(train, n_dst))
            if bool(leaked.any()):
                e = int(leaked.nonzero()[0])
                raise DataError(
                    f"The {name} edge {int(edges[0, e])} -> {int(edges[1, e])} is also a message-passing "
                    "edge; held-out edges must not be visible while training."
                )
        if bool(torch.isin(pair_keys(self.val_edges, n_dst), pair_keys(self.test_edges, n_dst)).any()):
            raise DataError("The val and test edges overlap; splits must be disjoint.")
        if train.shape[1] == 0:
            raise DataError(f"The train split of ({edge_name(et)}) is empty.")

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
        }
        if self.is_link:
            out["target_edge"] = edge_name(self.target_edge)
            out["eval_negatives"] = int(self.val_negatives.shape[1])
        else:
            out["target_node"] = self.target_node
        out.update({name: int(self.split(name).numel()) for name in ("train", "val", "test")})
        return out


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


# --------------------------------------------------------------------------- building


def node_task(
    num_nodes: dict[str, int],
    x: dict,
    edges: dict,
    target: str,
    y: torch.Tensor,
    splits: tuple | None = None,
    seed: int = 0,
    name: str = "hetero",
    num_classes: int | None = None,
) -> HeteroGraphData:
    """A node-classification record; without ``splits``, a seeded 60/20/20 split of ``target``."""
    if target not in num_nodes:
        raise DataError(f"The labelled node type {target!r} is not declared; node types: {', '.join(num_nodes)}.")
    splits = splits or random_split(num_nodes[target], seed)
    classes = infer_num_classes(y) if num_classes is None else num_classes
    return HeteroGraphData(
        dict(num_nodes),
        dict(x),
        dict(edges),
        target_node=target,
        y=y,
        train_idx=splits[0],
        val_idx=splits[1],
        test_idx=splits[2],
        num_classes=classes,
        name=name,
    )


def with_reverse_edges(num_nodes: dict, edges: dict, skip: set = frozenset()) -> dict:
    """``edges`` plus ``(dst, rev_<relation>, src)`` for every type that has no reverse yet (and
    is not in ``skip``)."""
    return {**edges, **{rev: edges[et].flip(0) for rev, et in reverse_types(edges, skip).items()}}


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


def link_task(
    num_nodes: dict[str, int],
    x: dict,
    edges: dict,
    target: EdgeType,
    *,
    seed: int,
    val_fraction: float,
    test_fraction: float,
    eval_negatives: int,
    reverse: bool,
    held_out: tuple[torch.Tensor, torch.Tensor] | None = None,
    name: str = "hetero",
    undirected: bool = False,
) -> HeteroGraphData:
    """A link-prediction record: ``target``'s edges (duplicates dropped) split into train / val /
    test unless ``held_out`` gives (val, test); only train edges pass messages. Between nodes of
    one type a pair is held out in both directions (``(u, v)`` held out takes ``(v, u)`` out of
    training too). ``reverse``: add ``rev_`` edge types, built after the split so they mirror
    train edges only; a mirror the dataset brought under any name is rebuilt the same way.
    ``undirected``: the pairs stand for undirected edges (a homogeneous graph's)."""
    target = tuple(target)
    if target not in edges:
        raise DataError(
            f"The target edge type ({edge_name(target)}) is not among the edge types: "
            f"{'; '.join(map(edge_name, edges))}."
        )
    check_node_types(num_nodes)
    for t in (target[0], target[2]):
        if t not in num_nodes:
            raise DataError(
                f"The target edge type ({edge_name(target)}) has node type '{t}', which is not declared; "
                f"node types: {', '.join(num_nodes)}."
            )
    check_ids(
        f"edge_index[{edge_name(target)}] source", edges[target][0], num_nodes[target[0]], unit=f"'{target[0]}' node"
    )
    check_ids(
        f"edge_index[{edge_name(target)}] destination",
        edges[target][1],
        num_nodes[target[2]],
        unit=f"'{target[2]}' node",
    )
    n_dst = num_nodes[target[2]]
    if n_dst < 2:  # no other destination to draw a negative from
        raise DataError(
            f"Link prediction on ({edge_name(target)}) needs at least 2 '{target[2]}' nodes to draw "
            f"negatives; the graph has {n_dst}."
        )
    if held_out is not None:  # ids checked before pair_keys combines them (an id out of range would alias a pair)
        for kind, held in zip(("val_edges", "test_edges"), held_out):  # (not `name`: the record's name)
            check_pairs(f"{kind}[{edge_name(target)}]", held, target, num_nodes)
    pairs = distinct_pairs(edges[target], n_dst)
    val, test = (
        held_out if held_out is not None else _split_pairs(pairs, target, num_nodes, seed, val_fraction, test_fraction)
    )
    val, test = (distinct_pairs(e, num_nodes[target[2]]) for e in (val, test))
    held = torch.cat([val, test], dim=1)
    train = pairs[:, ~torch.isin(_pair_ids(pairs, target, num_nodes), _pair_ids(held, target, num_nodes))]
    mp, rev = _message_passing(num_nodes, edges, target, train, reverse)
    gen = torch.Generator().manual_seed(seed + 1)
    eval_negatives = min(eval_negatives, n_dst - 1)  # more would repeat candidates: rank among all of them
    data = HeteroGraphData(
        dict(num_nodes),
        dict(x),
        mp,
        target_edge=target,
        reverse_edge=rev,
        val_edges=val.contiguous(),
        test_edges=test.contiguous(),
        val_negatives=negative_destinations(val[1], eval_negatives, n_dst, gen),
        test_negatives=negative_destinations(test[1], eval_negatives, n_dst, gen),
        name=name,
        undirected=undirected,
    )
    target_edges = data.edge_index[target]
    if rev is not None:
        data.reverse_eid = mirror_ids(target_edges, data.edge_index[rev], num_nodes[target[0]])
    if target[0] == target[2]:
        data.twin_eid = find_pairs(target_edges, target_edges.flip(0), n_dst)
    return data


def distinct_pairs(edges: torch.Tensor, n_dst: int) -> torch.Tensor:
    """The distinct (src, dst) pairs of ``edges`` (by one integer key each: far faster than
    ``torch.unique(dim=1)`` on millions of edges)."""
    keys = torch.unique(pair_keys(edges, n_dst))
    return torch.stack([keys // n_dst, keys % n_dst])


def _pair_ids(pairs: torch.Tensor, target: EdgeType, num_nodes: dict) -> torch.Tensor:
    """A key per pair that is the same for ``(u, v)`` and ``(v, u)`` between nodes of one type
    (so a held-out pair takes its opposite out of training), and the ordered key otherwise."""
    n_dst = num_nodes[target[2]]
    if target[0] != target[2]:
        return pair_keys(pairs, n_dst)
    return torch.minimum(pairs[0], pairs[1]) * n_dst + torch.maximum(pairs[0], pairs[1])


def _split_pairs(
    pairs: torch.Tensor, target: EdgeType, num_nodes: dict, seed: int, val_fraction: float, test_fraction: float
):
    """Random val and test pairs; between nodes of one type the split is over unordered pairs, so
    both directions of one edge land in the same split."""
    ids = _pair_ids(pairs, target, num_nodes)
    groups, which = torch.unique(ids, return_inverse=True)
    if groups.numel() < 3:
        raise DataError(
            f"({edge_name(target)}) has {groups.numel()} distinct edges; link prediction needs at least 3 "
            "(one per split)."
        )
    _, val, test = random_split(groups.numel(), seed, (1 - val_fraction - test_fraction, val_fraction), unit="edge")
    return pairs[:, torch.isin(which, val)], pairs[:, torch.isin(which, test)]


def _message_passing(num_nodes: dict, edges: dict, target: EdgeType, train: torch.Tensor, reverse: bool):
    """The message-passing edges and the target's mirror type (or None). A type running the other
    way that holds every target pair flipped is a mirror the dataset brought (whatever its name):
    it is rebuilt from train edges, like a ``rev_`` type, and no ``rev_`` type is added beside it."""
    n_src = num_nodes[target[0]]
    flipped = pair_keys(edges[target].flip(0), n_src)
    mirrors = [
        et
        for et, ei in edges.items()
        if et != target
        and (et[0], et[2]) == (target[2], target[0])
        and ei.shape[1] >= edges[target].shape[1]
        and bool(torch.isin(flipped, pair_keys(ei, n_src)).all())
    ]
    if len(mirrors) > 1:
        raise DataError(
            f"Edge types {' and '.join(f'({edge_name(et)})' for et in mirrors)} both mirror the target "
            f"({edge_name(target)}); keep one."
        )
    mp = {et: train.flip(0) if et in mirrors else ei for et, ei in edges.items()}
    mp[target] = train
    if reverse:
        mp = with_reverse_edges(num_nodes, mp, skip={target, *mirrors} if mirrors else set())
    rev = (target[2], REVERSE_PREFIX + target[1], target[0])
    return mp, (mirrors[0] if mirrors else rev if rev in mp else None)


def find_pairs(edges: torch.Tensor, wanted: torch.Tensor, n_dst: int) -> torch.Tensor:
    """For each pair of ``wanted``, its position in ``edges``, or -1 where ``edges`` lacks it."""
    keys = pair_keys(edges, n_dst)
    order = torch.argsort(keys)
    want = pair_keys(wanted, n_dst)
    pos = torch.searchsorted(keys[order], want).clamp(max=max(0, keys.numel() - 1))
    found = order[pos] if keys.numel() else torch.full_like(want, -1)
    return torch.where(keys[found] == want, found, -1) if keys.numel() else found


def mirror_ids(edges: torch.Tensor, mirrored: torch.Tensor, n_src: int) -> torch.Tensor:
    """For each edge (s, d) of ``edges``, the position of (d, s) in ``mirrored`` (which holds
    every one of them: it was built by flipping ``edges``)."""
    keys = mirrored[0] * n_src + mirrored[1]
    order = torch.argsort(keys)
    return order[torch.searchsorted(keys[order], edges[1] * n_src + edges[0])]


def check_pairs(name: str, pairs: torch.Tensor, target: EdgeType, num_nodes: dict) -> None:
    """``pairs`` is an int64 [2, E] array of ids in range for ``target``'s source and destination types."""
    check_tensor(name, pairs, torch.int64, ndim=2)
    if pairs.shape[0] != 2:
        raise DataError(f"{name} has shape {list(pairs.shape)}; expected [2, E].")
    check_ids(f"{name} source", pairs[0], num_nodes[target[0]], unit=f"'{target[0]}' node")
    check_ids(f"{name} destination", pairs[1], num_nodes[target[2]], unit=f"'{target[2]}' node")


def negative_destinations(positive_dst: torch.Tensor, k: int, n_dst: int, gen: torch.Generator) -> torch.Tensor:
    """``[len(positive_dst), k]`` destinations drawn uniformly from the ``n_dst - 1`` nodes of
    ``[0, n_dst)`` other than each edge's own destination, in one draw (no redraw loop: a value
    at or past the positive moves up by one). ``k`` at least half of the candidates: drawn
    without repeats (``k = n_dst - 1`` is then every other destination once, an exact ranking);
    fewer: with repeats, as uniform sampling does. Needs ``k <= n_dst - 1`` (the callers refuse
    or clamp a larger ``k`` first)."""
    if k > n_dst - 1:
        raise ValueError(f"{k} negatives asked among {n_dst - 1} candidates")
    rows = positive_dst.numel()
    if 2 * k >= n_dst - 1:  # dense: a random order of the candidates per edge, its first k
        out = torch.argsort(torch.rand(rows, n_dst - 1, generator=gen), dim=1)[:, :k]
    else:
        out = torch.randint(0, n_dst - 1, (rows, k), generator=gen)
    return out + (out >= positive_dst.unsqueeze(1))


def from_homogeneous(data: GraphData, seed: int = 0) -> tuple[dict, dict, dict, EdgeType]:
    """A homogeneous graph as one node type and its undirected edges, each pair once as
    ``(node, to, node)`` in a random direction (drawn from ``seed``; a fixed u < v would let a
    model learn node order instead of links): link prediction then holds out whole pairs and
    adds ``rev_to``."""
    src, dst = data.edge_index
    lo, hi = torch.minimum(src, dst), torch.maximum(src, dst)
    keep = lo != hi
    pairs = distinct_pairs(torch.stack([lo[keep], hi[keep]]), data.num_nodes)
    flip = torch.rand(pairs.shape[1], generator=torch.Generator().manual_seed(seed)) < 0.5
    pairs = torch.where(flip, pairs.flip(0), pairs)
    target = ("node", "to", "node")
    return {"node": data.num_nodes}, {"node": data.x}, {target: pairs}, target


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
    # Set by a prepared folder (gnnbridge.core.records.folder): {edge type: (indptr, edges sorted
    # by destination [2, E])}, memory-mapped, for every edge type and its rev_ type; and the
    # class count prepare found. A node task then maps its topology instead of building it.
    topology: dict[EdgeType, tuple[torch.Tensor, torch.Tensor]] | None = None
    num_classes: int | None = None
    # Set when opened from a prepared folder (see LabelledRecord.folder; Mapped.mapped_from).
    folder = None

    def summary(self) -> dict:
        return {
            "name": self.name,
            "heterogeneous": True,
            "node_types": dict(self.num_nodes),
            "edge_types": {edge_name(et): int(e.shape[1]) for et, e in self.edges.items()},
        }

    def for_node_task(self, reverse: bool, seed: int) -> HeteroGraphData:
        """The node-classification record. From a prepared folder its topology is the folder's
        mapped CSC files (read-only, not validated again: prepare checked them), the same arrays
        as the build in memory, which every other source gets."""
        if self.target_node is None or self.y is None:
            raise ConfigError(f"Dataset '{self.name}' has no node labels (no labelled node type); use task=link.")
        mapped = self.mapped_topology(reverse)
        if mapped is not None:
            return mapped_node_task(self, mapped, seed)
        edges = with_reverse_edges(self.num_nodes, self.edges) if reverse else dict(self.edges)
        return node_task(self.num_nodes, self.x, edges, self.target_node, self.y, self.splits, seed, self.name)

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

    def for_link_task(
        self, edge_type: str, reverse: bool, seed: int, val_fraction: float, test_fraction: float, eval_negatives: int
    ) -> HeteroGraphData:
        """The link-prediction record, built in memory (:func:`link_task`). A run on a prepared
        folder maps a cache of it instead (:mod:`gnnbridge.core.app.linkcache`), except from a
        read-only folder whose cache no run could write yet, which lands here too."""
        target = self.link_target(edge_type)
        held_out = self.held_out if target == self.target_edge else None
        return link_task(
            self.num_nodes,
            self.x,
            self.edges,
            target,
            seed=seed,
            val_fraction=val_fraction,
            test_fraction=test_fraction,
            eval_negatives=eval_negatives,
            reverse=reverse,
            held_out=held_out,
            name=self.name,
            undirected=self.undirected,
        )


def mapped_node_task(source: HeteroSource, topology: dict, seed: int) -> HeteroGraphData:
    """A node task over ``topology`` (a prepared folder's mapped CSC files), built without
    validation, which would read every file whole: ``gnnbridge prepare`` checked ids, labels
    and splits, and its manifest records that. Splits the folder lacks are drawn from ``seed``
    as :func:`node_task` draws them."""
    t = source.target_node
    if t not in source.num_nodes:
        raise DataError(f"The labelled node type {t!r} is not declared; node types: {', '.join(source.num_nodes)}.")
    splits = source.splits or random_split(source.num_nodes[t], seed)
    classes = source.num_classes if source.num_classes is not None else infer_num_classes(source.y)
    return HeteroGraphData.unchecked(
        num_nodes=dict(source.num_nodes),
        x=dict(source.x),
        edge_index={et: e for et, (_, e) in topology.items()},
        indptr={et: p for et, (p, _) in topology.items()},
        target_node=t,
        y=source.y,
        train_idx=splits[0],
        val_idx=splits[1],
        test_idx=splits[2],
        num_classes=classes,
        name=source.name,
    )


def homogeneous_source(data: GraphData, seed: int = 0) -> HeteroSource:
    """A homogeneous graph as one node type whose undirected edges are one edge type, each pair
    once as ``(node, to, node)``: a link task holds out whole pairs and adds ``rev_to`` (which is
    why the reverse is always added for it)."""
    num_nodes, x, edges, target = from_homogeneous(data, seed)
    return HeteroSource(num_nodes, x, edges, target_edge=target, name=data.name, undirected=True)
