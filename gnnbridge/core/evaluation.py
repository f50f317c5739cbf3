"""Evaluation on all ranks, with exact metrics.

Two evaluators share one interface:

* :class:`LayerwiseEvaluator` computes every node's output one layer at a time with *all*
  neighbours (the PyG Reddit tutorial's ``inference``): no sampling noise, and each layer's
  work is done once for the whole graph instead of once per seed's L-hop tree. Ranks split the
  nodes, and all-gather each layer's output before the next layer reads it.
* :class:`SampledEvaluator` runs the split's nodes through the training sampler (cheap, noisy,
  used for per-epoch validation on graphs where a full pass is too slow).

Sampled evaluation scores a disjoint share of each split per rank and sums the confusion
matrices across ranks; layer-wise evaluation ends with every rank holding all logits and
scores each split locally. Either way every node counts exactly once.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from gnnbridge.core.data import GraphData
from gnnbridge.core.distributed import DistContext
from gnnbridge.core.interfaces import Backend, GNNModel, Sampler
from gnnbridge.core.metrics import ConfusionCounts
from gnnbridge.core.sampling import ALL_NEIGHBORS, NeighborSampler, epoch_batches


class Evaluator(ABC):
    def __init__(self, backend: Backend, data: GraphData, ctx: DistContext, batch_size: int):
        self.backend = backend
        self.data = data
        self.ctx = ctx
        self.batch_size = batch_size

    @abstractmethod
    def evaluate(self, model: GNNModel, splits: tuple[str, ...]) -> dict[str, float]:
        """``{'<split>_acc': ..., '<split>_macro_f1': ...}`` for each split, identical on all ranks."""


class LayerwiseEvaluator(Evaluator):
    @torch.no_grad()
    def evaluate(self, model: GNNModel, splits: tuple[str, ...]) -> dict[str, float]:
        logits = self.full_logits(model)  # every rank holds all of them: score locally
        metrics: dict[str, float] = {}
        for split in splits:
            idx = self.data.split(split)
            counts = ConfusionCounts(self.data.num_classes)
            counts.update(logits[idx], self.data.y[idx])
            metrics.update(counts.as_metrics(split))
        return metrics

    @torch.no_grad()
    def full_logits(self, model: GNNModel) -> torch.Tensor:
        """``[N, num_classes]`` logits of every node, on CPU, the same on every rank."""
        was_training = model.training
        model.eval()
        data, ctx = self.data, self.ctx
        one_hop = NeighborSampler(data.indptr, data.indices, [ALL_NEIGHBORS])
        shards = torch.tensor_split(torch.arange(data.num_nodes), ctx.world_size)
        sizes = [s.numel() for s in shards]
        h = data.x
        for layer in range(model.num_layers):
            outs = []
            for seeds in shards[ctx.rank].split(self.batch_size):
                sub = one_hop.sample(seeds)
                graph = self.backend.graph_to(self.backend.from_sampled(sub), ctx.device)
                outs.append(model.layer_forward(layer, graph, h[sub.node].to(ctx.device)).cpu())
            h = ctx.all_gather_rows(torch.cat(outs), sizes)
        model.train(was_training)
        return h


class SampledEvaluator(Evaluator):
    def __init__(self, backend: Backend, data: GraphData, ctx: DistContext, batch_size: int,
                 sampler: Sampler, seed: int):
        super().__init__(backend, data, ctx, batch_size)
        self.sampler = sampler
        self.seed = seed

    @torch.no_grad()
    def evaluate(self, model: GNNModel, splits: tuple[str, ...]) -> dict[str, float]:
        was_training = model.training
        model.eval()
        metrics: dict[str, float] = {}
        for split in splits:
            counts = ConfusionCounts(self.data.num_classes)
            batches = epoch_batches(self.data.split(split), self.batch_size, self.seed, 0,
                                    self.ctx.rank, self.ctx.world_size, shuffle=False)
            # A fixed stream: the same model gives the same sampled metric every time.
            self.sampler.reseed(self.seed, -1, self.ctx.rank)
            for mb in self.sampler.loader([b for b in batches if b.numel()]):
                graph = self.backend.graph_to(mb.graph, self.ctx.device)
                logits = model(graph, self.data.x[mb.input_nodes].to(self.ctx.device))
                counts.update(logits, self.data.y[mb.seeds])
            metrics.update(counts.reduce(self.ctx).as_metrics(split))
        model.train(was_training)
        return metrics
