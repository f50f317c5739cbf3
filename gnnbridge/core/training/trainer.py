"""The DDP training loop, identical for every backend: its one job is the epochs.

Per rank: the run's parts are assembled by :mod:`gnnbridge.core.inference.assembly` (torch is seeded *before* the model
is built, so every rank starts from the same weights: DDP broadcasts rank 0's anyway, but
identical seeds also make dropout masks and the core sampler reproducible per rank); the
optimizer and schedule come from :mod:`.optim`, when to checkpoint and the best weights from
:mod:`.checkpointing`. Then, each epoch, take
this rank's equal-count share of the training seeds, step, and reduce loss and accuracy as
sums of counts. ``epoch_time_s`` is the training pass alone (sampling, gathering and transfer
included), so it compares with a hand-written loop; evaluation time is reported separately.
"""

from __future__ import annotations

import hashlib
import random
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from gnnbridge.core.config import ExperimentConfig
from gnnbridge.core.errors import DIVERGED, TrainingDivergedError
from gnnbridge.core.inference.assembly import RunParts
from gnnbridge.core.inference.evaluation import (
    step_outputs,
)
from gnnbridge.core.inference.phases import NO_PHASES, PhaseTimer, slowest_rank
from gnnbridge.core.inference.placement import autocast, grad_scaler, prefetched
from gnnbridge.core.models.hetero import leaves_parameters_unused
from gnnbridge.core.plugins import PluginError
from gnnbridge.core.records.collection import GraphCollection
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.runtime.context import DistContext
from gnnbridge.core.sampling.seeds import derived_seed, few_steps, split_batches
from gnnbridge.core.training import midepoch, optim, shared_tables, sparse
from gnnbridge.core.training.checkpointing import Checkpointing, the_result
from gnnbridge.core.training.dry import dry_step
from gnnbridge.core.training.loggers import RunLoggers
from gnnbridge.core.training.state import TrainState

# What a Trainer's first run in a process loads whatever the backend, named for the ranks' fork
# server (:func:`~gnnbridge.core.runtime.launcher.fork_server`) to load once for every rank, in
# :func:`~gnnbridge.core.runtime.preload.import_entry`'s form. Without it each rank paid for both
# (measured, 2 ranks on CPU): torch's first optimizer imports ``torch._dynamo`` (about 2 s of CPU
# a rank where the backend's library has not imported it already, as DGL has not), and the
# sampler kernels' first load starts numba (about 0.5 s a rank, DGL's own sampler's runs
# included: their dry step and evaluation sample through the kernels).
RANK_MODULES = ("torch._dynamo", "gnnbridge.core.sampling.kernels:start_numba")


class Trainer:
    """One loop for every task and target: a node task's batches are seed nodes and their sampled
    neighbourhoods, a graph task's are graph ids and those whole graphs, a link task's are pairs.
    What a batch's outputs are scored against, and how, is the parts' (:class:`RunParts`: the
    sampler, ``step_outputs``, the target's loss and metrics); the loop holds no branch on either."""

    def __init__(
        self,
        config: ExperimentConfig,
        data: GraphData | GraphCollection,
        ctx: DistContext,
        show_progress: bool = True,
        run_dir: str | None = None,
        resume: dict | None = None,
        on_epoch=None,
    ):
        """``run_dir``: where rank 0 writes checkpoints (None: nowhere). ``resume``: a loaded
        checkpoint (every rank holds it) to continue from. ``on_epoch``: called on rank 0 with
        each epoch's figures; a reason (str) it returns stops every rank after that epoch
        (:meth:`_asked_to_stop`), as ``gnnbridge tune``'s pruner does."""
        # tqdm's default lock is a multiprocessing semaphore: a rank killed by a signal would leave
        # it registered, and the resource tracker would warn about a "leak" under the error line.
        tqdm.set_lock(threading.RLock())
        self.config, self.ctx = config, ctx
        # The run's parts (data, backend, sampler, model, target, evaluators), which evaluate and
        # predict assemble alike; the weights are loaded before the move to the device.
        self.parts = RunParts(config, data, ctx, weights=resume)
        self.cache_counts = [0, 0]  # rows served from the feature cache, rows gathered: every epoch so far
        self.show_progress = show_progress and ctx.is_main
        # Built after the move: a loaded optimizer state follows its parameters' device.
        self.optimizer = optim.for_model(self.parts.model, config.train)
        self.schedule = optim.build_schedule(self.optimizer, config.train)  # stepped once per epoch
        self.scaler = grad_scaler(config.placement.precision, ctx.device)
        self.state = TrainState()
        self.inside = midepoch.Inside.from_checkpoint(resume, ctx, self._note)  # a mid-epoch checkpoint's position
        self.resumed: midepoch.Inside | None = None  # that position, while the epoch it lies in trains
        if resume is not None:
            self._restore(resume)
        device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        # A heterogeneous batch may hold no node of a type, or no edge of a relation: the
        # parameters of those take no part in that step, which DDP must be told to expect (the
        # model says whether it can happen: telling DDP when it cannot makes every rank warn).
        self.sparse_use = leaves_parameters_unused(self.parts.model, data)
        tables = sparse.sparse_tables(self.parts.model)  # model.embeddings=sparse: reduced by sync_tables, not DDP
        if ctx.distributed and tables:
            sparse.exclude_from_ddp(self.parts.model, tables)
        self.sync_tables = self._table_sync(tables)
        self.ddp = (
            DistributedDataParallel(self.parts.model, device_ids=device_ids, find_unused_parameters=self.sparse_use)
            if ctx.distributed
            else self.parts.model
        )
        folder = Path(run_dir) if run_dir and ctx.is_main else None
        self.checkpointing = Checkpointing(folder, resume)  # when checkpoints are written, the best weights
        # log.to's plugins, on rank 0; a resumed run first sends them the epochs they missed
        self.loggers = RunLoggers(config, folder, resume)
        self.shard_fingerprint: dict = {}  # this rank's first-epoch training items (see _fingerprint)
        self._grads_checked = False
        self.on_epoch, self.stopped_by = on_epoch, None

    def _table_sync(self, tables: dict):
        """The sparse tables' exchange: one shared copy per machine where that applies and is
        asked for (``placement.tables``), else a copy per rank."""
        if self.config.placement.tables == "machine" and shared_tables.applies(self.ctx, self.optimizer, tables):
            return shared_tables.SharedTableSync(self.ctx, tables, self.optimizer)
        return sparse.SparseGradSync(self.ctx, tables)

    @property
    def table_copies(self) -> str | None:
        """How the sparse tables are kept: "machine" (one shared copy), "rank", None (no tables)."""
        if not self.sync_tables.params:
            return None
        return "machine" if isinstance(self.sync_tables, shared_tables.SharedTableSync) else "rank"

    @property
    def history(self) -> list[dict]:
        return self.state.history

    def _restore(self, state: dict) -> None:
        """Continue from a checkpoint (weights already loaded): optimizer moments, the learning-rate
        schedule (see :func:`optim.restore`) and the monitor's memory; the best weights are
        :class:`Checkpointing`'s."""
        self.schedule = optim.restore(self.optimizer, self.config.train, state, state["config"].get("train", {}))
        self.state = TrainState.from_checkpoint(state)

    # ------------------------------------------------------------------ training

    def fit(self) -> dict:
        """Train from ``state.next_epoch`` to ``train.epochs`` (or until early stopping), then
        score the final and the best model on every split. The loggers stay open for the run's
        results (:meth:`RunLoggers.run_finished`); whoever writes those closes them (a failure
        here closes them at once)."""
        try:
            outcome = self._fit()
        except BaseException:
            self.loggers.close(warn=False)
            raise
        self.loggers.finish(len(self.state.history), outcome["metrics"])
        return outcome

    def _fit(self) -> dict:
        cfg, state = self.config.train, self.state
        validator = self.parts.validation_evaluator()
        dry_step(self.parts)  # the model's contract, on one small batch, before any work is spent
        self._warn_if_few_steps()
        for epoch in range(state.next_epoch, cfg.epochs):
            if state.should_stop(cfg.patience):
                break
            stats = self.train_epoch(epoch)
            if self.schedule is not None:
                self.schedule.step()
            t0 = time.perf_counter()
            try:
                stats.update(validator.evaluate(self.parts.model, ("val",)))
            except TrainingDivergedError as exc:
                raise self._diverged(epoch, f"after its last step {exc}") from None
            stats["eval_time_s"] = time.perf_counter() - t0
            stats["phases"]["eval"] = stats["eval_time_s"]
            improved = state.record(stats, cfg.monitor, self.parts.target.is_better)
            if improved:
                self.checkpointing.remember_best(self.parts.model)
            self._log(stats)
            self.loggers.epoch(stats)
            stop = self._asked_to_stop(epoch, stats)
            last = epoch == cfg.epochs - 1 or state.should_stop(cfg.patience) or stop
            self.checkpointing.after_epoch(self, epoch, improved, last)
            if stop:
                break
        t0 = time.perf_counter()
        final_evaluator = self.parts.final_evaluator()
        final = final_evaluator.evaluate(self.parts.model, ("train", "val", "test"))
        best = self.checkpointing.best_metrics(self, final_evaluator, final)
        return {
            **the_result(state, best, final),
            "history": state.history,
            "final_eval_time_s": time.perf_counter() - t0,
            "best": {**state.best_summary(cfg.monitor), "metrics": best},
            "early_stopping": state.stopping_summary(cfg.patience),
            "stopped_by": self.stopped_by,  # on_epoch's stop: {"epoch", "reason"} (tune's pruner)
            "epochs_trained": len(state.history),
            "eval": self.parts.eval_summary(),
            **self.cache_summary(),
        }

    def _asked_to_stop(self, epoch: int, stats: dict) -> bool:
        """Rank 0 asks ``on_epoch`` whether to stop after this epoch; its answer reaches every rank
        through the store (one key per epoch), so all stop together and none waits in a
        collective for a rank that left. Every rank holds the same reduced figures, but only rank
        0 may ask (the hook may talk to a database), hence the exchange. A hook that raises is a
        warning line and the run goes on: a tuning study that is briefly unreachable must not
        cost a trial."""
        if self.on_epoch is None:
            return False
        reason = ""
        if self.ctx.is_main:
            try:
                reason = self.on_epoch(dict(stats)) or ""
            except Exception as exc:  # noqa: BLE001 - said, and the run goes on
                self._note(f"Warning: the epoch hook failed after epoch {epoch + 1}: {exc}")
            if self.ctx.distributed:
                self.ctx.store.set(f"stop/{epoch}", reason)
        elif self.ctx.distributed:
            reason = self.ctx.wait_key(f"stop/{epoch}").decode()
        if reason:
            self.stopped_by = {"epoch": epoch, "reason": str(reason)}
        return bool(reason)

    def cache_summary(self) -> dict:
        """What ``results.json`` says about ``placement.feature_cache`` (nothing when it is off):
        this rank's cache and the hit rate over every rank's training gathers."""
        if not self.parts.feature_caches:
            return {}
        hits, rows = self.cache_counts
        return {
            "feature_cache": {
                "bytes": sum(c.nbytes for c in self.parts.feature_caches),
                "rows": sum(c.ids.numel() for c in self.parts.feature_caches),
                "hit_rate": hits / rows if rows else 0.0,
            }
        }

    def _epoch_hit_rate(self) -> dict:
        """``{"feature_cache_hit_rate": rows served from the cache / rows gathered}`` over every
        rank's training gathers of the epoch just run (one small all-reduce); {} without a cache."""
        if not self.parts.feature_caches:
            return {}
        counts = torch.tensor(
            [sum(c.hits for c in self.parts.feature_caches), sum(c.total for c in self.parts.feature_caches)],
            dtype=torch.int64,
        )
        hits, rows = self.ctx.all_reduce_sum(counts).tolist()
        self.cache_counts = [self.cache_counts[0] + hits, self.cache_counts[1] + rows]
        return {"feature_cache_hit_rate": hits / rows if rows else 0.0}

    def _epoch_exchange(self) -> dict:
        """What the epoch's training batches took from other machines, over every rank (a
        partitioned graph's; one small all-reduce): feature rows fetched (``fetched_rows``) and of
        those taken from other machines, frontier nodes sampled by their owners, bytes sent and
        received, and a rank's mean seconds in the hops' exchanges and in fetching rows (both
        inside the ``sample`` phase). {} for a graph on one machine."""
        exchange = getattr(self.parts.sampler, "exchange", None)
        if exchange is None:
            return {}
        seen = exchange.reset()
        total = self.ctx.all_reduce_sum(torch.tensor(list(seen.values()), dtype=torch.float64)).tolist()
        # counts summed over the ranks; seconds as a rank's mean (they pass beside each other)
        return {k: v / self.ctx.world_size if k.endswith("_s") else int(v) for k, v in zip(seen, total)}

    def _note(self, line: str) -> None:
        """One line on stderr from rank 0: what a resume does that the user did not ask for, or a warning."""
        if self.ctx.is_main:
            print(line, file=sys.stderr, flush=True)

    def _warn_if_few_steps(self) -> None:
        """Name an epoch of too few optimizer steps once, before the first epoch this job trains
        (not again after a restart): such a run can end near chance without any error (the GIN
        tutorial's own collection did), so nothing else would say so. After the model's dry
        step, so a model that breaks its contract still fails in one line."""
        train = self.config.train
        if self.ctx.attempt or self.state.next_epoch >= train.epochs:
            return
        seeds, ranks = self.parts.data.split("train").numel(), self.ctx.world_size
        part = self.parts.data.partition
        if part is not None:  # each machine's ranks share its seeds; the fullest machine sets the steps
            seeds, ranks = max(part.split_counts["train"]), self.ctx.local_world_size
        norms = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in self.parts.model.modules())
        line = few_steps(seeds, train.batch_size, ranks, train.max_batches, self.parts.data.item_name, norms)
        if line is not None:
            self._note(f"Warning: {line}")

    def _resumed_inside(self, epoch: int, batches: int) -> midepoch.Inside | None:
        """The mid-epoch checkpoint's position if it lies inside ``epoch`` (used once)."""
        inside, self.inside = self.inside, None
        return inside if inside is not None and inside.fits(epoch, batches, self._note) else None

    def _checkpoint_inside(
        self, epoch: int, done: int, of: int, sums: midepoch.EpochSums, phases: PhaseTimer, t0: float
    ) -> None:
        """Every ``train.checkpoint_every_batches`` batches: latest.pt with every rank's position.
        Not after the epoch's last batch (its end writes latest.pt as ``train.checkpoint_every``
        says), and not once a rank's loss was NaN or infinite: the last good latest.pt stays, and
        the epoch's end names the step."""
        every = self.config.train.checkpoint_every_batches
        if not every or done % every or done == of:
            return
        self.ctx.doing(None)  # collectives from here, which time out on their own
        elapsed = time.perf_counter() - t0 + self._earlier("elapsed", 0.0)
        seconds = midepoch.added(phases.seconds(), self._earlier("phases"))
        ranks = midepoch.capture(self.ctx, of, sums, elapsed, seconds)
        if all(r["first_bad"] < 0 for r in ranks):
            self.checkpointing.inside_epoch(self, epoch, done, ranks)

    def _earlier(self, key: str, default=None):
        """What the epoch being trained spent before a stop it resumed from (see midepoch)."""
        return self.resumed.earlier(key) if self.resumed is not None else default

    def _to_train(self, loader, epoch: int, sums: midepoch.EpochSums, bar, phases: PhaseTimer):
        """``(step, batch)`` of ``loader`` to train. Resuming inside the epoch, the batches before
        the position are drawn again (the sampler's generators end where they were) and dropped,
        then the rank's generators and sums are put back, before the next batch is drawn."""
        skip = self.resumed.batches if self.resumed is not None else 0
        for step, mb in enumerate(loader):
            if step >= skip:
                yield step, mb
                continue
            self.ctx.doing(midepoch.REPLAY.format(epoch=epoch + 1, batches=skip))
            if step == skip - 1:
                self.resumed.put_back(sums)
                bar.update(skip)
                phases.start(step=skip + 1)

    def _epoch_bar(self, epoch: int, total: int):
        return tqdm(
            total=total,
            desc=f"epoch {epoch + 1}/{self.config.train.epochs}",
            unit="batch",
            disable=None if self.show_progress else True,  # None: bars only on a terminal
            leave=False,
            dynamic_ncols=True,
        )

    def train_epoch(self, epoch: int) -> dict:
        cfg, ctx = self.config, self.ctx
        batches = self._epoch_seeds(epoch)
        lr = optim.current_lr(self.optimizer)  # this epoch's, before the schedule steps
        if not self.shard_fingerprint:
            self.shard_fingerprint = _fingerprint(batches)
        self.ddp.train()
        sums = midepoch.EpochSums(self.parts.target, self.parts.output_width, ctx.device)
        bar = self._epoch_bar(epoch, len(batches))
        t0 = time.perf_counter()
        progress = BarFigures(t0)
        phases = PhaseTimer(ctx.device, ctx.doing, epoch)
        for cache in self.parts.feature_caches:
            cache.reset()
        if getattr(self.parts.sampler, "exchange", None) is not None:
            self.parts.sampler.exchange.reset()  # what validation exchanged is not the epoch's
        self.resumed = self._resumed_inside(epoch, len(batches))
        phases.start()
        loader = prefetched(lambda: self._batches(batches, epoch), cfg.placement.prefetch)
        for step, mb in self._to_train(loader, epoch, sums, bar, phases):
            phases.mark("sample")
            ctx.advance()
            loss_sum_batch, terms, logits, y = self.train_step(mb, phases)
            sums.add(step, loss_sum_batch, terms, logits, y)
            progress.step(bar, loss_sum_batch, terms, y.shape[0])
            bar.update(1)
            self._checkpoint_inside(epoch, step + 1, len(batches), sums, phases, t0)
        ctx.doing(None)  # what follows waits in collectives, which time out on their own
        (loss, running), first_bad = sums.reduce(ctx), sums.first_bad
        # How many ranks had a bad step, and how many had it at the run's very first step.
        bad = ctx.all_reduce_sum(torch.stack([first_bad >= 0, (first_bad == 0) & (epoch == 0)]).long())
        self._check_loss(epoch, int(first_bad), int(bad[0]), bool(bad[1]))
        epoch_time = time.perf_counter() - t0 + self._earlier("elapsed", 0.0)
        bar.close()
        seconds = midepoch.added(phases.seconds(), self._earlier("phases"))
        resumed, self.resumed = self.resumed, None
        return {
            "epoch": epoch,
            "loss": loss,
            **running,
            "lr": lr,
            "epoch_time_s": epoch_time,
            "batches": len(batches),
            "phases": seconds,
            "phases_slowest_rank": slowest_rank(ctx, seconds, epoch_time),
            **self._epoch_hit_rate(),
            **self._epoch_exchange(),
            **({"resumed_after_batch": resumed.batches} if resumed else {}),
        }

    def train_step(self, mb, phases=NO_PHASES) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One optimisation step on ``mb``: (the batch's summed loss, detached; the terms it sums;
        logits; targets). The loss is the target's (``train.loss``)."""
        cfg = self.config
        with autocast(cfg.placement.precision, self.ctx.device):
            logits, y = step_outputs(self.parts, self.ddp, mb, phases)
            # Summed then divided: an empty batch (possible when seeds do not split evenly
            # over ranks) contributes zero, not NaN, and still joins DDP's all-reduce.
            loss_sum_batch, terms = self.parts.target.loss(logits, y, self.parts.loss_name)
        loss = loss_sum_batch / terms.clamp(min=1)
        self.optimizer.zero_grad(set_to_none=True)
        with self.parts.call.blame("backward pass"):
            (self.scaler.scale(loss) if self.scaler else loss).backward()
        self.sync_tables()
        phases.mark("backward")
        self._check_every_parameter_learns()
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.sync_tables.settle()
        phases.mark("step")
        return loss_sum_batch.detach(), terms, logits, y

    def epoch_loader(self, epoch: int):
        """This rank's training batches of ``epoch`` (reseeded: the same batches on every call)."""
        return self._batches(self._epoch_seeds(epoch), epoch)

    def _epoch_seeds(self, epoch: int) -> list[torch.Tensor]:
        """Reseed every stream for ``epoch`` and return this rank's seed batches."""
        cfg, ctx = self.config, self.ctx
        seed_everything(derived_seed(cfg.train.seed, epoch, ctx.rank, stream=4))
        batches = split_batches(self.parts.data, "train", cfg.train.batch_size, cfg.train.seed, epoch, ctx)
        # Every rank has as many batches as the others, so a cap keeps them in step.
        return batches[: cfg.train.max_batches] if cfg.train.max_batches else batches

    def _batches(self, batches: list[torch.Tensor], epoch: int):
        """This epoch's mini-batches; reseeds the sampler first, in the thread that samples."""
        self.parts.sampler.reseed(self.config.train.seed, epoch, self.ctx.rank)
        return self.parts.sampler.loader(batches)

    def _check_every_parameter_learns(self) -> None:
        """After the first backward pass under DDP: a parameter without a gradient would make DDP
        fail on the next step with a message about its reducer; name the parameters instead."""
        if self._grads_checked or not self.ctx.distributed or self.sparse_use:
            return
        self._grads_checked = True
        idle = [n for n, p in self.parts.model.named_parameters() if p.requires_grad and p.grad is None]
        if idle:
            raise PluginError(
                f"{self.parts.call.origin} has parameters that take no part in the loss ({', '.join(idle[:4])}"
                f"{', ...' if len(idle) > 4 else ''}); DDP needs every parameter in every step: use them "
                "in forward, or remove them (or set requires_grad=False)."
            )

    def _check_loss(self, epoch: int, first_bad: int, ranks_bad: int, at_first_step: bool) -> None:
        """Every rank raises alike (the counts are all-reduced); nothing of this epoch is saved.
        A loss already non-finite at the run's first step came before any optimizer step, from
        the weights as built and finite features: the model's outputs, not the learning rate."""
        if at_first_step:
            raise PluginError(
                f"{self.parts.call.origin}: forward returned NaN or infinite logits at the first training "
                "step, before any optimizer step (the weights are as built, the features finite), so "
                "the learning rate is not the cause; fix the model (in training mode: a division by "
                "zero, a log of 0, uninitialised torch.empty weights). Nothing was saved."
            )
        if ranks_bad:
            where = f"step {first_bad + 1}" if first_bad >= 0 else "a step of another rank"
            raise self._diverged(epoch, f"the training loss became NaN or infinite at {where}")

    def _diverged(self, epoch: int, what: str) -> TrainingDivergedError:
        lr = self.config.train.lr
        cause = (
            f"train.lr={lr:g} is likely too high"
            if lr > 0.05
            else "the learning rate may be too high, or the features need scaling"
        )
        return TrainingDivergedError(
            f"{DIVERGED} in epoch {epoch + 1}: {what} ({cause}); nothing from this epoch on was saved."
        )

    def _log(self, stats: dict) -> None:
        if self.show_progress:
            monitor = self.config.train.monitor
            value = stats.get(monitor)
            tqdm.write(
                f"epoch {stats['epoch'] + 1:>3}/{self.config.train.epochs}  loss {stats['loss']:.4f}  "
                f"{_running(stats)}{monitor} {'n/a' if value is None else f'{value:.4f}'}  "
                f"{stats['epoch_time_s']:.2f}s{_hit_rate(stats)}",
                file=sys.stderr,
            )


def _running(stats: dict) -> str:
    """The epoch's running training metrics (``train_acc 0.9120  ``)."""
    return "".join(f"{k} {v:.4f}  " for k, v in stats.items() if k.startswith("train_") and isinstance(v, float))


def _hit_rate(stats: dict) -> str:
    rate = stats.get("feature_cache_hit_rate")
    return "" if rate is None else f"  feature cache {rate:.0%}"


class BarFigures:
    """The rank-0 bar's running loss and seeds per second, refreshed at most twice a second:
    reading the loss waits for the device, so it is not done every step."""

    EVERY_S = 0.5

    def __init__(self, t0: float):
        self.t0, self.shown, self.seeds = t0, t0, 0

    def step(self, bar, loss_sum: torch.Tensor, terms: torch.Tensor, seeds: int) -> None:
        """After a step of ``seeds`` items whose loss summed ``terms`` terms (tensors: read only when shown)."""
        self.seeds += seeds
        if bar.disable:
            return
        now = time.perf_counter()
        if now - self.shown < self.EVERY_S:
            return
        self.shown = now
        bar.set_postfix(
            loss=f"{float(loss_sum) / max(1.0, float(terms)):.4f}",
            seeds_per_s=f"{self.seeds / max(now - self.t0, 1e-9):,.0f}",
            refresh=False,
        )


def _fingerprint(batches: list[torch.Tensor]) -> dict:
    """How many training items this rank got in its first epoch and a digest of them, in order:
    equal digests mean equal shards, whatever the launcher or node layout."""
    items = torch.cat(batches) if batches else torch.empty(0, dtype=torch.int64)
    return {"train_items": int(items.numel()), "shard_sha1": hashlib.sha1(items.numpy().tobytes()).hexdigest()[:16]}


def parameters_digest(model: torch.nn.Module) -> torch.Tensor:
    """All parameters flattened into one vector (to compare models across ranks)."""
    return torch.cat([p.detach().flatten().cpu() for p in model.parameters()])


def seed_everything(seed: int) -> None:
    """Seed every global generator a model or sampler may draw from (dropout, a library's
    sampler, plugin code using ``random`` or numpy)."""
    torch.manual_seed(seed)  # CPU and every CUDA device
    random.seed(seed)
    np.random.seed(seed)
