"""Exact classification metrics across ranks.

Ranks never average per-batch (or per-rank) means: a mean of means weighs a 1-node last batch
like a full one. Each rank adds its predictions into a confusion matrix; one sum all-reduce
makes every rank hold the global matrix, from which accuracy and macro-F1 follow exactly.
"""
from __future__ import annotations

import torch

from gnnbridge.core.distributed import DistContext


class ConfusionCounts:
    """A running ``[num_classes, num_classes]`` confusion matrix (rows: truth, cols: prediction)."""

    def __init__(self, num_classes: int, device: torch.device | str = "cpu"):
        self.num_classes = num_classes
        self.matrix = torch.zeros((num_classes, num_classes), dtype=torch.int64, device=device)

    def update(self, logits: torch.Tensor, target: torch.Tensor) -> None:
        pred = logits.argmax(dim=-1).to(self.matrix.device)
        index = target.to(self.matrix.device) * self.num_classes + pred
        self.matrix += torch.bincount(index, minlength=self.num_classes**2).view(self.num_classes, -1)

    def reduce(self, ctx: DistContext) -> "ConfusionCounts":
        """Sum over ranks; the matrix then lives on the CPU (metrics are read right after)."""
        self.matrix = ctx.all_reduce_sum(self.matrix).cpu()
        return self

    @property
    def total(self) -> int:
        return int(self.matrix.sum())

    def accuracy(self) -> float:
        return float(self.matrix.diagonal().sum()) / max(1, self.total)

    def macro_f1(self) -> float:
        """Mean F1 over classes that occur in the truth or the predictions."""
        m = self.matrix.double()
        tp = m.diagonal()
        support = m.sum(1) + m.sum(0)
        present = support > 0
        if not bool(present.any()):
            return 0.0
        f1 = 2 * tp[present] / support[present]
        return float(f1.mean())

    def as_metrics(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}_acc": self.accuracy(), f"{prefix}_macro_f1": self.macro_f1()}
