"""Exact layer-wise inference on heterogeneous graphs: every node type's final states, one layer
at a time over *all* neighbours, split across ranks as the homogeneous pass is
(:class:`~gnnbridge.core.inference.evaluation.LayerwiseEvaluator`).

Why a pass of its own: a typed layer reads several tables (one per source type of the relations
into a type) and writes one per destination type, so the homogeneous pass's one ``[N, width]``
table per layer does not fit. Here, for each layer and each node type some relation points into,
the ranks split that type's nodes; each batch is a one-hop sample with every in-neighbour along
every relation into the type (core's typed sampler with fanout -1), converted by the backend,
and the model's :meth:`~gnnbridge.core.models.hetero.HeteroSAGE.layer` computes the batch's
rows from the previous layer's tables. A type no relation points into keeps its input states.
Each table is all-gathered, or, where it would not fit, written by every rank into one shared
mapped file (:class:`~gnnbridge.core.inference.layerstore.LayerStore`, ``eval.layer_store``).

A model qualifies when it says ``typed_layerwise = True`` and has ``embed_inputs``, ``layer``,
``classify``, ``decode`` and ``spec.layers`` (core's heterogeneous models do). The result is the same, up to
float rounding, as sampling every seed's whole L-hop neighbourhood (``eval.mode=full``; tested
on both backends), at a cost of one pass over the edges per layer instead of one per seed's
tree.
"""

from __future__ import annotations

from contextlib import ExitStack, nullcontext

import torch
from torch.nn.parallel import DistributedDataParallel

from gnnbridge.core.contracts.interfaces import Backend
from gnnbridge.core.inference.evaluation import (
    Evaluator,
    LinkEvaluator,
    evaluation_mode,
    gather_inputs,
    scored_features,
)
from gnnbridge.core.inference.layerstore import LayerStore, every_rank_rows, output_table
from gnnbridge.core.inference.metrics import LinkScores, SharedLinkScores
from gnnbridge.core.models.build import ModelCall
from gnnbridge.core.records.hetero import HeteroGraphData
from gnnbridge.core.runtime.context import DistContext
from gnnbridge.core.sampling.hetero import HeteroNeighborSampler
from gnnbridge.core.sampling.neighbors import ALL_NEIGHBORS
from gnnbridge.core.tasks.retrieval import approximate_top_k, chunked_top_k


def supports_typed_layerwise(model: torch.nn.Module) -> bool:
    inner = unwrap(model)
    return (
        getattr(inner, "typed_layerwise", False) is True
        and isinstance(getattr(getattr(inner, "spec", None), "layers", None), int)
        and all(callable(getattr(inner, name, None)) for name in ("embed_inputs", "layer", "classify", "decode"))
    )


class TypedLayerwise:
    """One pass's final states of every node type (``states``), the same on every rank."""

    def __init__(
        self,
        backend: Backend,
        data: HeteroGraphData,
        ctx: DistContext,
        batch_size: int,
        layer_store: str,
        call: ModelCall | None = None,
    ):
        """``call``: names the model when one of its methods fails, and watches each call (see
        ``ModelCall.watched``)."""
        self.backend, self.data, self.ctx = backend, data, ctx
        self.call = call
        self.batch_size, self.layer_store = batch_size, layer_store
        self.one_hop = HeteroNeighborSampler(data, {et: [ALL_NEIGHBORS] for et in data.edge_types})
        self.reached = sorted({et[2] for et in data.edge_types})

    @torch.no_grad()
    def states(self, model: torch.nn.Module, stack: ExitStack) -> dict[str, torch.Tensor]:
        """``{type: [N_type, hidden]}`` after the last layer, on CPU (call it in eval mode).
        Tables on disk stay mapped until ``stack`` closes (their folders are removed then)."""
        inner = unwrap(model)
        stores = {
            t: stack.enter_context(LayerStore(self.ctx, n, self.layer_store)) for t, n in self.data.num_nodes.items()
        }
        n = self.data.num_nodes
        h = {t: self._table(stores[t], -1, n[t], lambda ids, t=t: self.inputs(inner, t, ids)) for t in stores}
        for layer in range(inner.spec.layers):
            h = {
                t: self._table(
                    stores[t], layer, n[t], lambda ids, t=t, i=layer, prev=h: self._layer(inner, i, t, ids, prev)
                )
                if t in self.reached
                else h[t]
                for t in stores
            }
        return h

    def inputs(self, model, node_type: str, ids: torch.Tensor) -> torch.Tensor:
        rows = gather_inputs(self.data, {node_type: ids}, self.ctx.device)  # the shared row gather (features.py)
        with self.blame("embed_inputs of the typed layer-wise pass"):
            return model.embed_inputs(rows)[node_type]

    def _layer(self, model, layer: int, node_type: str, ids: torch.Tensor, h: dict) -> torch.Tensor:
        sub = self.one_hop.sample({node_type: ids})
        graph = self.backend.graph_to(self.backend.from_hetero_sampled(sub), self.ctx.device)
        rows = {t: h[t][nodes].to(self.ctx.device) for t, nodes in sub.node.items()}
        with self.blame(f"layer({layer}) of the typed layer-wise pass"):
            return model.layer(layer, graph, rows, block=0)[node_type]

    def blame(self, what: str):
        return self.call.blame(what) if self.call is not None else nullcontext()

    def _table(self, store: LayerStore, layer: int, count: int, compute) -> torch.Tensor:
        """``compute(ids)`` for this rank's share of ``count`` rows (a node type's nodes, or an edge
        task's edges), batch by batch, then every rank's rows joined (all-gathered, or one shared
        mapped file per type, whose previous layer's file goes when the next one is made)."""
        shards = aligned_shards(count, self.batch_size, self.ctx.world_size)
        shard, sizes = shards[self.ctx.rank], [s.numel() for s in shards]
        # A rank with no nodes still needs the rows' width: it computes node 0 and keeps none.
        batches = shard.split(self.batch_size) if shard.numel() else [torch.zeros(1, dtype=torch.int64)]
        table, offset, shared = None, 0, False
        for ids in batches:
            out = compute(ids).float().cpu()
            if table is None:
                table, offset, shared = output_table(store, layer, out, shard, sizes[0])
            if shard.numel():
                table[int(ids[0]) - offset : int(ids[0]) - offset + out.shape[0]] = out
        return every_rank_rows(self.ctx, store, table, shared, sizes)


class TypedLayerwiseEvaluator(Evaluator):
    """Heterogeneous node classification from one typed layer-wise pass: the labelled type's
    logits for every node, the same on every rank, each split scored locally."""

    def __init__(self, backend, data: HeteroGraphData, ctx, batch_size, call, layer_store: str = "auto", target=None):
        super().__init__(backend, data, ctx, batch_size, call, layer_store, target)
        self.layerwise = TypedLayerwise(backend, data, ctx, batch_size, layer_store, self.call)

    def _predict(self, model: torch.nn.Module) -> torch.Tensor:
        inner = unwrap(model)
        with ExitStack() as stack:
            h = self.layerwise.states(model, stack)[self.data.target_node]
            store = stack.enter_context(LayerStore(self.ctx, h.shape[0], self.layer_store))
            device = self.ctx.device
            return self.layerwise._table(store, 0, h.shape[0], lambda ids: self._classify(inner, h[ids], device))

    def _classify(self, model, h: torch.Tensor, device: torch.device) -> torch.Tensor:
        with self.call.blame("classify"):
            return model.classify(h.to(device))

    def _evaluate(self, model: torch.nn.Module, splits: tuple[str, ...]) -> dict[str, float]:
        logits = self._predict(model)
        metrics: dict[str, float] = {}
        for split in splits:
            idx = self.data.split(split)
            scores = self.target.scores(self.data.num_classes)
            scores.update(logits[idx], self.data.y[idx])
            metrics.update(scores.as_metrics(split))
        return metrics


class TypedLayerwiseEdges(TypedLayerwiseEvaluator):
    """An edge task from one typed layer-wise pass: every edge of the target type scored by the
    model's ``decode`` on its two ends' final states (exact: evaluation excludes nothing, see
    :mod:`gnnbridge.core.tasks.edge`), the same on every rank, each split scored locally."""

    def _predict(self, model: torch.nn.Module) -> torch.Tensor:
        inner, device = unwrap(model), self.ctx.device
        s, _, d = self.data.target_edge
        edges = self.data.edge_index[self.data.target_edge]
        with ExitStack() as stack:
            h = self.layerwise.states(model, stack)
            store = stack.enter_context(LayerStore(self.ctx, edges.shape[1], self.layer_store))

            def decode(ids: torch.Tensor) -> torch.Tensor:
                features = scored_features(self.data, ids, device)
                with self.call.blame("decode"):
                    src, dst = h[s][edges[0, ids]].to(device), h[d][edges[1, ids]].to(device)
                    return inner.decode(src, dst) if features is None else inner.decode(src, dst, features)

            return self.layerwise._table(store, 0, edges.shape[1], decode)


class TypedLayerwiseLinks(LinkEvaluator):
    """Held-out edges, given pairs and top-k lists scored from every node's final states (one
    typed layer-wise pass, then the model's ``decode`` on rows): no neighbourhood is sampled per
    pair, and each pair's score is the one ``eval.mode=full`` gives."""

    def __init__(self, *args, layer_store: str = "auto", **kwargs):
        super().__init__(*args, **kwargs)
        self.layerwise = TypedLayerwise(self.backend, self.data, self.ctx, self.batch_size, layer_store)
        self._h: dict[str, torch.Tensor] | None = None

    def _evaluate(self, model: torch.nn.Module, splits: tuple[str, ...]) -> dict[str, float]:
        with ExitStack() as stack:
            self._h = self.layerwise.states(model, stack)
            try:
                return super()._evaluate(model, splits)
            finally:
                self._h = None

    def embeddings(self, model: torch.nn.Module, stack: ExitStack) -> dict[str, torch.Tensor]:
        """Every node type's final states ``{type: [N, hidden]}`` (mapped from disk when large)."""
        with evaluation_mode(self.ctx, model, self.call, "its embeddings pass"):
            return self.layerwise.states(model, stack)

    def _per_edge(self, model: torch.nn.Module, split: str) -> LinkScores:
        scores = LinkScores(self.hits_at)
        edges, negatives = self.data.held_out(split)
        k = negatives.shape[1]
        for ids in self._aligned_batches(edges.shape[1]):
            src, dst = edges[0, ids], edges[1, ids]
            negative = self._decode(model, src.repeat_interleave(k), negatives[ids].flatten())
            scores.update(self._decode(model, src, dst), negative.view(ids.numel(), k))
        return scores

    def _shared(self, model: torch.nn.Module, split: str, negatives: torch.Tensor) -> SharedLinkScores:
        scores = SharedLinkScores(self.hits_at)
        edges, _ = self.data.held_out(split)
        for ids in self._aligned_batches(edges.shape[1]):
            scores.add_positives(self._decode(model, edges[0, ids], edges[1, ids]))
        for part in self._aligned_batches(negatives.shape[1]):
            scores.add_negatives(self._decode(model, negatives[0, part], negatives[1, part]))
        return scores

    def _aligned_batches(self, count: int) -> list[torch.Tensor]:
        """This rank's batches of ``count`` items, on boundaries that do not move with the world
        size (see :func:`aligned_shards`)."""
        shard = aligned_shards(count, self.batch_size, self.ctx.world_size)[self.ctx.rank]
        return list(shard.split(self.batch_size))

    def _decode(self, model: torch.nn.Module, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        s, _, d = self.data.target_edge
        device = self.ctx.device
        with self.call.blame("decode"):
            return unwrap(model).decode(self._h[s][src].to(device), self._h[d][dst].to(device)).float().cpu()

    @torch.no_grad()
    def score_pairs(self, model: torch.nn.Module, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        with ExitStack() as stack, evaluation_mode(self.ctx, model, self.call, "its scoring of the given pairs"):
            self._h = self.layerwise.states(model, stack)
            try:
                parts = [
                    self._decode(model, a, b) for a, b in zip(src.split(self.batch_size), dst.split(self.batch_size))
                ]
                return torch.cat(parts) if parts else torch.zeros(0)
            finally:
                self._h = None

    @torch.no_grad()
    def top_k(
        self,
        model: torch.nn.Module,
        k: int,
        exclude: torch.Tensor,
        states: dict[str, torch.Tensor] | None = None,
        index: str = "exact",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every source's ``k`` best destinations from the final states (``states``, or a pass
        made here): ``exact``, a chunk of sources at a time (:func:`~gnnbridge.core.tasks.retrieval.chunked_top_k`:
        never every pair at once), or ``hnsw``, FAISS's approximate index (a dot-product decoder)."""
        s, _, d = self.data.target_edge
        with ExitStack() as stack, evaluation_mode(self.ctx, model, self.call, "its top-k pass"):
            h = states if states is not None else self.layerwise.states(model, stack)
            if index == "hnsw":
                return approximate_top_k(h[s], h[d], k, exclude)
            with self.call.blame("decode (top-k)"):
                return chunked_top_k(unwrap(model), h[s], h[d], k, exclude, device=self.ctx.device)


def aligned_shards(count: int, batch: int, world: int) -> list[torch.Tensor]:
    """Ids ``0..count-1`` in one contiguous shard per rank made of whole batches of ``batch``: a
    row is then computed in the same batch, with the same neighbours, on any number of ranks.
    (CPU matrix products round the last bit differently for different row counts, so batches cut
    from per-rank shards would make the states, and ties between scores, depend on the world size.)"""
    batches = -(-count // batch)
    per_rank = -(-batches // world) * batch
    return [torch.arange(min(r * per_rank, count), min((r + 1) * per_rank, count)) for r in range(world)]


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if isinstance(model, DistributedDataParallel) else model
