"""The checkpoint and best-weights policy of a training run: when rank 0 writes ``latest.pt``
(every ``train.checkpoint_every`` epochs and after the last; every
``train.checkpoint_every_batches`` batches inside an epoch) and ``best.pt`` (when the monitor
improved), what they hold (weights, optimizer and schedule state, RNG, the monitor's memory, the
history, what the target fitted of the training labels ...), and the best epoch's weights kept
in memory so the results can score them. The
file format, its checks and its safe writing are
:mod:`gnnbridge.core.inference.checkpoint`'s.
"""

from __future__ import annotations

from pathlib import Path

import torch

from gnnbridge.core.inference import checkpoint
from gnnbridge.core.inference.evaluation import Evaluator
from gnnbridge.core.plugins import library_versions

SPLITS = ("train", "val", "test")


class Checkpointing:
    """``folder``: where checkpoints go (None: nowhere, e.g. on every rank but 0). ``resume``: a
    loaded checkpoint; its ``best_model`` (from best.pt) is the best weights so far. They are
    missing only when latest.pt is older than best.pt's epoch and an earlier best was
    overwritten; the replayed epochs then find that best again, or the results say best metrics
    are unknown."""

    def __init__(self, folder: Path | None, resume: dict | None = None):
        self.folder = folder
        self.best_weights: dict | None = resume.get("best_model") if resume else None  # a CPU copy

    def remember_best(self, model: torch.nn.Module) -> None:
        self.best_weights = cpu_copy(model.state_dict())

    def after_epoch(self, trainer, epoch: int, improved: bool, last: bool) -> None:
        """Rank 0 writes latest and best as the policy says; the others wait, so nobody runs
        ahead of a checkpoint."""
        every = trainer.config.train.checkpoint_every
        write_latest = last or (every > 0 and (epoch + 1) % every == 0)
        if not (write_latest or improved):
            return
        if self.folder is not None:
            payload = self.payload(trainer, epoch)
            latest, best = (
                checkpoint.path_in(self.folder, checkpoint.LATEST),
                checkpoint.path_in(self.folder, checkpoint.BEST),
            )
            if write_latest:
                checkpoint.save(latest, payload)
                trainer.loggers.commit()  # what a resume would train again is never logged twice
            if improved:
                checkpoint.copy(latest, best) if write_latest else checkpoint.save(best, payload)
            # the file this epoch wrote (best.pt, when latest.pt was not: a copy adds nothing)
            trainer.loggers.checkpoint_saved(latest if write_latest else best, epoch + 1)
        trainer.ctx.barrier()

    def inside_epoch(self, trainer, epoch: int, batches: int, ranks: list[dict]) -> None:
        """Rank 0 writes ``latest.pt`` after each rank's first ``batches`` batches of ``epoch``
        (``ranks``: every rank's running sums and generators); the others wait."""
        if self.folder is not None:
            position = {"epoch": epoch, "batches": batches, "ranks": ranks}
            payload = {**self.payload(trainer, epoch - 1), "mid_epoch": position}
            checkpoint.save(checkpoint.path_in(self.folder, checkpoint.LATEST), payload)
        trainer.ctx.barrier()

    @staticmethod
    def payload(trainer, epoch: int) -> dict:
        """What a checkpoint of ``trainer`` after ``epoch`` holds."""
        return {
            "format": checkpoint.FORMAT,
            "version": checkpoint.VERSION,
            "epoch": epoch,
            "model": trainer.parts.model.state_dict(),
            "model_revision": checkpoint.model_revision(trainer.parts.model),
            "target": trainer.parts.target.state(),  # what the target fitted (regression's scale), or None
            "optimizer": trainer.optimizer.state_dict(),
            "scheduler": trainer.schedule.state_dict() if trainer.schedule is not None else None,
            "rng": checkpoint.rng_states(),
            "monitor": trainer.state.monitor_state(),
            "history": trainer.state.history,
            "restarts": trainer.state.restarts,
            "config": trainer.config.to_dict(),
            "versions": library_versions(trainer.config.backend),
            "world_size": trainer.ctx.world_size,
            "data": trainer.parts.data.summary(),
            "logged": dict(trainer.loggers.logged),
        }

    def best_metrics(self, trainer, evaluator: Evaluator, final: dict) -> dict | None:
        """Every split's metrics for the best epoch's weights (the model a user should keep);
        None in the one case they are gone (see the class)."""
        state, model = trainer.state, trainer.parts.model
        if state.best_epoch is None or state.best_epoch == state.history[-1]["epoch"]:
            return final
        if self.best_weights is None:
            return None
        current = cpu_copy(model.state_dict())
        trainer.ctx.local_barrier()  # tables shared by the machine's ranks: all copied before any loads
        model.load_state_dict(self.best_weights)
        try:
            return evaluator.evaluate(model, SPLITS)
        finally:
            model.load_state_dict(current)


def the_result(state, best: dict | None, final: dict) -> dict:
    """What a run reports as its result: ``metrics`` are the figures of the checkpoint that
    ``evaluate``, ``predict``, ``load``, ``port`` and ``serve`` use by default (``best.pt``), so the
    number a user reads in ``results.json`` is the number they get from the model they keep;
    ``metrics_from`` names that checkpoint and its epoch, and ``last`` holds the last epoch's
    figures under their own name. Where no epoch was ever best (the monitor undefined every epoch)
    or the best weights are gone, the result is the last epoch's, and ``metrics_from`` says so."""
    last = state.history[-1]["epoch"] if state.history else None
    if best is not None and state.best_epoch is not None:
        chosen, metrics = {"checkpoint": checkpoint.BEST, "epoch": state.best_epoch}, best
    else:
        chosen, metrics = {"checkpoint": checkpoint.LATEST, "epoch": last}, final
    return {"metrics": metrics, "metrics_from": chosen, "last": {"epoch": last, "metrics": final}}


def cpu_copy(state: dict) -> dict:
    return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}
