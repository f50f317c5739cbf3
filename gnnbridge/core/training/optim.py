"""The optimizer and the learning-rate schedule a config asks for (``train.optimizer``,
``train.schedule`` and their keys), built from torch.optim and torch.optim.lr_scheduler, nothing
hand-written: Adam (the default, as before), AdamW or SGD; no schedule (the default), cosine
annealing to ``train.min_lr`` or a step decay, either after ``train.warmup_epochs`` of linear
warm-up (LinearLR, joined to the schedule by SequentialLR).

The schedule steps once per epoch, after the epoch's optimizer steps. A checkpoint carries its
state beside the optimizer's; a resumed run restores it when the schedule's keys are those it
was trained with (the uninterrupted run, exactly), and otherwise builds the configured schedule
and steps it to the resumed epoch, as ``train.lr`` already follows a changed config.
"""

from __future__ import annotations

import copy

import torch
from torch.optim import lr_scheduler

from gnnbridge.core.config import TrainConfig
from gnnbridge.core.training.sparse import SplitOptimizer, runs_of_kind, sparse_optimizer

# The keys a schedule is built from: a checkpoint's scheduler state is restored only when none changed.
SCHEDULE_KEYS = ("lr", "epochs", "schedule", "warmup_epochs", "step_size", "gamma", "min_lr")


def build_optimizer(params, cfg: TrainConfig) -> torch.optim.Optimizer:
    """``train.optimizer`` over ``params`` with ``train.lr`` and ``train.weight_decay``."""
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


def for_model(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """``train.optimizer`` over ``model``'s parameters; a model with sparse embedding tables
    (``model.embeddings=sparse``) gets a :class:`~.sparse.SplitOptimizer`, which steps those
    with a sparse-gradient optimizer."""
    runs = runs_of_kind(model)
    if not any(is_sparse for is_sparse, _ in runs):
        return build_optimizer(model.parameters(), cfg)
    return SplitOptimizer(
        runs, lambda groups: build_optimizer(groups, cfg), lambda groups: sparse_optimizer(groups, cfg)
    )


def build_schedule(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> lr_scheduler.LRScheduler | None:
    """The per-epoch schedule of ``optimizer``'s learning rate (None: constant, the default).
    Warm-up: epoch ``e < warmup_epochs`` trains at ``lr * (e + 1) / (warmup_epochs + 1)``."""
    warmup = cfg.warmup_epochs
    if cfg.schedule == "cosine":
        main = lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg.epochs - warmup, eta_min=cfg.min_lr)
    elif cfg.schedule == "step":
        main = lr_scheduler.StepLR(optimizer, step_size=cfg.step_size, gamma=cfg.gamma)
    else:
        main = None
    if not warmup:
        return main
    ramp = lr_scheduler.LinearLR(optimizer, start_factor=1 / (warmup + 1), end_factor=1.0, total_iters=warmup)
    return ramp if main is None else lr_scheduler.SequentialLR(optimizer, [ramp, main], milestones=[warmup])


def restore(
    optimizer: torch.optim.Optimizer, cfg: TrainConfig, state: dict, saved: dict
) -> lr_scheduler.LRScheduler | None:
    """Load a checkpoint's optimizer ``state`` (its ``optimizer`` and ``scheduler``; ``saved``: the
    config it was written with) and return the schedule, at the epoch the run resumes from. The
    learning rate, weight decay and SGD's momentum follow the (possibly changed) config (the
    saved state would otherwise bring back the old ones while config.yaml says the new)."""
    # A copy: load_state_dict keeps tensors that already fit, and spawned ranks receive the
    # checkpoint in shared memory, so without it every rank would step the same moments.
    optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
    for group in optimizer.param_groups:
        group["lr"] = cfg.lr
        if not group.get("sparse"):  # a sparse table's optimizer has no weight decay
            group["weight_decay"] = cfg.weight_decay
        if "momentum" in group:  # SGD's (adam and adamw have betas, which no key sets)
            group["momentum"] = cfg.momentum
        group.pop("initial_lr", None)  # a schedule's, set again by the one built now
    schedule = build_schedule(optimizer, cfg)
    if schedule is None:
        return None
    epochs_done = state["epoch"] + 1
    unchanged = all(saved.get(k, getattr(TrainConfig, k)) == getattr(cfg, k) for k in SCHEDULE_KEYS)
    if unchanged and state.get("scheduler") is not None:
        schedule.load_state_dict(copy.deepcopy(state["scheduler"]))
        for group, lr in zip(optimizer.param_groups, schedule.get_last_lr(), strict=True):
            group["lr"] = lr
    else:
        for _ in range(epochs_done):
            schedule.step()
    return schedule


def current_lr(optimizer: torch.optim.Optimizer) -> float:
    """The learning rate the next optimizer step uses (every group shares it)."""
    return float(optimizer.param_groups[0]["lr"])
