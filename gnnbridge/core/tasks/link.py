"""Link prediction on one edge type: the split of its pairs into train / val / test, the
message-passing edges (train pairs only, and their mirrors), and each held-out edge's fixed
negatives.

Only the train edges are message-passing edges (and so are their reverses, when reverse edges are
added), so no validation or test edge can be seen while training or while scoring itself. Each
val and test edge gets ``eval_negatives`` fixed destination nodes, drawn once from the train seed
alone: every backend and every world size ranks each edge among the same candidates, so MRR and
Hits@K compare across runs. Where the destination type has no more than ``eval_negatives`` other
nodes, the negatives are all of them, each once (an exact ranking, not duplicates). Under
``link.protocol=shared`` (OGB's ogbl-collab style) no edge has negatives of its own: each split
gets ``eval_negatives`` distinct (src, dst) pairs that are no edge of any split, drawn once from
the same seed, and every positive of the split is scored against all of them. Training edges
are kept out of their own neighbourhood by the sampler (it excludes a batch's seed edges and their
reverses, see :mod:`gnnbridge.core.sampling.hetero`), which is why the record maps each target
edge to its reverse edge. A run on a prepared folder builds the same arrays through the disk
instead (:mod:`gnnbridge.core.storage.linkcache`, tested equal).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gnnbridge.core.errors import ConfigError, DataError
from gnnbridge.core.records.data import GraphData, check_ids, check_tensor, random_split
from gnnbridge.core.records.hetero import (
    HOMOGENEOUS_EDGE,
    REVERSE_PREFIX,
    EdgeType,
    HeteroGraphData,
    HeteroSource,
    check_node_types,
    edge_name,
    pair_keys,
    with_reverse_edges,
)
from gnnbridge.core.tasks.negatives import negative_destinations, shared_capacity, shared_negative_pairs
from gnnbridge.core.tasks.pairs import check_pairs, distinct_pairs, find_pairs, mirror_ids


@dataclass(frozen=True)
class LinkSettings:
    """What fixes a link task's record (its split, its negatives, its message-passing edges):
    the target edge type (``""``: the dataset's own), reverse edges, the seed, the held-out
    fractions, the fixed negatives per held-out edge and how they are drawn. Every builder of
    the record takes these (in memory, through the disk, cut into a partitioned folder's parts),
    and the caches on disk are keyed by them."""

    edge_type: str
    reverse: bool
    seed: int
    val_fraction: float
    test_fraction: float
    eval_negatives: int
    protocol: str = "per-edge"

    @classmethod
    def of(cls, config) -> LinkSettings:
        """An experiment config's (``link.*``, ``dataset.reverse_edges``, ``train.seed``)."""
        link = config.link
        return cls(
            link.edge_type, config.dataset.reverse_edges, config.train.seed, link.val_fraction, link.test_fraction,
            link.eval_negatives, link.protocol,
        )  # fmt: skip

    @property
    def arguments(self) -> tuple:
        """In the order :func:`for_link_task` takes them after the source."""
        return (
            self.edge_type, self.reverse, self.seed, self.val_fraction, self.test_fraction, self.eval_negatives,
            self.protocol,
        )  # fmt: skip

    def as_set(self) -> dict:
        """The settings as ``--set`` names them (what a user gives a command to match them)."""
        return {
            "link.edge_type": self.edge_type,
            "train.seed": self.seed,
            "link.val_fraction": self.val_fraction,
            "link.test_fraction": self.test_fraction,
            "link.eval_negatives": self.eval_negatives,
            "link.protocol": self.protocol,
            "dataset.reverse_edges": self.reverse,
        }


def for_link_task(
    source: HeteroSource,
    edge_type: str,
    reverse: bool,
    seed: int,
    val_fraction: float,
    test_fraction: float,
    eval_negatives: int,
    protocol: str = "per-edge",
) -> HeteroGraphData:
    """The link-prediction record, built in memory (:func:`link_task`). A run on a prepared
    folder maps a cache of it instead (:mod:`gnnbridge.core.storage.linkcache`), except from a
    read-only folder whose cache no run could write yet, which lands here too."""
    target = source.link_target(edge_type)
    held_out = source.held_out if target == source.target_edge else None
    if held_out is not None and source.held_out_negatives is not None:
        if protocol != source.negatives_protocol:
            raise ConfigError(
                f"Dataset '{source.name}' brings its benchmark's {source.negatives_protocol} negatives; evaluate "
                f"it with link.protocol={source.negatives_protocol} (its experiment sets it)."
            )
        held_out = (*held_out, *source.held_out_negatives)
    return link_task(
        source.num_nodes,
        source.x,
        source.edges,
        target,
        seed=seed,
        val_fraction=val_fraction,
        test_fraction=test_fraction,
        eval_negatives=eval_negatives,
        protocol=protocol,
        reverse=reverse,
        held_out=held_out,
        name=source.name,
        undirected=source.undirected,
    )


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
    protocol: str = "per-edge",
    held_out: tuple | None = None,
    name: str = "hetero",
    undirected: bool = False,
) -> HeteroGraphData:
    """A link-prediction record: ``target``'s edges (duplicates dropped) split into train / val /
    test unless ``held_out`` gives (val, test); only train edges pass messages. Between nodes of
    one type a pair is held out in both directions (``(u, v)`` held out takes ``(v, u)`` out of
    training too). ``reverse``: add ``rev_`` edge types, built after the split so they mirror
    train edges only; a mirror the dataset brought under any name is rebuilt the same way.
    ``undirected``: the pairs stand for undirected edges (a homogeneous graph's). ``held_out``
    may also bring the splits' fixed negatives, (val, test, val negatives, test negatives), as a
    benchmark fixes them (per-edge [E, K] or shared [2, M] by ``protocol``); the held-out edges
    are then kept as given, in order, so each row meets its negatives."""
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
    given = held_out[2:] if held_out is not None and len(held_out) == 4 else None
    if held_out is not None:  # ids checked before pair_keys combines them (an id out of range would alias a pair)
        for kind, held in zip(("val_edges", "test_edges"), held_out[:2]):  # (not `name`: the record's name)
            check_pairs(f"{kind}[{edge_name(target)}]", held, target, num_nodes)
    pairs = distinct_pairs(edges[target], n_dst)
    val, test = (
        held_out[:2]
        if held_out is not None
        else _split_pairs(pairs, target, num_nodes, seed, val_fraction, test_fraction)
    )
    if given is None:  # (a benchmark's held-out edges stay as given: each meets its own negatives)
        val, test = (distinct_pairs(e, num_nodes[target[2]]) for e in (val, test))
    held = torch.cat([val, test], dim=1)
    train = pairs[:, ~torch.isin(_pair_ids(pairs, target, num_nodes), _pair_ids(held, target, num_nodes))]
    mp, rev = message_passing(num_nodes, edges, target, train, reverse)
    gen = torch.Generator().manual_seed(seed + 1)
    if given is not None:
        negatives, shared = _given_negatives(given, protocol, (val, test), target, num_nodes)
    elif protocol == "shared":
        known = torch.unique(_pair_ids(torch.cat([pairs, held], dim=1), target, num_nodes))
        bound = pairs.shape[1] + (held.shape[1] if held_out is not None else 0)  # as the on-disk build counts
        shared = shared_negatives(target, num_nodes, eval_negatives, bound, gen, _known_test(known, target, n_dst))
        negatives = [torch.zeros((e.shape[1], 0), dtype=torch.int64) for e in (val, test)]
    else:
        eval_negatives = min(eval_negatives, n_dst - 1)  # more would repeat candidates: rank among all of them
        negatives = [negative_destinations(e[1], eval_negatives, n_dst, gen) for e in (val, test)]
        shared = (None, None)
    data = HeteroGraphData(
        dict(num_nodes),
        dict(x),
        mp,
        target_edge=target,
        reverse_edge=rev,
        val_edges=val.contiguous(),
        test_edges=test.contiguous(),
        val_negatives=negatives[0],
        test_negatives=negatives[1],
        val_negative_pairs=shared[0],
        test_negative_pairs=shared[1],
        name=name,
        undirected=undirected,
    )
    target_edges = data.edge_index[target]
    if rev is not None:
        data.reverse_eid = mirror_ids(target_edges, data.edge_index[rev], num_nodes[target[0]])
    if target[0] == target[2]:
        data.twin_eid = find_pairs(target_edges, target_edges.flip(0), n_dst)
    return data


def _given_negatives(given, protocol: str, held: tuple, target: EdgeType, num_nodes: dict) -> tuple[list, tuple]:
    """A benchmark's fixed negatives as the record holds them: ``(per-edge [E, K] per split,
    shared [2, M] per split or Nones)``, checked for shape and ids."""
    if protocol == "shared":
        for name, pairs in zip(("val", "test"), given):
            check_pairs(f"{name}_negative_pairs[{edge_name(target)}]", pairs, target, num_nodes)
        return [torch.zeros((e.shape[1], 0), dtype=torch.int64) for e in held], tuple(given)
    out = []
    for name, edges, negatives in zip(("val", "test"), held, given):
        check_tensor(f"{name}_negatives", negatives, torch.int64, ndim=2)
        if negatives.shape[0] != edges.shape[1]:
            raise DataError(f"{name}_negatives has {negatives.shape[0]} rows for {edges.shape[1]} {name} edges.")
        check_ids(f"{name}_negatives", negatives, num_nodes[target[2]], unit=f"'{target[2]}' node")
        out.append(negatives.contiguous())
    return out, (None, None)


def shared_negatives(
    target: EdgeType, num_nodes: dict, count: int, edges: int, gen: torch.Generator, is_edge
) -> tuple[torch.Tensor, torch.Tensor]:
    """The val and test splits' shared negative pairs (``link.protocol=shared``), drawn in that
    order from ``gen``. ``edges`` bounds the distinct pairs ``is_edge`` knows as edges (the distinct
    target pairs, plus the held-out pairs a dataset brought: both builds count them alike, so both
    refuse alike; the draw needs ``count`` within the pairs that are not edges to end). The
    on-disk build (:mod:`gnnbridge.core.storage.linkcache`) calls it with its own ``is_edge``."""
    n_src, n_dst, same = num_nodes[target[0]], num_nodes[target[2]], target[0] == target[2]
    room = shared_capacity(n_src, n_dst, same, edges)
    if count > room:
        raise DataError(
            f"link.eval_negatives={count} shared negatives per split, but ({edge_name(target)}) has "
            f"{shared_capacity(n_src, n_dst, same, 0):,} possible pairs, at least {room:,} of them not "
            f"edges; use link.eval_negatives={room} or fewer."
        )
    return tuple(shared_negative_pairs(count, n_src, n_dst, same, is_edge, gen) for _ in range(2))


def _known_test(known: torch.Tensor, target: EdgeType, n_dst: int):
    """``is_edge`` for :func:`shared_negative_pairs`: whether a pair's id is in ``known`` (sorted
    ids of :func:`_pair_ids`, so between nodes of one type either direction is an edge)."""
    same = target[0] == target[2]

    def is_edge(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        lo, hi = (torch.minimum(src, dst), torch.maximum(src, dst)) if same else (src, dst)
        return torch.isin(lo * n_dst + hi, known)

    return is_edge


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


def message_passing(num_nodes: dict, edges: dict, target: EdgeType, train: torch.Tensor, reverse: bool):
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
    target = HOMOGENEOUS_EDGE
    return {"node": data.num_nodes}, {"node": data.x}, {target: pairs}, target


def homogeneous_source(data: GraphData, seed: int = 0) -> HeteroSource:
    """A homogeneous graph as one node type whose undirected edges are one edge type, each pair
    once as ``(node, to, node)``: a link task holds out whole pairs and adds ``rev_to`` (which is
    why the reverse is always added for it)."""
    num_nodes, x, edges, target = from_homogeneous(data, seed)
    return HeteroSource(num_nodes, x, edges, target_edge=target, name=data.name, undirected=True)
