"""Evaluation on all ranks, with exact metrics.

Two evaluators share one interface:

* :class:`LayerwiseEvaluator` computes every node's output one layer at a time with *all*
  neighbours (the PyG Reddit tutorial's ``inference``): no sampling noise, and each layer's
  work is done once for the whole graph instead of once per seed's L-hop tree. Ranks split the
  nodes, and all-gather each layer's output before the next layer reads it, or, when the
  layers would not fit in memory, write their rows into one shared memory-mapped file per layer
  (``eval.layer_store``, see :mod:`~gnnbridge.core.inference.layerstore`).
* :class:`SampledEvaluator` runs the split's nodes through a sampler: the training sampler
  (cheap, noisy, used for per-epoch validation on graphs where a full pass is too slow), or one
  taking every neighbour at every hop (``eval.mode=full``: exact for any model whose layers read
  only in-neighbours, the fallback for models without ``layer_forward``, and costlier than
  layer-wise on large graphs because neighbourhoods of different seeds overlap).

Graph tasks use :class:`GraphEvaluator`: whole graphs, batched by the training loader.

Sampled and graph evaluation score a disjoint share of each split per rank (no padding, unlike
``DistributedSampler``) and combine the counts across ranks; layer-wise evaluation ends with
every rank holding all logits and scores each split locally. Either way every node or graph
counts exactly once.

Before scoring, every rank takes rank 0's buffers (BatchNorm running statistics): DDP
broadcasts them at the start of each forward, so after the last step each rank holds its own
last update and would otherwise score its share with a slightly different model.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from contextlib import contextmanager, nullcontext

import torch
from torch.nn.parallel import DistributedDataParallel

from gnnbridge.core.contracts.interfaces import Backend, GNNModel, Sampler
from gnnbridge.core.contracts.targets import Target
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.inference.layerstore import LayerStore, every_rank_rows, output_table
from gnnbridge.core.inference.metrics import LinkScores, SharedLinkScores
from gnnbridge.core.inference.phases import NO_PHASES
from gnnbridge.core.models.build import ModelCall
from gnnbridge.core.plugins import get_target
from gnnbridge.core.records.batches import IndexedRows, MiniBatch, with_edge_features
from gnnbridge.core.records.collection import GraphCollection
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.records.features import gather_rows, reads_in_place
from gnnbridge.core.runtime.context import DistContext
from gnnbridge.core.sampling.hetero import LinkMiniBatch
from gnnbridge.core.sampling.neighbors import ALL_NEIGHBORS, NeighborSampler
from gnnbridge.core.sampling.seeds import machine_batches, machine_steps, split_batches
from gnnbridge.core.tasks import retrieval


class Evaluator(ABC):
    def __init__(
        self,
        backend: Backend,
        data: GraphData | GraphCollection,
        ctx: DistContext,
        batch_size: int,
        call: ModelCall | None = None,
        layer_store: str = "auto",
        target: Target | None = None,
    ):
        """``call``: how the model is called (names the model when it fails); a plain call by default.
        ``layer_store``: where an output row of every item lives (``eval.layer_store``: auto, memory,
        disk): each layer-wise layer, and the logits :meth:`predict` returns. ``target``: what the
        outputs predict, which scores them (one class per item by default)."""
        self.target = target or get_target("class")
        self.backend = backend
        self.data = data
        self.ctx = ctx
        self.batch_size = batch_size
        self.call = call or ModelCall("the model", data.num_classes)
        if self.call.tell is None:
            self.call.tell = ctx.doing  # calls into the model are watched (see ModelCall.watched)
        self.layer_store = layer_store

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, splits: tuple[str, ...]) -> dict[str, float]:
        """The target's metrics per split (``{'<split>_acc', '<split>_macro_f1'[, '<split>_roc_auc']}``
        for classes), identical on all ranks."""
        with evaluation_mode(self.ctx, model, self.call, f"its evaluation of {'/'.join(splits)}"):
            return self._evaluate(model, splits)

    @torch.no_grad()
    def predict(self, model: torch.nn.Module) -> torch.Tensor:
        """``[items, num_classes]`` logits of every node (or graph) in id order, on CPU, on every rank."""
        with evaluation_mode(self.ctx, model, self.call, "its prediction pass"):
            return self._predict(model)

    @abstractmethod
    def _evaluate(self, model: torch.nn.Module, splits: tuple[str, ...]) -> dict[str, float]: ...

    @abstractmethod
    def _predict(self, model: torch.nn.Module) -> torch.Tensor: ...

    def _shard_batches(self, split: str) -> list[torch.Tensor]:
        """This rank's disjoint, unpadded share of a split, in batches (empty ones dropped, but on a
        partitioned graph, where every rank must join every batch's exchanges)."""
        batches = split_batches(self.data, split, self.batch_size, 0, 0, self.ctx, shuffle=False)
        if self.data.partition is not None:
            return batches
        return [b for b in batches if b.numel()]


class LayerwiseEvaluator(Evaluator):
    def _predict(self, model: GNNModel) -> torch.Tensor:
        return self.full_logits(model)

    def _evaluate(self, model: GNNModel, splits: tuple[str, ...]) -> dict[str, float]:
        logits = self.full_logits(model)  # every rank holds all of them: score locally
        metrics: dict[str, float] = {}
        for split in splits:
            idx = self.data.split(split)
            scores = self.target.scores(self.data.num_classes)
            scores.update(logits[idx], self.data.y[idx].to(logits.device))  # y may be on the GPU (placement)
            metrics.update(scores.as_metrics(split))
        return metrics

    @torch.no_grad()
    def full_logits(self, model: GNNModel) -> torch.Tensor:
        """``[N, num_classes]`` logits of every node, on CPU, the same on every rank (call it in
        eval mode: layer outputs include dropout otherwise). With layers on disk
        (:mod:`~gnnbridge.core.inference.layerstore`) they are mapped from a file already unlinked."""
        with LayerStore(self.ctx, self.data.num_nodes, self.layer_store) as store:
            return self._layers(model, store)

    def _layers(self, model: GNNModel, store: LayerStore) -> torch.Tensor:
        data, ctx = self.data, self.ctx
        one_hop = NeighborSampler(data.indptr, data.indices, [ALL_NEIGHBORS])
        shards = ctx.row_shards(data.num_nodes)
        sizes, width = [s.numel() for s in shards], shards[0].numel()
        h = data.x
        for layer in range(model.num_layers):
            mine, shared = self._layer_output(model, layer, h, one_hop, shards[ctx.rank], width, store)
            h = None  # the previous layer's output can go before the next one is gathered
            h = every_rank_rows(ctx, store, mine, shared, sizes)
        return h

    def _layer_output(
        self,
        model: GNNModel,
        layer: int,
        h: torch.Tensor,
        one_hop: NeighborSampler,
        shard: torch.Tensor,
        width: int,
        store: LayerStore,
    ) -> tuple[torch.Tensor, bool]:
        """Layer ``layer``'s output for this rank's ``shard`` of nodes, written batch by batch
        into one ``width``-row buffer (the rows past the shard are padding for the all-gather),
        or into the store's file of all nodes' rows (True: every rank writes its own there)."""
        table, shared, offset = None, False, 0
        # A rank with no nodes (fewer nodes than ranks) still needs the output's width: one node.
        batches = shard.split(self.batch_size) if shard.numel() else [torch.zeros(1, dtype=torch.int64)]
        for seeds in batches:
            sub = with_edge_features(one_hop.sample(seeds), self.data)
            graph, rows = layer_batch(self.backend, model, h, sub, self.ctx.device)
            out = self.call.layer(model, layer, graph, rows, seeds.numel(), last=layer == model.num_layers - 1)
            if table is None:
                table, offset, shared = output_table(store, layer, out, shard, width)
            if shard.numel():
                start = int(seeds[0]) - offset
                table[start : start + out.shape[0]] = out.cpu()
        return table, shared


def layer_batch(backend: Backend, model: GNNModel, h: torch.Tensor, sub, device: torch.device):
    """A one-hop ``sub``'s graph and its input nodes' rows of ``h``, on ``device``, as
    ``layer_forward`` gets them (in layer-wise evaluation and in the dry step alike)."""
    rows = indexed_rows(model, h, sub.node, device)
    if rows is None:  # h on the host or the device, sub where the graph is
        rows = gather_rows(h, sub.node, pinned=device.type == "cuda")
    return layer_batch_of(backend, sub, rows, device)


def layer_batch_of(backend: Backend, sub, rows, device: torch.device):
    """A one-hop ``sub``'s graph and its input nodes' ``rows`` (gathered already), on ``device``."""
    graph = backend.graph_to(backend.from_sampled(sub), device)
    if not isinstance(rows, IndexedRows):
        rows = rows.to(device, non_blocking=True)
    return graph, rows


class BatchedEvaluator(Evaluator, ABC):
    """Scores mini-batches from a loader: each rank a disjoint share, counts combined."""

    @abstractmethod
    def _loader(self, batches: list[torch.Tensor]) -> Iterable[MiniBatch]: ...

    def _evaluate(self, model: torch.nn.Module, splits: tuple[str, ...]) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for split in splits:
            metrics.update(score_batches(self, model, self._loader(self._shard_batches(split)), split))
        return metrics

    def _predict(self, model: torch.nn.Module) -> torch.Tensor:
        """Every item through the loader: ranks split the ids, each writes its rows into one
        table (the store's mapped file when ``[items, classes]`` would not fit in memory, so
        ``predict`` streams it from disk; else a buffer the ranks all-gather)."""
        items = self.data.y.shape[0]
        if self.data.partition is not None:
            return self._predict_part(model, items)
        shards = self.ctx.row_shards(items)
        shard, sizes = shards[self.ctx.rank], [s.numel() for s in shards]
        batches = [b for b in shard.split(self.batch_size) if b.numel()]
        with LayerStore(self.ctx, items, self.layer_store) as store:
            table, offset, shared = output_table(store, 0, torch.empty(1, self.data.num_classes), shard, sizes[0])
            for mb in self._loader(batches):
                out = forward(self, model, mb).float().cpu()
                start = int(mb.seeds[0]) - offset  # a batch is a run of consecutive ids
                table[start : start + out.shape[0]] = out
            return every_rank_rows(self.ctx, store, table, shared, sizes)

    def _predict_part(self, model: torch.nn.Module, items: int) -> torch.Tensor:
        """A machine's part of a partitioned graph: its ranks split its nodes, every rank of the
        job runs as many batches (the loader's exchanges pair up), the machine joins its rows."""
        ctx = self.ctx
        shard = torch.tensor_split(torch.arange(items), ctx.local_world_size)[ctx.local_rank]
        steps = machine_steps(self.data.partition.sizes, self.batch_size, ctx.local_world_size)
        batches = list(torch.tensor_split(shard, steps))
        outs = [forward(self, model, mb).float().cpu() for mb in self._loader(batches)]
        return ctx.machine_rows(torch.cat(outs), items)


class SampledEvaluator(BatchedEvaluator):
    def __init__(
        self,
        backend: Backend,
        data: GraphData,
        ctx: DistContext,
        batch_size: int,
        sampler: Sampler,
        seed: int,
        call: ModelCall | None = None,
        layer_store: str = "auto",
        target: Target | None = None,
    ):
        super().__init__(backend, data, ctx, batch_size, call, layer_store, target)
        self.sampler = sampler
        self.seed = seed

    def _loader(self, batches: list[torch.Tensor]) -> Iterable[MiniBatch]:
        # A fixed stream: the same model gives the same sampled metric every time.
        self.sampler.reseed(self.seed, -1, self.ctx.rank)
        return self.sampler.loader(batches)


class EdgeEvaluator(SampledEvaluator):
    """An edge task's edges through the sampler's ``edges_loader``: each scored from its two ends'
    sampled neighbourhoods in the whole graph (see :mod:`gnnbridge.core.tasks.edge`)."""

    def _loader(self, batches: list[torch.Tensor]) -> Iterable[MiniBatch]:
        self.sampler.reseed(self.seed, -1, self.ctx.rank)
        return self.sampler.edges_loader(batches)


class GraphEvaluator(BatchedEvaluator):
    """Whole graphs through the task's graph loader; one row of logits per graph."""

    def __init__(
        self,
        backend: Backend,
        data: GraphCollection,
        ctx: DistContext,
        batch_size: int,
        loader: Sampler,
        call: ModelCall | None = None,
        layer_store: str = "auto",
        target: Target | None = None,
    ):
        super().__init__(backend, data, ctx, batch_size, call, layer_store, target)
        self.loader = loader

    def _loader(self, batches: list[torch.Tensor]) -> Iterable[MiniBatch]:
        return self.loader.loader(batches)


@contextmanager
def evaluation_mode(ctx: DistContext, model: torch.nn.Module, call: ModelCall | None = None, activity: str = ""):
    """Eval mode with rank 0's buffers (see the module docstring); the mode is restored after.
    With ``call``, every call into the model in the block is watched as part of ``activity``
    (a model that never returns ends the job after --timeout; see ``ModelCall.watched``)."""
    ctx.broadcast_buffers(model)
    was_training = model.training
    model.eval()
    try:
        with call.watched(activity) if call is not None else nullcontext():
            yield
    finally:
        model.train(was_training)


def score_batches(ev: Evaluator, model: torch.nn.Module, batches, split: str) -> dict[str, float]:
    """Run this rank's batches and combine the scores of all ranks."""
    scores = ev.target.scores(ev.data.num_classes)
    for mb in batches:
        scores.update(forward(ev, model, mb), ev.data.y[mb.seeds])
    return scores.reduce(ev.ctx).as_metrics(split)


def forward(ev: Evaluator, model: torch.nn.Module, mb: MiniBatch) -> torch.Tensor:
    """The model's logits for one batch's seeds (its graph and features on the rank's device),
    or, for an edge task's batch, a row per edge from its two ends."""
    if isinstance(mb, LinkMiniBatch):
        graph = ev.backend.graph_to(mb.graph, ev.ctx.device)
        return edge_outputs(ev, model, graph, gather_inputs(ev.data, mb.input_nodes, ev.ctx.device), mb)
    x = _to(mb.features, ev.ctx.device) if mb.features is not None else None
    x = x if x is not None else indexed_rows(model, ev.data.x, mb.input_nodes, ev.ctx.device)
    if x is None:
        x = gather_inputs(ev.data, mb.input_nodes, ev.ctx.device)
    return ev.call(model, ev.backend.graph_to(mb.graph, ev.ctx.device), x, mb.seeds.numel())


def step_outputs(run, model: torch.nn.Module, mb: MiniBatch, phases=NO_PHASES) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits, targets)`` of one training batch on ``run`` (the trainer or an evaluator): the
    outputs and labels of the seeds (an edge task's: of its edges), or, for a link batch, each
    pair's score as the logits of two classes (``[0, score]``, so cross-entropy is the binary
    cross-entropy of the score) and whether the pair is an edge. ``phases`` is told where
    gathering, the move to the device and the forward pass end."""
    device = run.ctx.device
    x = mb.features
    if x is None and not isinstance(mb, LinkMiniBatch):
        x = indexed_rows(model, run.data.x, mb.input_nodes, device)
    if x is None:
        x = gather_inputs(run.data, mb.input_nodes, None, pinned=device.type == "cuda")
    phases.mark("gather")
    graph = run.backend.graph_to(mb.graph, device)
    if not isinstance(x, IndexedRows):
        x = _to(x, device)
    if isinstance(mb, LinkMiniBatch) and run.data.is_edge:  # a row per edge, its label from the record
        y = run.data.y[mb.seeds].to(device, non_blocking=True)
        phases.mark("h2d")
        outputs = edge_outputs(run, model, graph, x, mb)
        phases.mark("forward")
        return outputs, y
    if isinstance(mb, LinkMiniBatch):
        pairs, labels = mb.pairs.to(device, non_blocking=True), mb.labels.to(device, non_blocking=True).long()
        phases.mark("h2d")
        scores = run.call.pairs(model, graph, x, pairs)
        phases.mark("forward")
        return torch.stack([torch.zeros_like(scores), scores], dim=1), labels
    y = run.data.y[mb.seeds].to(device, non_blocking=True)
    phases.mark("h2d")
    logits = run.call(model, graph, x, y.shape[0])
    phases.mark("forward")
    return logits, y


def edge_outputs(run, model: torch.nn.Module, graph, x, mb: LinkMiniBatch) -> torch.Tensor:
    """An edge task's batch through the model: a row per scored edge, from its two ends' states
    and (where its type has them) its own features."""
    device = run.ctx.device
    features = scored_features(run.data, mb.seeds, device)
    return run.call.edges(model, graph, x, mb.pairs.to(device, non_blocking=True), features)


def scored_features(data, ids: torch.Tensor, device: torch.device) -> torch.Tensor | None:
    """An edge task's scored edges' own features (``ids`` of its target type), where the type has
    some; None otherwise (the model is then called without them)."""
    table = data.edge_attr.get(data.target_edge)
    return None if table is None else table[ids].to(device, non_blocking=True)


def indexed_rows(model: torch.nn.Module, table, ids, device: torch.device) -> IndexedRows | None:
    """``table[ids]`` left ungathered, for a model that reads it so (``reads_indexed_rows``), when
    the table already sits on ``device`` as float32 in RAM; None: gather as usual (the rows must
    cross to the device, a heterogeneous batch, a mapped, 16-bit or cached table, or a model that
    reads gathered rows only)."""
    inner = model.module if isinstance(model, DistributedDataParallel) else model
    if (
        getattr(inner, "reads_indexed_rows", False) is not True
        or not isinstance(ids, torch.Tensor)
        or not isinstance(table, torch.Tensor)
        or table.device != device
        or not reads_in_place(table)
    ):
        return None
    return IndexedRows(table, ids.to(device))


def gather_inputs(data, input_nodes, device: torch.device | None, pinned: bool = False):
    """``x[input_nodes]`` as float32 on ``device`` (None: where ``x`` is); for heterogeneous batches
    ``{type: features}``, or the ids themselves for a featureless type (the model embeds them).
    ``pinned``: the rows go to a GPU later (see ``gather_rows``)."""
    pinned = pinned or (device is not None and torch.device(device).type == "cuda")
    if isinstance(input_nodes, dict):
        x = {t: (gather_rows(data.x[t], ids, pinned) if t in data.x else ids) for t, ids in input_nodes.items()}
    else:
        x = gather_rows(data.x, input_nodes, pinned)
    return x if device is None else _to(x, device)


def _to(x, device: torch.device):
    if isinstance(x, dict):
        return {t: v.to(device, non_blocking=True) for t, v in x.items()}
    return x.to(device, non_blocking=True)


class LinkEvaluator(Evaluator):
    """Held-out edges scored through a heterogeneous sampler's ``held_out_loader``, each with its
    fixed negatives (the per-edge protocol, :class:`LinkScores`), or, where the record holds a
    split's shared negative pairs, against those, scored through ``pairs_loader`` (the shared
    protocol, :class:`SharedLinkScores`). Each rank scores a disjoint share of the edges and of
    the negative pairs; the metrics combine them. Train edges have no fixed negatives, so only
    val and test are scored (training reports its own loss and pair accuracy)."""

    def __init__(
        self,
        backend: Backend,
        data,
        ctx: DistContext,
        batch_size: int,
        sampler: Sampler,
        seed: int,
        call: ModelCall,
        hits_at: int | list[int],
    ):
        super().__init__(backend, data, ctx, batch_size, call)
        self.sampler, self.seed, self.hits_at = sampler, seed, hits_at

    def _evaluate(self, model: torch.nn.Module, splits: tuple[str, ...]) -> dict[str, float]:
        metrics: dict[str, float] = {}
        self.sampler.reseed(self.seed, -1, self.ctx.rank)
        for split in (s for s in splits if s != "train"):
            shared = self.data.negative_pairs(split)
            scores = self._per_edge(model, split) if shared is None else self._shared(model, split, shared)
            metrics.update(scores.reduce(self.ctx).as_metrics(split))
        return metrics

    def _per_edge(self, model: torch.nn.Module, split: str) -> LinkScores:
        scores = LinkScores(self.hits_at)
        for mb in self.sampler.held_out_loader(split, self._shard_batches(split)):
            out = self._scores(model, mb)
            scores.update(out[: mb.positives], out[mb.positives :].view(mb.positives, mb.negatives_per_edge))
        return scores

    def _shared(self, model: torch.nn.Module, split: str, negatives: torch.Tensor) -> SharedLinkScores:
        """This rank's share of the split's edges (their batches carry no negatives), then its
        share of the negative pairs (:meth:`_pair_batches`)."""
        scores = SharedLinkScores(self.hits_at)
        for mb in self.sampler.held_out_loader(split, self._shard_batches(split)):
            scores.add_positives(self._scores(model, mb))
        for ids in self._pair_batches(split, negatives.shape[1]):
            for mb in self.sampler.pairs_loader(negatives[0, ids], negatives[1, ids], self.batch_size):
                scores.add_negatives(self._scores(model, mb))
        return scores

    def _pair_batches(self, split: str, count: int) -> list[torch.Tensor]:
        """This rank's batches of the split's ``count`` shared negative pairs: a contiguous share;
        on a machine's part of a partitioned graph, a share of the pairs it holds (those whose
        destination it owns), as many batches on every rank of the job (each is a collective)."""
        part = self.data.partition
        if part is None:
            return list(self.ctx.row_shards(count)[self.ctx.rank].split(self.batch_size))
        counts = self.data.negative_pairs_per_machine[split]
        ctx = self.ctx
        return machine_batches(
            torch.arange(count), counts, self.batch_size, 0, 0, ctx.local_rank, ctx.local_world_size, False
        )

    def _predict(self, model: torch.nn.Module) -> torch.Tensor:
        raise NotImplementedError("a link model scores pairs: use score_pairs or top_k")

    @torch.no_grad()
    def score_pairs(self, model: torch.nn.Module, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """The score of every (src, dst) pair of the target edge type, on CPU (one process)."""
        _whole_graph_only(self.data)
        with evaluation_mode(self.ctx, model, self.call, "its scoring of the given pairs"):
            return torch.cat(
                [self._scores(model, mb).cpu() for mb in self.sampler.pairs_loader(src, dst, self.batch_size)]
                or [torch.zeros(0)]
            )

    @torch.no_grad()
    def top_k(self, model: torch.nn.Module, k: int, exclude: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """For every source node, the ``k`` best-scoring destinations and their scores, leaving out
        the pairs in ``exclude`` [2, E] (what the source already has, e.g. its train edges). Every
        destination is scored: a cost of sources x destinations pairs. Exactly ``k`` slots per
        source; those no destination can fill hold ``NO_SLOT`` (:mod:`gnnbridge.core.tasks.retrieval`)."""
        _whole_graph_only(self.data)
        n_src, n_dst = (self.data.num_nodes[t] for t in (self.data.target_edge[0], self.data.target_edge[2]))
        best, scores = [], []
        per_batch = max(1, (64 * self.batch_size) // n_dst)  # sources per batch: about 64 x batch_size pairs
        with evaluation_mode(self.ctx, model, self.call, "its top-k pass"):
            for sources in torch.arange(n_src).split(per_batch):
                src = sources.repeat_interleave(n_dst)
                dst = torch.arange(n_dst).repeat(sources.numel())
                out = torch.cat(
                    [self._scores(model, mb).cpu() for mb in self.sampler.pairs_loader(src, dst, 64 * self.batch_size)]
                ).view(-1, n_dst)
                mine = exclude[:, (exclude[0] >= sources[0]) & (exclude[0] <= sources[-1])]
                out[mine[0] - sources[0], mine[1]] = float("-inf")
                top = out.topk(min(k, n_dst), dim=1)
                best.append(top.indices)
                scores.append(top.values)
        lists = retrieval.pad(torch.cat(best), torch.cat(scores), k)
        return retrieval.unfilled_slots(*lists, retrieval.fillable(exclude, n_src, n_dst, k))

    def _scores(self, model: torch.nn.Module, mb) -> torch.Tensor:
        device = self.ctx.device  # a partitioned graph's batch brings its rows, fetched from their owners
        return self.call.pairs(
            model,
            self.backend.graph_to(mb.graph, device),
            _to(mb.features, device) if mb.features is not None else gather_inputs(self.data, mb.input_nodes, device),
            mb.pairs.to(self.ctx.device),
        )


def _whole_graph_only(data) -> None:
    """Given pairs and top-k lists in one process need the graph whole: a machine's part scores
    them as a job of the machines, from layer-wise states (``PartitionedTypedLinks``)."""
    if data.partition is not None:
        raise ConfigError(
            "a partitioned graph's pairs and top-k lists are scored by a job of its machines from layer-wise "
            "states (eval.mode=layerwise), or with the folder whole (--set dataset.partitions=0)."
        )


def supports_layerwise(model: torch.nn.Module) -> bool:
    """Whether ``model`` can run one layer at a time (``layer_forward`` and ``num_layers``)."""
    return callable(getattr(model, "layer_forward", None)) and isinstance(getattr(model, "num_layers", None), int)
