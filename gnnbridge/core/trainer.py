"""The DDP training loop, identical for every backend.

Per rank: build the backend's store, sampler and model; seed torch *before* building the model
so every rank starts from the same weights (DDP broadcasts rank 0's anyway, but identical seeds
also make dropout masks and the core sampler reproducible per rank); then, each epoch, take
this rank's equal-count share of the training seeds, step, and reduce loss and accuracy as
sums of counts. ``epoch_time_s`` is the training pass alone (sampling, gathering and transfer
included), so it compares with a hand-written loop; evaluation time is reported separately.
"""
from __future__ import annotations

import hashlib
import sys
import threading
import time

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from gnnbridge.core.collection import GraphCollection
from gnnbridge.core.config import EvalMode, ExperimentConfig, Task
from gnnbridge.core.data import GraphData
from gnnbridge.core.distributed import DistContext
from gnnbridge.core.evaluation import Evaluator, GraphEvaluator, LayerwiseEvaluator, SampledEvaluator
from gnnbridge.core.interfaces import Backend, GNNModel, GraphClassifier, Sampler
from gnnbridge.core.metrics import ConfusionCounts
from gnnbridge.core.plugins import get_backend
from gnnbridge.core.sampling import epoch_batches


class Trainer:
    """One loop for both tasks: a node task's batches are seed nodes and their sampled
    neighbourhoods, a graph task's are graph ids and those whole graphs. Either way a
    :class:`MiniBatch` names the rows of ``x`` to gather and of ``y`` to predict."""

    def __init__(self, config: ExperimentConfig, data: GraphData | GraphCollection, ctx: DistContext,
                 show_progress: bool = True):
        self.config = config
        self.data = data
        self.ctx = ctx
        self.show_progress = show_progress and ctx.is_main
        # tqdm's default lock is a multiprocessing semaphore: a rank killed by a signal would leave
        # it registered, and the resource tracker would warn about a "leak" under the error line.
        tqdm.set_lock(threading.RLock())
        self.backend: Backend = get_backend(config.backend).require()
        self.backend.check_device(ctx.device)
        torch.manual_seed(config.train.seed)
        self.sampler: Sampler = self._sampler()
        self.model: GNNModel | GraphClassifier = self.backend.model(config.model, data.num_features, data.num_classes)
        self.model.bind(data).to(ctx.device)
        device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        self.ddp = DistributedDataParallel(self.model, device_ids=device_ids) if ctx.distributed else self.model
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.train.lr,
                                          weight_decay=config.train.weight_decay)
        self.history: list[dict] = []
        self.shard_fingerprint: dict = {}  # this rank's first-epoch training items (see _fingerprint)

    def _sampler(self) -> Sampler:
        kind = self.config.sampler.kind
        if self.config.task is Task.GRAPH:
            return self.backend.collection_sampler(self.backend.collection_store(self.data), kind)
        return self.backend.sampler(self.backend.graph_store(self.data), self.config.sampler.fanouts, kind)

    # ------------------------------------------------------------------ training

    def fit(self) -> dict:
        cfg = self.config
        validator = self._validation_evaluator()
        for epoch in range(cfg.train.epochs):
            stats = self.train_epoch(epoch)
            t0 = time.perf_counter()
            stats.update(validator.evaluate(self.model, ("val",)))
            stats["eval_time_s"] = time.perf_counter() - t0
            self.history.append(stats)
            self._log(stats)
        t0 = time.perf_counter()
        final = self._final_evaluator().evaluate(self.model, ("train", "val", "test"))
        return {"metrics": final, "history": self.history, "final_eval_time_s": time.perf_counter() - t0}

    def train_epoch(self, epoch: int) -> dict:
        cfg, ctx, data = self.config, self.ctx, self.data
        batches = epoch_batches(data.train_idx, cfg.train.batch_size, cfg.train.seed, epoch, ctx.rank, ctx.world_size)
        self.sampler.reseed(cfg.train.seed, epoch, ctx.rank)
        if not self.shard_fingerprint:
            self.shard_fingerprint = _fingerprint(batches)
        self.ddp.train()
        # Sums stay on the device: no host sync per step, one reduction per epoch.
        loss_sum = torch.zeros((), dtype=torch.float64, device=ctx.device)
        counts = ConfusionCounts(data.num_classes, ctx.device)
        bar = tqdm(total=len(batches), desc=f"epoch {epoch + 1}/{cfg.train.epochs}", unit="batch",
                   disable=None if self.show_progress else True,  # None: bars only on a terminal
                   leave=False, dynamic_ncols=True)
        t0 = time.perf_counter()
        for mb in self.sampler.loader(batches):
            ctx.advance()
            x = data.x[mb.input_nodes].to(ctx.device, non_blocking=True)
            y = data.y[mb.seeds].to(ctx.device, non_blocking=True)
            logits = self.ddp(self.backend.graph_to(mb.graph, ctx.device), x)
            # Summed then divided: an empty batch (possible when seeds do not split evenly
            # over ranks) contributes zero, not NaN, and still joins DDP's all-reduce.
            loss_sum_batch = F.cross_entropy(logits, y, reduction="sum")
            loss = loss_sum_batch / max(1, y.numel())
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            loss_sum += loss_sum_batch.detach()
            counts.update(logits.detach(), y)
            bar.update(1)
        counts.reduce(ctx)
        ctx.all_reduce_sum(loss_sum)
        epoch_time = time.perf_counter() - t0
        bar.close()
        stats = {"epoch": epoch, "loss": float(loss_sum) / max(1, counts.total), "train_acc": counts.accuracy(),
                 "epoch_time_s": epoch_time, "batches": len(batches)}
        return stats

    def _log(self, stats: dict) -> None:
        if self.show_progress:
            tqdm.write(f"epoch {stats['epoch'] + 1:>3}/{self.config.train.epochs}  loss {stats['loss']:.4f}  "
                       f"train_acc {stats['train_acc']:.4f}  val_acc {stats['val_acc']:.4f}  "
                       f"{stats['epoch_time_s']:.2f}s", file=sys.stderr)

    # ------------------------------------------------------------------ evaluation

    def _validation_evaluator(self) -> Evaluator:
        if self.config.task is Task.GRAPH:
            return GraphEvaluator(self.backend, self.data, self.ctx, self.config.eval.batch_size, self.sampler)
        return SampledEvaluator(self.backend, self.data, self.ctx, self.config.eval.batch_size,
                                self.sampler, self.config.train.seed)

    def _final_evaluator(self) -> Evaluator:
        if self.config.eval.mode is EvalMode.LAYERWISE and self.config.task is Task.NODE:
            return LayerwiseEvaluator(self.backend, self.data, self.ctx, self.config.eval.batch_size)
        return self._validation_evaluator()


def _fingerprint(batches: list[torch.Tensor]) -> dict:
    """How many training items this rank got in its first epoch and a digest of them, in order:
    equal digests mean equal shards, whatever the launcher or node layout."""
    items = torch.cat(batches) if batches else torch.empty(0, dtype=torch.int64)
    return {"train_items": int(items.numel()),
            "shard_sha1": hashlib.sha1(items.numpy().tobytes()).hexdigest()[:16]}


def parameters_digest(model: torch.nn.Module) -> torch.Tensor:
    """All parameters flattened into one vector (to compare models across ranks)."""
    return torch.cat([p.detach().flatten().cpu() for p in model.parameters()])
