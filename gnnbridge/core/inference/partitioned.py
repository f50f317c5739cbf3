"""Exact layer-wise evaluation of a graph partitioned across machines: each machine computes
every layer for its own nodes.

Layer ``l`` of a machine's nodes reads layer ``l - 1`` of their in-neighbours: the machine's own
rows from its table, other machines' rows fetched from their owners over the same exchange the
partitioned sampler uses (:mod:`gnnbridge.core.sampling.distributed`); the one-hop neighbourhoods
of a machine's nodes are its part's own CSC. So no machine ever holds more than its own nodes'
layer, plus the rows one batch reads. The ranks of a machine split its nodes and all-gather each
layer among themselves (the machine's group); every rank of the job runs as many batches per
layer, the most any machine's rank needs, so the exchanges stay paired.

Scores are counted once per node: each rank of a machine scores a disjoint share of the
machine's split members, and the counts are summed over the job.
"""

from __future__ import annotations

import torch

from gnnbridge.core.contracts.interfaces import GNNModel
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.inference.evaluation import (
    Evaluator,
    LayerwiseEvaluator,
    LinkEvaluator,
    evaluation_mode,
    layer_batch_of,
)
from gnnbridge.core.inference.metrics import LinkScores, SharedLinkScores
from gnnbridge.core.inference.typed_layerwise import TypedLayerwiseEvaluator, TypedLayerwiseLinks, unwrap
from gnnbridge.core.records.features import gather_rows
from gnnbridge.core.sampling.distributed import PartitionHeteroSampler, PartitionSampler, exchange_for
from gnnbridge.core.sampling.neighbors import ALL_NEIGHBORS
from gnnbridge.core.sampling.seeds import machine_batches, machine_steps
from gnnbridge.core.tasks.retrieval import NO_SLOT, approximate_top_k, chunked_top_k, fillable, filled


class PartitionedLayerwise(LayerwiseEvaluator):
    """:class:`LayerwiseEvaluator` over a machine's part (see the module)."""

    def _evaluate(self, model: GNNModel, splits: tuple[str, ...]) -> dict[str, float]:
        return machine_scores(self, self.full_logits(model), splits)  # this machine's nodes, every rank of it

    @torch.no_grad()
    def full_logits(self, model: GNNModel) -> torch.Tensor:
        """``[n, num_classes]`` logits of this machine's ``n`` nodes (in the part's order), on CPU,
        on every rank of the machine."""
        ctx, part = self.ctx, self.data.partition
        one_hop = PartitionSampler.of(self.data, [ALL_NEIGHBORS], exchange_for(ctx))
        count = self.data.num_nodes
        shard = torch.tensor_split(torch.arange(count), ctx.local_world_size)[ctx.local_rank]
        steps = machine_steps(part.sizes, self.batch_size, ctx.local_world_size)
        h = self.data.x
        for layer in range(model.num_layers):
            outs = []
            for seeds in torch.tensor_split(shard, steps):
                sub = one_hop.sample(seeds + one_hop.start)
                rows = one_hop.fetch(sub.node, h)
                graph, rows = layer_batch_of(self.backend, sub, rows, ctx.device)
                last = layer == model.num_layers - 1
                outs.append(self.call.layer(model, layer, graph, rows, seeds.numel(), last=last).float().cpu())
            h = ctx.machine_rows(torch.cat(outs), count)
        return h


class PartitionedTypedLayerwise(TypedLayerwiseEvaluator):
    """:class:`TypedLayerwiseEvaluator` over a machine's part of a heterogeneous graph: each
    machine computes every layer of its own nodes of each type, reading the previous layer's
    rows of other machines' nodes from their owners (see the module)."""

    def __init__(self, backend, data, ctx, batch_size, call, layer_store: str = "auto", target=None):
        Evaluator.__init__(self, backend, data, ctx, batch_size, call, layer_store, target)
        self.layerwise = PartitionedTypedPass(backend, data, ctx, batch_size, self.call)

    def _predict(self, model: torch.nn.Module) -> torch.Tensor:
        """``[n, outputs]`` of this machine's ``n`` nodes of the labelled type, on every rank of it."""
        inner = unwrap(model)
        h = self.layerwise.states(model)[self.data.target_node]
        with self.call.blame("classify"):
            return inner.classify(h.to(self.ctx.device)).float().cpu()

    def _evaluate(self, model: torch.nn.Module, splits: tuple[str, ...]) -> dict[str, float]:
        return machine_scores(self, self._predict(model), splits)


class PartitionedTypedLinks(TypedLayerwiseLinks):
    """:class:`TypedLayerwiseLinks` over a machine's part of a link task: the machine's nodes'
    final states from the partitioned typed pass, then each of its held-out edges (those whose
    destination it owns) scored from its two ends' and its negatives' states, the rows of other
    machines' nodes fetched from their owners. The scores are counted once per edge and reduced
    over the job, as the sampled evaluator's are."""

    def __init__(self, backend, data, ctx, batch_size, sampler, seed, call, hits_at, layer_store: str = "auto"):
        LinkEvaluator.__init__(self, backend, data, ctx, batch_size, sampler, seed, call, hits_at)
        self.layerwise = PartitionedTypedPass(backend, data, ctx, batch_size, self.call)
        self._h: dict[str, torch.Tensor] | None = None

    def _per_edge(self, model: torch.nn.Module, split: str) -> LinkScores:
        scores = LinkScores(self.hits_at)
        edges, negatives = self.data.held_out(split)
        s, _, d = self.data.target_edge
        rows, k, device = self.layerwise.one_hop.rows, negatives.shape[1], self.ctx.device
        for ids in self._shard_batches(split):  # as many on every rank: each fetch is a collective
            src = rows[s].fetch(edges[0, ids], self._h[s])
            ends, again = torch.unique(torch.cat([edges[1, ids], negatives[ids].flatten()]), return_inverse=True)
            dst = rows[d].fetch(ends, self._h[d])[again]  # each row once: negatives repeat across edges
            n = ids.numel()
            if not n:
                continue
            with self.call.blame("decode"):
                positive = unwrap(model).decode(src.to(device), dst[:n].to(device)).float().cpu()
                negative = unwrap(model).decode(src.repeat_interleave(k, 0).to(device), dst[n:].to(device))
            scores.update(positive, negative.float().cpu().view(n, k))
        return scores

    def _shared(self, model: torch.nn.Module, split: str, negatives: torch.Tensor) -> SharedLinkScores:
        """The machine's held-out edges and the shared negative pairs it holds (both by their
        destination's machine), each scored from its ends' states."""
        scores = SharedLinkScores(self.hits_at)
        edges, _ = self.data.held_out(split)
        for ids in self._shard_batches(split):  # as many on every rank: each fetch is a collective
            scores.add_positives(self._fetched_scores(model, edges[0, ids], edges[1, ids]))
        for ids in self._pair_batches(split, negatives.shape[1]):
            scores.add_negatives(self._fetched_scores(model, negatives[0, ids], negatives[1, ids]))
        return scores

    def _fetched_scores(self, model: torch.nn.Module, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """Scores of pairs (global ids) from their ends' final states, other machines' rows
        fetched from their owners (a collective: every rank calls it as often)."""
        s, _, d = self.data.target_edge
        rows, device = self.layerwise.one_hop.rows, self.ctx.device
        a, b = rows[s].fetch(src, self._h[s]), rows[d].fetch(dst, self._h[d])
        if not src.numel():
            return torch.zeros(0)
        with self.call.blame("decode"):
            return unwrap(model).decode(a.to(device), b.to(device)).float().cpu()

    @torch.no_grad()
    def machine_predictions(
        self, model: torch.nn.Module, k: int, embeddings: bool, index: str = "exact"
    ) -> dict[str, torch.Tensor]:
        """``predict``'s arrays for this machine's sources, in the dataset's ids: each source's
        ``k`` best destinations of every machine (``src``, ``top_dst``, ``top_scores``,
        ``counts``, as the whole graph's lists are), leaving out its known pairs (its train
        edges, both ways when undirected, itself), every destination scored (``exact``) or
        searched in FAISS's HNSW index of them (``hnsw``, each machine its own index); with
        ``embeddings``, this machine's final states of every type (``embedding__T``) and their
        ids (``node_ids__T``). Every destination's states are fetched from its owner: a machine
        holds them all while it ranks (as the whole graph's lists need every destination)."""
        s, _, d = self.data.target_edge
        rows, n_dst = self.layerwise.one_hop.rows, self.data.num_nodes[d]
        with evaluation_mode(self.ctx, model, self.call, "its top-k pass"):
            h = self.layerwise.states(model)
            every = torch.arange(n_dst)
            h_dst, dst_ids = rows[d].fetch(every, h[d]), rows[d].original_ids(every)
            known = self._known_here()
            if index == "hnsw":
                top, scores = approximate_top_k(h[s], h_dst, k, known)
            else:
                with self.call.blame("decode (top-k)"):
                    top, scores = chunked_top_k(unwrap(model), h[s], h_dst, k, known, device=self.ctx.device)
        arrays = {
            "src": self.data.partition.types[s].node_ids,
            "top_dst": torch.where(top == NO_SLOT, top, dst_ids[top.clamp(min=0)]),
            "top_scores": scores.float(),
            "counts": fillable(known, h[s].shape[0], n_dst, k) if index == "exact" else filled(top),
        }
        return arrays | (self._states(h) if embeddings else {})

    def _states(self, h: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """This machine's final states of every type and their ids in the dataset."""
        types = self.data.partition.types
        return {key: v for t, states in h.items() for key, v in (
            (f"embedding__{t}", states), (f"node_ids__{t}", types[t].node_ids))}  # fmt: skip

    @torch.no_grad()
    def machine_pairs(
        self, model: torch.nn.Module, src: torch.Tensor, dst: torch.Tensor, embeddings: bool
    ) -> dict[str, torch.Tensor]:
        """``predict --pairs``' arrays for the given pairs (the dataset's ids) whose destination
        this machine owns: ``index`` (each pair's place in the given file), ``src``, ``dst``,
        ``scores``, ``probs``, each scored from its ends' final states (the source's fetched from
        its owner); with ``embeddings``, this machine's states as :meth:`machine_predictions`
        writes them. Every machine reads the whole file: only the machine holding an id can say
        which global id it is, so the ids are mapped by sums over the job."""
        s, _, d = self.data.target_edge
        with evaluation_mode(self.ctx, model, self.call, "its scoring of the given pairs"):
            self._h = h = self.layerwise.states(model)
            try:
                at_src, at_dst = self._global(src, s), self._global(dst, d)
                part = self.data.partition
                index = torch.nonzero(part.types[d].owners(at_dst) == part.part).flatten()
                ctx, counts = self.ctx, self._machine_counts(index.numel())
                batches = machine_batches(
                    index, counts, self.batch_size, 0, 0, ctx.local_rank, ctx.local_world_size, shuffle=False
                )
                scores = [self._fetched_scores(model, at_src[ids], at_dst[ids]) for ids in batches]
                scores = self.ctx.machine_rows(torch.cat(scores), index.numel())
            finally:
                self._h = None
        arrays = {
            "index": index,
            "src": src[index],
            "dst": dst[index],
            "scores": scores,
            "probs": torch.sigmoid(scores),
        }
        return arrays | (self._states(h) if embeddings else {})

    def _global(self, ids: torch.Tensor, t: str) -> torch.Tensor:
        """The global ids of nodes of type ``t`` given by their ids in the dataset: each machine
        names those it holds (its part's ``node_ids``), and the names are summed over the job."""
        part = self.data.partition.types[t]
        held, order = torch.sort(torch.as_tensor(part.node_ids))
        named = torch.zeros_like(ids)
        if held.numel() and self.ctx.local_rank == 0:  # (one rank a machine names its nodes)
            at = torch.searchsorted(held, ids).clamp(max=held.numel() - 1)
            here = held[at] == ids
            named[here] = part.start + order[at[here]] + 1
        return self.ctx.all_reduce_sum(named) - 1

    def _machine_counts(self, mine: int) -> list[int]:
        """Every machine's count of something, this one's ``mine`` (what equal batch counts need)."""
        part = self.data.partition
        counts = torch.zeros(part.parts, dtype=torch.int64)
        if self.ctx.local_rank == 0:
            counts[part.part] = mine
        return self.ctx.all_reduce_sum(counts).tolist()

    def _known_here(self) -> torch.Tensor:
        """[2, E] (this machine's source, as a local id; destination, global) pairs a list leaves
        out: the train edges of this machine's sources (held by their destinations' machines:
        sent here), their reverses when the pairs are undirected, and each source itself between
        nodes of one type."""
        s, _, d = self.data.target_edge
        rows = self.layerwise.one_hop.rows
        eids = torch.arange(self.data.split("train").numel())
        src, dst = self.data.train_pairs(eids)
        pairs = torch.stack([src, dst], 1)
        got, _, _, _ = rows[s].exchange.ask(pairs, rows[s].part.owners(src))  # every rank: a collective
        known = [got.t()]
        if self.data.undirected:  # (v, u) of a train edge (u, v) whose v is here: its source is here
            known.append(torch.stack([dst, src]))
        start = rows[s].start
        if s == d:
            mine = torch.arange(self.data.partition.types[s].sizes[self.data.partition.part]) + start
            known.append(torch.stack([mine, mine]))
        pairs = torch.cat(known, dim=1)
        return torch.stack([pairs[0] - start, pairs[1]])

    def score_pairs(self, model, src, dst):
        raise ConfigError(_WHOLE)

    def top_k(self, model, k, exclude, states=None, index="exact"):
        raise ConfigError(_WHOLE)


_WHOLE = (
    "a partitioned graph's pairs and top-k lists are scored by gnnbridge predict as a job of its machines "
    "(each writes its own), or with the folder whole (--set dataset.partitions=0)."
)


def machine_scores(ev: Evaluator, logits: torch.Tensor, splits: tuple[str, ...]) -> dict[str, float]:
    """The splits' metrics from ``logits`` of this machine's nodes (on every rank of it): each
    rank scores a share of its machine's members, and the counts are summed over the job, so
    every node counts once."""
    metrics: dict[str, float] = {}
    ctx = ev.ctx
    for split in splits:
        idx = torch.tensor_split(ev.data.split(split), ctx.local_world_size)[ctx.local_rank]
        scores = ev.target.scores(ev.data.num_classes)
        scores.update(logits[idx], ev.data.y[idx].to(logits.device))
        metrics.update(scores.reduce(ctx).as_metrics(split))
    return metrics


class PartitionedTypedPass:
    """Every node type's final states for this machine's nodes, layer by layer (the partitioned
    form of :class:`~gnnbridge.core.inference.typed_layerwise.TypedLayerwise`): a machine's ranks
    split its nodes of a type, each batch a one-hop sample across machines with every
    in-neighbour along every relation into the type, the previous layer's rows fetched from their
    owners; the machine's ranks then join the type's table. Every rank runs every type's batch
    count (the most any machine's rank needs), so the exchanges stay paired."""

    def __init__(self, backend, data, ctx, batch_size: int, call):
        self.backend, self.data, self.ctx, self.call = backend, data, ctx, call
        self.one_hop = PartitionHeteroSampler(data, {et: [ALL_NEIGHBORS] for et in data.edge_types}, exchange_for(ctx))
        self.reached = {et[2] for et in data.edge_types}
        types = data.partition.types
        self.counts = {t: types[t].sizes[types[t].part] for t in sorted(data.num_nodes)}
        self.steps = {t: machine_steps(types[t].sizes, batch_size, ctx.local_world_size) for t in self.counts}

    @torch.no_grad()
    def states(self, model: torch.nn.Module, stack=None) -> dict[str, torch.Tensor]:
        """``{type: [n_type, hidden]}`` of this machine's nodes, on CPU (call it in eval mode;
        ``stack`` as :class:`~gnnbridge.core.inference.typed_layerwise.TypedLayerwise` takes it:
        a machine's tables are in memory)."""
        inner = unwrap(model)
        h = {t: self._table(t, lambda ids, t=t: self._inputs(inner, t, ids)) for t in self.counts}
        for layer in range(inner.spec.layers):
            h = {
                t: self._table(t, lambda ids, t=t, i=layer, prev=h: self._layer(inner, i, t, ids, prev))
                if t in self.reached
                else h[t]
                for t in self.counts
            }
        return h

    def _inputs(self, model, node_type: str, ids: torch.Tensor) -> torch.Tensor | None:
        if not ids.numel():
            return None
        x = self.data.x.get(node_type)
        rows = self.data.partition.types[node_type].node_ids[ids] if x is None else gather_rows(x, ids)
        with self.call.blame("embed_inputs of the typed layer-wise pass"):
            return model.embed_inputs({node_type: rows.to(self.ctx.device)})[node_type]

    def _layer(self, model, layer: int, node_type: str, ids: torch.Tensor, h: dict) -> torch.Tensor | None:
        start = self.one_hop.rows[node_type].start
        sub = self.one_hop.sample({node_type: ids + start})  # every rank, empty or not: the hops are collectives
        rows = self.one_hop.fetch(sub.node, h)
        if not ids.numel():
            return None
        graph = self.backend.graph_to(self.backend.from_hetero_sampled(sub), self.ctx.device)
        rows = {t: r.to(self.ctx.device) for t, r in rows.items()}
        with self.call.blame(f"layer({layer}) of the typed layer-wise pass"):
            return model.layer(layer, graph, rows, block=0)[node_type]

    def _table(self, node_type: str, compute) -> torch.Tensor:
        """``compute(ids)`` for this rank's share of the machine's nodes of ``node_type``, batch by
        batch (None for an empty batch), joined among the machine's ranks. A table's width is
        agreed over the job, for a rank that computed no row."""
        ctx, count = self.ctx, self.counts[node_type]
        shard = torch.tensor_split(torch.arange(count), ctx.local_world_size)[ctx.local_rank]
        outs = [compute(ids) for ids in torch.tensor_split(shard, self.steps[node_type])]
        outs = [o.float().cpu() for o in outs if o is not None]
        width = max(ctx.gather_objects(int(outs[0].shape[1]) if outs else 0))
        rows = torch.cat(outs) if outs else torch.zeros((0, width))
        return ctx.machine_rows(rows, count)
