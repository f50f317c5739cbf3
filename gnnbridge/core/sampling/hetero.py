"""The framework-neutral sampler for heterogeneous graphs: typed edges, a fanout per edge type,
seed nodes of one type or seed edges with negatives.

Written here because the libraries' heterogeneous samplers do not run everywhere: PyG's
``NeighborLoader`` on ``HeteroData`` and its ``LinkNeighborLoader`` need pyg-lib or
torch-sparse, which the pinned CPU stack lacks. It reuses the homogeneous sampler's vectorised
hop (:class:`~gnnbridge.core.sampling.neighbors.NeighborSampler`) once per edge type, so each
hop costs one vectorised draw per edge type, never a Python loop over nodes.

Link batches (:class:`LinkBatcher`) are built the same way for every backend: for a batch of
positive edges, ``negatives`` destinations per edge drawn uniformly from the destination type
(never the edge's own destination), the seed nodes of both ends, their sampled neighbourhood
with the batch's own positive edges *and their reverses* left out (so an edge is never a path to
its own label), and the (src, dst) pairs to score as local ids of the sample.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from gnnbridge.core.compiled import signals_deferred
from gnnbridge.core.contracts.interfaces import GraphStore
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.records.batches import MiniBatch
from gnnbridge.core.records.hetero import EdgeType, HeteroGraphData, find_edge_type
from gnnbridge.core.sampling import kernels
from gnnbridge.core.sampling.adapters import CoreSampler
from gnnbridge.core.sampling.neighbors import ALL_NEIGHBORS, NeighborSampler, _floyd_sample
from gnnbridge.core.sampling.seeds import NEGATIVES_STREAM, epoch_generator
from gnnbridge.core.tasks import negative_destinations

_NO_IDS = torch.zeros(0, dtype=torch.int64)


@dataclass
class HeteroSampledSubgraph:
    """A sampled neighbourhood of typed seeds.

    Fields:
        node: {node type: type-local global ids}; each type's seeds come first.
        row, col: {edge type: local ids of the sampled edges' source (into ``node[src]``) and
            destination (into ``node[dst]``)}.
        edge: {edge type: edge ids (positions in the type's destination-sorted edge list)}.
        num_seeds: {node type: how many of ``node[type]`` are seeds}.
        node_types, edge_types: every type the graph declares (a library that needs all of them,
            like DGL's heterographs, gets them even where the sample holds none).
        num_sampled_nodes: {node type: nodes first reached at hop 0 (the seeds), 1, ..., L}, for
            every declared type: each type's nodes come hop by hop, so hops 0..k are a prefix.
        num_sampled_edges: {edge type: edges drawn at hop 1, ..., L}, for every declared type:
            each type's edges come hop by hop too. Layer i of L then needs only the prefixes of
            hops 0..L-i (sources), 0..L-i-1 (destinations) and 1..L-i (edges), which is how both
            backends trim a batch (:func:`~gnnbridge.core.models.graphops.hetero_layer_bounds`).
    """

    node: dict[str, torch.Tensor]
    row: dict[EdgeType, torch.Tensor]
    col: dict[EdgeType, torch.Tensor]
    edge: dict[EdgeType, torch.Tensor]
    num_seeds: dict[str, int]
    node_types: list[str]
    edge_types: list[EdgeType]
    num_sampled_nodes: dict[str, list[int]]
    num_sampled_edges: dict[EdgeType, list[int]]
    edge_attr: dict[EdgeType, torch.Tensor] | None = None  # the sampled edges' features, per type that has them

    @property
    def layers(self) -> int:
        return len(next(iter(self.num_sampled_edges.values())))


@dataclass
class LinkMiniBatch(MiniBatch):
    """A link batch: ``seeds`` are edge ids, ``input_nodes`` {type: ids}, and the model scores
    ``pairs`` [2, P] (local src ids into ``input_nodes[src type]``, dst into ``input_nodes[dst type]``):
    first the ``positives`` edges, then each one's ``negatives_per_edge`` negatives, edge by edge."""

    pairs: torch.Tensor | None = None
    labels: torch.Tensor | None = None
    positives: int = 0
    negatives_per_edge: int = 0

    def __post_init__(self) -> None:
        if self.seeds.dim() != 1:
            raise ValueError("seeds must be a 1-D id tensor")


def typed_fanouts(data: HeteroGraphData, fanouts: list[int], edge_fanouts: dict) -> dict[EdgeType, list[int]]:
    """Each edge type's fanouts: ``sampler.edge_fanouts`` where it names the type, else ``fanouts``."""
    out = {et: list(fanouts) for et in data.edge_types}
    for text, values in edge_fanouts.items():
        try:
            out[find_edge_type(data.edge_types, str(text))] = list(values)
        except ConfigError as exc:
            raise ConfigError(str(exc).replace("link.edge_type", "sampler.edge_fanouts key")) from None
    return out


class HeteroNeighborSampler:
    """Uniform in-neighbour sampling without replacement per edge type, hop by hop.

    Hop ``i`` draws, for every node reached at hop ``i - 1`` (the seeds at hop 1), up to
    ``fanouts[et][i]`` in-neighbours along every edge type ``et`` that ends at its type. Edge
    types are visited in a fixed order, so the sample is a function of the seeds and the
    generator alone, the same for every backend. ``lockstep``: visit every relation at every hop,
    even where no node of its destination type was reached (a sampler whose hops are collectives
    across machines must, see :mod:`gnnbridge.core.sampling.distributed`)."""

    lockstep = False

    def __init__(self, data: HeteroGraphData, fanouts: dict[EdgeType, list[int]]):
        self.data = data
        self.fanouts = fanouts
        self.layers = len(next(iter(fanouts.values())))
        self._hops = {et: self._hopper(et) for et in sorted(data.edge_types)}
        self._maps = {t: torch.full((n,), -1, dtype=torch.int64) for t, n in data.num_nodes.items()}

    def _hopper(self, et: EdgeType) -> NeighborSampler:
        """The sampler of one relation's hops."""
        data = self.data
        return NeighborSampler(data.indptr[et], data.edge_index[et][0], self.fanouts[et], data.num_nodes[et[0]])

    @signals_deferred()  # once for the batch: its many kernel calls then skip their own
    def sample(
        self,
        seeds: dict[str, torch.Tensor],
        generator: torch.Generator | None = None,
        exclude: dict[EdgeType, torch.Tensor] | None = None,
    ) -> HeteroSampledSubgraph:
        """``seeds``: {type: unique ids}; ``exclude``: {edge type: edge ids never to sample}."""
        nodes = {t: [ids] for t, ids in seeds.items()}  # a type with no seeds stays (an empty batch has them)
        if self.lockstep:  # every type, reached or not: every relation's edges are listed too
            nodes = {t: nodes.get(t, [_NO_IDS]) for t in self.data.node_types}
        count = {t: int(ids.numel()) for t, ids in seeds.items()}
        for t, ids in seeds.items():
            self._maps[t][ids] = torch.arange(ids.numel())
        rows, cols, edges = {}, {}, {}
        per_hop_nodes = {t: [count.get(t, 0)] for t in self.data.node_types}
        per_hop_edges: dict[EdgeType, list[int]] = {et: [] for et in self.data.edge_types}
        frontier = {t: (0, n) for t, n in count.items() if n}  # [start, end) of last hop's nodes per type
        for hop in range(self.layers):
            added: dict[str, int] = {}
            # The last hop's nodes of each type, cut once per hop (every relation into a type reads them).
            reached = {t: torch.cat(nodes[t])[start:end] for t, (start, end) in frontier.items()}
            drawn = self._draw(reached, hop, generator, exclude)
            for et in self._hops:
                s, _, d = et
                if et not in drawn:
                    per_hop_edges[et].append(0)
                    continue
                nbr, eid, owner = drawn[et]
                start = frontier[d][0] if d in frontier else count.get(d, 0)
                known = count.get(s, 0)
                new, src_local = NeighborSampler._relabel(torch.empty(known, dtype=torch.int64), nbr, self._maps[s])
                if new.numel():
                    nodes.setdefault(s, []).append(new)
                    count[s] = known + new.numel()
                    added.setdefault(s, known)
                rows.setdefault(et, []).append(src_local)
                cols.setdefault(et, []).append(start + owner)
                edges.setdefault(et, []).append(eid)
                per_hop_edges[et].append(int(eid.numel()))
            for t, counts in per_hop_nodes.items():
                counts.append(count.get(t, 0) - sum(counts))
            frontier = {t: (first, count[t]) for t, first in added.items()}
        node = {t: torch.cat(parts) for t, parts in nodes.items()}
        for t, ids in node.items():
            self._maps[t][ids] = -1  # reset only what this batch touched
        cat = lambda parts: {et: torch.cat(p) for et, p in parts.items()}  # noqa: E731
        edge_ids = cat(edges)
        return HeteroSampledSubgraph(
            node,
            cat(rows),
            cat(cols),
            edge_ids,
            {t: int(ids.numel()) for t, ids in seeds.items()},
            self.data.node_types,
            self.data.edge_types,
            per_hop_nodes,
            per_hop_edges,
            self._edge_features(edge_ids),
        )

    def _draw(self, reached: dict[str, torch.Tensor], hop: int, generator, exclude) -> dict[EdgeType, tuple]:
        """``{edge type: (neighbours, edge ids, index into its destinations' reached nodes)}`` of one
        hop, every relation whose destination type was reached (every relation, ``lockstep``),
        in relation order: each draws from ``generator`` in turn, its left-out edges redrawn
        before the next relation draws."""
        drawn = {}
        for et, hopper in self._hops.items():
            if et[2] not in reached and not self.lockstep:
                continue
            dst_ids = reached.get(et[2], _NO_IDS)
            nbr, eid, owner = hopper._sample_hop(dst_ids, self.fanouts[et][hop], generator)
            if exclude is not None and et in exclude and nbr.numel():
                nbr, eid, owner = self._without(et, exclude[et], dst_ids, (nbr, eid, owner), hop, generator)
            drawn[et] = (nbr, eid, owner)
        return drawn

    def _edge_features(self, edge_ids: dict[EdgeType, torch.Tensor]) -> dict[EdgeType, torch.Tensor] | None:
        """The sampled edges' feature rows, per type that has them."""
        return {et: table[edge_ids[et]] for et, table in self.data.edge_attr.items() if et in edge_ids} or None

    def _without(self, et: EdgeType, banned: torch.Tensor, dst_ids: torch.Tensor, drawn: tuple, hop: int, generator):
        """The hop's draw with the ``banned`` edges left out (see :func:`leave_out`)."""
        return leave_out(
            self.data.indptr[et], self.data.edge_index[et][0], dst_ids, drawn, banned, self.fanouts[et][hop], generator
        )


def leave_out(indptr, sources, dst_ids, drawn: tuple, banned, fanout: int, generator, groups=None, banned_groups=None):
    """A hop's draw ``(neighbours, edge ids, index into dst_ids)`` with the ``banned`` edges left
    out *before* drawing (what DGL's ``exclude`` documents; its sampler on this stack can draw one
    and then drop it): a node with ``b`` banned in-edges draws again, ``fanout + b`` distinct
    positions uniformly (Floyd's algorithm, never its whole neighbour list: a hub of millions
    costs its fanout), drops the banned ones and keeps ``fanout`` of the rest in a random order.
    That is uniform over the allowed edges (the draw treats them all alike) and loses no
    neighbour the node could have had. Only those nodes (a batch's own endpoints, a few) are
    drawn again. ``groups`` / ``banned_groups``: a banned edge applies only to the rows of its
    group (a machine answering several askers at once bans each asker's edges for that asker's
    rows alone); by default one group."""
    nbr, eid, owner = drawn
    rows_group = torch.zeros_like(dst_ids) if groups is None else groups
    ban_group = torch.zeros_like(banned) if banned_groups is None else banned_groups
    n, e = indptr.numel(), sources.numel() + 1
    ban_keys = torch.sort(ban_group * n + torch.searchsorted(indptr, banned, right=True) - 1).values
    row_keys = rows_group * n + dst_ids
    hit = torch.isin(row_keys, ban_keys)
    if not bool(hit.any()):
        return nbr, eid, owner
    keep = ~hit[owner]
    again = hit.nonzero().flatten()
    keys = row_keys[again]
    extra = torch.searchsorted(ban_keys, keys, right=True) - torch.searchsorted(ban_keys, keys)
    cand, who = _redraw(indptr, dst_ids[again], extra, fanout, generator)
    allowed = ~torch.isin(rows_group[again][who] * e + cand, ban_group * e + banned)
    cand, who = cand[allowed], who[allowed]
    if fanout != ALL_NEIGHBORS:
        order = torch.argsort(torch.rand(cand.numel(), generator=generator))  # a random order per node...
        order = order[torch.argsort(who[order], stable=True)]  # ...grouped by node
        cand, who = cand[order], who[order]
        counts = torch.bincount(who, minlength=again.numel())
        take = torch.arange(cand.numel()) - (torch.cumsum(counts, 0) - counts)[who] < fanout
        cand, who = cand[take], who[take]
    return (
        torch.cat([nbr[keep], sources[cand]]),
        torch.cat([eid[keep], cand]),
        torch.cat([owner[keep], again[who]]),
    )


def _redraw(indptr: torch.Tensor, nodes: torch.Tensor, extra: torch.Tensor, fanout: int, generator):
    """For each of ``nodes``, ``fanout + extra`` distinct in-edge positions drawn uniformly (all of
    them where it has no more, or with ``fanout`` -1): ``(edge positions, index into nodes)``."""
    start = indptr[nodes]
    deg = indptr[nodes + 1] - start
    want = deg if fanout == ALL_NEIGHBORS else torch.minimum(deg, fanout + extra)
    whole = want == deg  # every in-edge: listed, not drawn
    listed = deg[whole]
    who = [torch.repeat_interleave(whole.nonzero().flatten(), listed)]
    slot = [torch.arange(int(listed.sum())) - (torch.cumsum(listed, 0) - listed).repeat_interleave(listed)]
    for m in torch.unique(want[~whole]).tolist():  # a few distinct sizes: fanout + 1, + 2, ...
        rows = (~whole & (want == m)).nonzero().flatten()
        picks = _floyd_sample(deg[rows], rows, m, kernels.draw_seed(generator))
        who.append(rows.repeat_interleave(m))
        slot.append(picks.flatten())
    who, slot = torch.cat(who), torch.cat(slot)
    return start[who] + slot, who


class LinkBatcher:
    """Positive edges (ids of the target type's train edges, or held-out pairs with their fixed
    negatives) to a :class:`LinkMiniBatch` of the core sampler's subgraph."""

    def __init__(self, data: HeteroGraphData, sampler: HeteroNeighborSampler, negatives: int):
        self.data = data
        self.sampler = sampler
        self.negatives = negatives
        self.target = data.target_edge
        self._train = data.edge_index[self.target]

    def train_batch(
        self, eids: torch.Tensor, generator: torch.Generator, negatives_from: torch.Generator
    ) -> tuple[HeteroSampledSubgraph, LinkMiniBatch]:
        """``negatives_from``: the negatives' own stream (:data:`~gnnbridge.core.sampling.seeds.NEGATIVES_STREAM`)."""
        src, dst = self.data.train_pairs(eids)
        return self._batch(
            eids, src, dst, self.train_negatives(dst, negatives_from), generator, self.data.excluded(eids)
        )

    def train_negatives(self, dst: torch.Tensor, negatives_from: torch.Generator) -> torch.Tensor:
        """``[len(dst), negatives]`` destinations, never the positive: every sampler's draw."""
        return negative_destinations(dst, self.negatives, self.data.num_nodes[self.target[2]], negatives_from)

    def held_out_batch(self, split: str, ids: torch.Tensor, generator: torch.Generator | None):
        edges, negatives = self.data.held_out(split)
        return self._batch(ids, edges[0, ids], edges[1, ids], negatives[ids], generator, None)

    def pairs_batch(self, ids, src, dst, negatives, generator):
        return self._batch(ids, src, dst, negatives, generator, None)

    def edge_batch(self, eids: torch.Tensor, generator: torch.Generator | None):
        """An edge task's evaluation batch: edges ``eids`` of the target type scored from their
        ends' neighbourhoods in the whole graph (nothing excluded, no negatives)."""
        src, dst = self._train[:, eids]
        return self._batch(eids, src, dst, src.new_zeros(eids.numel(), 0), generator, None)

    def _batch(self, ids, src, dst, negatives, generator, exclude):
        s_type, _, d_type = self.target
        k = negatives.shape[1]
        pair_src = torch.cat([src, src.repeat_interleave(k)])
        pair_dst = torch.cat([dst, negatives.flatten()])
        if s_type == d_type:
            seeds, inverse = torch.unique(torch.cat([pair_src, pair_dst]), return_inverse=True)
            local_src, local_dst = inverse[: pair_src.numel()], inverse[pair_src.numel() :]
            seed_dict = {s_type: seeds}
        else:
            src_seeds, local_src = torch.unique(pair_src, return_inverse=True)
            dst_seeds, local_dst = torch.unique(pair_dst, return_inverse=True)
            seed_dict = {s_type: src_seeds, d_type: dst_seeds}
        sub = self.sampler.sample(seed_dict, generator, exclude)
        labels = torch.cat([torch.ones(src.numel()), torch.zeros(negatives.numel())])
        mb = LinkMiniBatch(
            ids,
            sub.node,
            None,
            pairs=torch.stack([local_src, local_dst]),
            labels=labels,
            positives=int(src.numel()),
            negatives_per_edge=k,
        )
        return sub, mb


class HeteroStore(GraphStore):
    """A heterogeneous record as every backend sees it: the core sampler reads it directly and the
    backend converts each sample (:meth:`Backend.from_hetero_sampled`)."""

    @property
    def native(self) -> Any:
        return self.data


class CoreHeteroSampler(CoreSampler):
    """Heterogeneous batches on any backend: node batches (seeds of the labelled type) or link
    batches (:class:`LinkBatcher`; an edge task's have no negatives), sampled by core and
    converted by ``to_native``. Randomness comes from generators keyed on (seed, epoch, rank), as
    in the homogeneous core sampler (the training negatives from a stream of their own), so with
    the same seed every backend trains on the same batches."""

    def __init__(
        self, store: GraphStore, fanouts: dict[EdgeType, list[int]], to_native: Callable[[Any], Any], negatives: int = 1
    ):
        super().__init__(store, next(iter(fanouts.values())), to_native, HeteroNeighborSampler(store.data, fanouts))
        self.data: HeteroGraphData = store.data
        self.typed_fanouts = fanouts
        self.negatives = negatives
        self._links = LinkBatcher(self.data, self._sampler, negatives) if self.data.scores_pairs else None
        self.negatives_from = epoch_generator(0, 0, 0, stream=NEGATIVES_STREAM)

    def reseed(self, seed: int, epoch: int, rank: int) -> None:
        super().reseed(seed, epoch, rank)
        self.negatives_from = epoch_generator(seed, epoch, rank, stream=NEGATIVES_STREAM)

    def train_negatives(self, dst: torch.Tensor) -> torch.Tensor:
        """The next training batch's negatives for positive destinations ``dst`` (DGL's sampler
        takes them from here too, so both draw the same ones for the same batches)."""
        return self._links.train_negatives(dst, self.negatives_from)

    def loader(self, batches: list[torch.Tensor]) -> Iterable[MiniBatch]:
        """Training batches: seed nodes of the labelled type, or train edge ids."""
        for seeds in batches:
            if self._links is not None:
                yield self._native(*self._links.train_batch(seeds, self._generator, self.negatives_from))
            else:
                sub = self._sampler.sample({self.data.target_node: seeds}, self._generator)
                yield MiniBatch(seeds, sub.node, self._to_native(sub))

    def edges_loader(self, batches: list[torch.Tensor]) -> Iterable[LinkMiniBatch]:
        """An edge task's edges (ids of the target type) with nothing excluded: how evaluation
        scores them (training's :meth:`loader` leaves each batch's own edges out)."""
        for ids in batches:
            yield self._native(*self._links.edge_batch(ids, self._generator))

    def held_out_loader(self, split: str, batches: list[torch.Tensor]) -> Iterable[LinkMiniBatch]:
        """Val or test edges (ids into the split) with their fixed negatives."""
        for ids in batches:
            yield self._native(*self._links.held_out_batch(split, ids, self._generator))

    def pairs_loader(self, src: torch.Tensor, dst: torch.Tensor, batch: int) -> Iterable[LinkMiniBatch]:
        """Any (src, dst) pairs of the target edge type, ``batch`` at a time, with no negatives."""
        none = torch.zeros(0, dtype=torch.int64)
        for lo in range(0, src.numel(), batch):
            ids = torch.arange(lo, min(lo + batch, src.numel()))
            yield self._native(
                *self._links.pairs_batch(ids, src[ids], dst[ids], none.view(ids.numel(), 0), self._generator)
            )

    def _native(self, sub: HeteroSampledSubgraph, mb: LinkMiniBatch) -> LinkMiniBatch:
        mb.graph = self._to_native(sub)
        return mb
