"""What a task predicts for each of its items, as one object: the config's ``target`` names it.

A :class:`Target` owns everything that depends on what the items' labels mean: the form records
read ``y`` in, the loss, the cheap running metrics of a training epoch, the exact metrics of an
evaluation, which of them ``train.monitor`` may name and which way is better, and the arrays
``predict`` writes. The training loop, the evaluators and the commands ask it and hold no branch
of their own (Lightning keeps the loss in the user's module for the same reason: the loop then
knows nothing of tasks). The built-in targets (``class``, ``multilabel``, ``regression``) register
through the ``register_tasks`` hook, as a plugin's target does.

Every tensor handed to a target holds the rows of one batch (or one rank's share of a split):
``outputs`` ``[items, width]`` as the model returned them, ``y`` the record's labels of those
items. A :class:`Scores` sums or gathers them on each rank and :meth:`Scores.reduce` makes every
rank hold the same exact figures (never a mean of per-rank means).

A target may learn something of the training split's labels before the first step and keep it
with the run (:meth:`Target.fitted`, :meth:`Target.state`, :meth:`Target.restored`): regression
standardises its values, so its model outputs values in standard units, which
:meth:`Target.units` puts back in the labels' units for everything a user reads (the metrics,
``predict``'s arrays, the model ``load`` hands back). The instance registered is the unfitted
one; a run's parts hold the fitted copy, rebuilt from the checkpoint by ``evaluate``,
``predict``, ``load``, ``port`` and ``--resume``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Protocol

import torch


class Scores(Protocol):
    """An evaluation's figures for one split, built on every rank and reduced across them."""

    def update(self, outputs: torch.Tensor, y: torch.Tensor) -> None: ...

    def reduce(self, ctx: Any) -> Scores: ...

    def as_metrics(self, prefix: str) -> dict[str, float | None]: ...


class Target(ABC):
    """One kind of prediction (see the module docstring). Subclass it, fill in the class
    attributes and the abstract methods, and register an instance in ``register_tasks``."""

    name: str = ""  # the value of the config's ``target``
    description: str = ""
    labels: str = "class"  # the form records read ``y`` in (core/records/labels.py)
    losses: tuple[str, ...] = ()  # the ``train.loss`` values it takes; the first is its default
    monitors: tuple[str, ...] = ()  # validation metrics ``train.monitor`` may name; the first is the default
    lower_is_better: tuple[str, ...] = ()  # metrics (without split) where a lower value is better: "rmse"

    @abstractmethod
    def loss(self, outputs: torch.Tensor, y: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``(summed loss, terms)``: the loss ``name`` summed over the batch's terms (items, or the
        labels that are not missing), and how many terms that is. Summed, not averaged: an empty
        batch contributes zero, and an epoch's loss is its sums' quotient."""

    @abstractmethod
    def running(self, width: int, device: torch.device) -> torch.Tensor:
        """The zero sums of a training epoch's running metrics (one tensor, summed across ranks)."""

    @abstractmethod
    def add_running(self, sums: torch.Tensor, outputs: torch.Tensor, y: torch.Tensor) -> None:
        """Add a training batch to ``sums`` in place, on the device (no host sync)."""

    @abstractmethod
    def running_metrics(self, sums: torch.Tensor, prefix: str) -> dict[str, float]:
        """The figures of summed ``sums`` (``train_acc``, ``train_rmse`` ...)."""

    @abstractmethod
    def scores(self, width: int) -> Scores:
        """An empty :class:`Scores` for one split of an evaluation."""

    def derived(self, items: int, width: int) -> dict[str, tuple[Callable, torch.dtype, tuple[int, ...]]]:
        """What ``predict`` writes beside ``logits`` (the raw outputs), computed from them:
        ``{name: (function of a block of logits, dtype, shape)}``; an entry named ``logits``
        replaces the raw outputs (a fitted regression's values in the labels' units)."""
        return {}

    def labelled(self, y: torch.Tensor) -> int:
        """How many of ``y``'s entries (the labels of a split's items) carry a label: a run is
        refused before training when a split has none (the loss would be zero every step and
        every figure of that split undefined). Every row by default; the built-in multilabel and
        regression targets count the entries that are not NaN."""
        return int(y.shape[0])

    def fitted(
        self, labels: Callable[[], torch.Tensor], width: int, reduce: Callable[[torch.Tensor], torch.Tensor]
    ) -> Target:
        """This target for a run about to train, where ``train.target_scaling`` asks for it:
        ``labels()`` returns this rank's share of the training split's labels (``[items]`` or
        ``[items, width]``; read only when called), ``reduce`` sums a tensor over the ranks (every
        rank calls it alike). A target that learns nothing returns itself (the default); one that
        does returns a copy holding what :meth:`state` keeps."""
        return self

    def state(self) -> dict | None:
        """What a checkpoint keeps of a fitted target (tensors and plain values); None: nothing."""
        return None

    def restored(self, state: dict | None) -> Target:
        """This target as a checkpoint's ``state`` fitted it. None (a checkpoint that kept nothing,
        such as one written before targets were fitted) must score as that run was trained: the
        unfitted target. By default itself."""
        return self

    def units(self, outputs: torch.Tensor) -> torch.Tensor:
        """A model's ``outputs`` ``[items, width]`` as a user reads them (a fitted regression's in
        the labels' units); by default as they are."""
        return outputs

    def is_better(self, monitor: str, value: float, best: float | None) -> bool:
        """Whether ``value`` of ``monitor`` beats ``best`` (ties do not)."""
        if best is None:
            return True
        lower = monitor.split("_", 1)[-1] in self.lower_is_better
        return value < best if lower else value > best

    def check(self, data: Any, monitor: str) -> None:
        """Refuse, before any rank starts, a dataset whose labels cannot be scored by ``monitor``
        (raise :class:`~gnnbridge.core.errors.ConfigError`). Nothing by default."""
        return None
