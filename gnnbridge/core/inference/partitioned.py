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
from gnnbridge.core.inference.evaluation import LayerwiseEvaluator, layer_batch_of
from gnnbridge.core.sampling.distributed import PartitionSampler, exchange_for
from gnnbridge.core.sampling.neighbors import ALL_NEIGHBORS
from gnnbridge.core.sampling.seeds import machine_steps


class PartitionedLayerwise(LayerwiseEvaluator):
    """:class:`LayerwiseEvaluator` over a machine's part (see the module)."""

    def _evaluate(self, model: GNNModel, splits: tuple[str, ...]) -> dict[str, float]:
        logits = self.full_logits(model)  # this machine's nodes, on every rank of the machine
        metrics: dict[str, float] = {}
        ctx = self.ctx
        for split in splits:
            idx = torch.tensor_split(self.data.split(split), ctx.local_world_size)[ctx.local_rank]
            scores = self.target.scores(self.data.num_classes)
            scores.update(logits[idx], self.data.y[idx].to(logits.device))
            metrics.update(scores.reduce(ctx).as_metrics(split))
        return metrics

    @torch.no_grad()
    def full_logits(self, model: GNNModel) -> torch.Tensor:
        """``[n, num_classes]`` logits of this machine's ``n`` nodes (in the part's order), on CPU,
        on every rank of the machine."""
        ctx, part = self.ctx, self.data.partition
        one_hop = PartitionSampler(self.data, [ALL_NEIGHBORS], exchange_for(ctx))
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
