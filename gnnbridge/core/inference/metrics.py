"""Exact classification metrics across ranks.

Ranks never average per-batch (or per-rank) means: a mean of means weighs a 1-node last batch
like a full one. Each rank adds its predictions into a confusion matrix; one sum all-reduce
makes every rank hold the global matrix, from which accuracy and macro-F1 follow exactly.
ROC-AUC (binary tasks) is not a function of counts: every rank's scores are all-gathered and
the AUC is computed over all of them at once, on every rank. Link prediction's ranking metrics
(MRR, Hits@K) follow OGB's two protocols (:class:`LinkScores`, :class:`SharedLinkScores`) and are
gathered the same way.
"""

from __future__ import annotations

import torch

from gnnbridge.core.errors import TrainingDivergedError
from gnnbridge.core.runtime.context import DistContext


class ConfusionCounts:
    """A running ``[num_classes, num_classes]`` confusion matrix (rows: truth, cols: prediction)."""

    def __init__(self, num_classes: int, device: torch.device | str = "cpu"):
        self.num_classes = num_classes
        self.matrix = torch.zeros((num_classes, num_classes), dtype=torch.int64, device=device)

    @classmethod
    def of(cls, matrix: torch.Tensor) -> ConfusionCounts:
        """Counts over an existing ``matrix`` (updated in place): a training epoch's running sums."""
        counts = cls.__new__(cls)
        counts.num_classes, counts.matrix = int(matrix.shape[0]), matrix
        return counts

    def update(self, logits: torch.Tensor, target: torch.Tensor) -> None:
        pred = logits.argmax(dim=-1).to(self.matrix.device)
        index = target.to(self.matrix.device) * self.num_classes + pred
        self.matrix += torch.bincount(index, minlength=self.num_classes**2).view(self.num_classes, -1)

    def reduce(self, ctx: DistContext) -> ConfusionCounts:
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


class ClassificationScores(ConfusionCounts):
    """Confusion counts plus, for two classes, every item's score for ROC-AUC.

    The score is the logit margin ``logits[:, 1] - logits[:, 0]``: it orders items exactly as
    the positive-class probability does, without a softmax. Outputs that are NaN or infinite
    are never scored (argmax and AUC over them are arbitrary): :meth:`as_metrics` raises
    :class:`TrainingDivergedError` instead.
    """

    def __init__(self, num_classes: int, device: torch.device | str = "cpu"):
        super().__init__(num_classes, device)
        self.binary = num_classes == 2
        self._scores: list[torch.Tensor] = []
        self._labels: list[torch.Tensor] = []
        self.nonfinite = torch.zeros((), dtype=torch.int64, device=device)  # items with a NaN/inf output

    def update(self, logits: torch.Tensor, target: torch.Tensor) -> None:
        self.nonfinite += (~torch.isfinite(logits.detach())).any(dim=-1).sum().to(self.nonfinite.device)
        super().update(logits, target)
        if self.binary:
            self._scores.append((logits[:, 1].double() - logits[:, 0].double()).cpu())
            self._labels.append(target.cpu())

    def reduce(self, ctx: DistContext) -> ClassificationScores:
        super().reduce(ctx)
        self.nonfinite = ctx.all_reduce_sum(self.nonfinite)
        if self.binary and ctx.distributed:
            scores, labels = self._local()
            sizes = torch.zeros(ctx.world_size, dtype=torch.int64)
            sizes[ctx.rank] = scores.numel()
            sizes = ctx.all_reduce_sum(sizes).tolist()
            self._scores = [ctx.all_gather_rows(scores, sizes)]
            self._labels = [ctx.all_gather_rows(labels, sizes)]
        return self

    def _local(self) -> tuple[torch.Tensor, torch.Tensor]:
        scores = torch.cat(self._scores) if self._scores else torch.zeros(0, dtype=torch.float64)
        labels = torch.cat(self._labels) if self._labels else torch.zeros(0, dtype=torch.int64)
        return scores, labels

    def as_metrics(self, prefix: str) -> dict[str, float | None]:
        bad = int(self.nonfinite)
        if bad:
            raise TrainingDivergedError(
                f"the model's outputs are NaN or infinite for {bad} of {self.total} {prefix} "
                "item(s), which are never scored"
            )
        metrics: dict[str, float | None] = dict(super().as_metrics(prefix))
        if self.binary:
            metrics[f"{prefix}_roc_auc"] = roc_auc(*self._local())
        return metrics


def roc_auc(scores: torch.Tensor, labels: torch.Tensor) -> float | None:
    """Area under the ROC curve of binary ``labels`` (1 = positive) ranked by ``scores``.

    The Mann-Whitney form: the chance that a random positive outscores a random negative, ties
    counting one half (tied scores share their average rank). ``None`` when a class is absent,
    where the AUC is undefined.
    """
    positive = labels == 1
    n_pos = int(positive.sum())
    n_neg = labels.numel() - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    _, inverse, counts = torch.unique(scores, sorted=True, return_inverse=True, return_counts=True)
    last = torch.cumsum(counts, 0).double()  # 1-based rank of each distinct score's last copy
    mean_rank = last - (counts.double() - 1) / 2
    rank_sum = float(mean_rank[inverse][positive].sum())
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


class LinkScores:
    """Link-prediction metrics of the ``per-edge`` protocol (ogbl-citation2's), exact across ranks.

    Every held-out edge is scored with its own fixed negatives: ROC-AUC over all positive and
    negative scores, and the edge's rank among its own candidates for MRR and Hits@K. A tie
    counts half a place (the candidates that tie with the positive are shared out evenly, OGB's
    mean of the optimistic and pessimistic rank), so a model that scores everything alike gets
    the chance-level rank, not the best one. Scores and ranks are all-gathered (like
    :class:`ClassificationScores`); the reciprocal ranks are summed in sorted order, so the MRR
    is the same float whatever the number of ranks.
    """

    def __init__(self, hits_at: int | list[int]):
        self.ks = hits_list(hits_at)
        self._pos: list[torch.Tensor] = []
        self._neg: list[torch.Tensor] = []
        self._ranks: list[torch.Tensor] = []  # twice each edge's rank: an integer, ties included
        self.nonfinite = torch.zeros((), dtype=torch.int64)

    def update(self, positive: torch.Tensor, negative: torch.Tensor) -> None:
        """``positive`` [B] scores of B edges; ``negative`` [B, K] scores of each one's negatives."""
        positive, negative = positive.detach().double().cpu(), negative.detach().double().cpu()
        self.nonfinite += (~torch.isfinite(positive)).sum() + (~torch.isfinite(negative)).any(dim=1).sum()
        above = (negative > positive.unsqueeze(1)).sum(1)
        ties = (negative == positive.unsqueeze(1)).sum(1)
        self._ranks.append(2 + 2 * above + ties)
        self._pos.append(positive)
        self._neg.append(negative.flatten())

    def reduce(self, ctx: DistContext) -> LinkScores:
        self.nonfinite = ctx.all_reduce_sum(self.nonfinite)
        for name in ("_pos", "_neg", "_ranks"):
            setattr(self, name, _gathered(ctx, getattr(self, name), torch.int64 if name == "_ranks" else torch.float64))
        return self

    def as_metrics(self, prefix: str) -> dict[str, float | None]:
        ranks2 = _cat(self._ranks, torch.int64)
        _refuse_nonfinite(self.nonfinite, ranks2.numel(), prefix)
        pos, neg = _cat(self._pos, torch.float64), _cat(self._neg, torch.float64)
        edges = max(1, ranks2.numel())
        reciprocal = float((2.0 / ranks2.sort().values.double()).sum())
        hits = {k: int((ranks2 <= 2 * k).sum()) / edges for k in self.ks}
        return {
            f"{prefix}_roc_auc": _pair_auc(pos, neg),
            f"{prefix}_mrr": reciprocal / edges,
            **_hits_metrics(prefix, hits),
        }


class SharedLinkScores:
    """Link-prediction metrics of the ``shared`` protocol (ogbl-collab's, -ppa's, -ddi's): every
    held-out edge is scored against one set of negative pairs shared by the whole split.

    Hits@K is OGB's: the share of positive edges scored strictly above the K-th highest negative
    score (negatives counted with their repeats; a positive that ties it is a miss), and 1 when
    the split has fewer than K negatives. ROC-AUC is over all positive and negative scores, ties
    counting half. There is no MRR: a rank against the shared set is not what the field reports.
    Ranks hand their share of positive and of negative scores to :meth:`add_positives` and
    :meth:`add_negatives`; both are all-gathered, and each metric is a count, so the floats are
    the same whatever the number of ranks.
    """

    def __init__(self, hits_at: int | list[int]):
        self.ks = hits_list(hits_at)
        self._pos: list[torch.Tensor] = []
        self._neg: list[torch.Tensor] = []
        self.nonfinite = torch.zeros((), dtype=torch.int64)

    def add_positives(self, scores: torch.Tensor) -> None:
        self._pos.append(self._checked(scores))

    def add_negatives(self, scores: torch.Tensor) -> None:
        self._neg.append(self._checked(scores))

    def _checked(self, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.detach().double().cpu().flatten()
        self.nonfinite += (~torch.isfinite(scores)).sum()
        return scores

    def reduce(self, ctx: DistContext) -> SharedLinkScores:
        self.nonfinite = ctx.all_reduce_sum(self.nonfinite)
        self._pos = _gathered(ctx, self._pos, torch.float64)
        self._neg = _gathered(ctx, self._neg, torch.float64)
        return self

    def as_metrics(self, prefix: str) -> dict[str, float | None]:
        pos, neg = _cat(self._pos, torch.float64), _cat(self._neg, torch.float64)
        _refuse_nonfinite(self.nonfinite, pos.numel() + neg.numel(), prefix, what="score(s) of edges and negatives")
        hits = {k: shared_hits(pos, neg, k) for k in self.ks}
        return {f"{prefix}_roc_auc": _pair_auc(pos, neg), **_hits_metrics(prefix, hits)}


def shared_hits(pos: torch.Tensor, neg: torch.Tensor, k: int) -> float:
    """OGB's Hits@K against a shared negative set: the share of ``pos`` strictly above the K-th
    highest of ``neg`` (1.0 when there are fewer than K negatives, as OGB's evaluator returns)."""
    if neg.numel() < k:
        return 1.0
    kth = neg.topk(k).values[-1]
    return int((pos > kth).sum()) / max(1, pos.numel())


def hits_list(hits_at: int | list[int]) -> list[int]:
    """``link.hits_at`` as a list of K (it may be one int)."""
    return [hits_at] if isinstance(hits_at, int) else list(hits_at)


def _hits_metrics(prefix: str, hits: dict[int, float]) -> dict[str, float]:
    """``{prefix}_hits@K`` for every K, as OGB names them, and ``{prefix}_hits``: Hits@ the first K
    (the name before several K were possible; ``train.monitor=val_hits`` still means it)."""
    first = next(iter(hits.values()))
    return {f"{prefix}_hits": first, **{f"{prefix}_hits@{k}": v for k, v in hits.items()}}


def _pair_auc(pos: torch.Tensor, neg: torch.Tensor) -> float | None:
    labels = torch.cat([torch.ones(pos.numel(), dtype=torch.int64), torch.zeros(neg.numel(), dtype=torch.int64)])
    return roc_auc(torch.cat([pos, neg]), labels)


def _refuse_nonfinite(nonfinite: torch.Tensor, total: int, prefix: str, what: str = "edge(s)") -> None:
    if int(nonfinite):
        raise TrainingDivergedError(
            f"the model's scores are NaN or infinite for {int(nonfinite)} of {total} {prefix} {what}, "
            "which are never scored"
        )


def _gathered(ctx: DistContext, parts: list[torch.Tensor], dtype: torch.dtype, *row: int) -> list[torch.Tensor]:
    """Every rank's ``parts`` (values, or rows of ``row`` columns), concatenated in rank order
    (unchanged in one process)."""
    if not ctx.distributed:
        return parts
    local = _cat(parts, dtype, *row)
    sizes = torch.zeros(ctx.world_size, dtype=torch.int64)
    sizes[ctx.rank] = local.shape[0]
    return [ctx.all_gather_rows(local, ctx.all_reduce_sum(sizes).tolist())]


def _cat(parts: list[torch.Tensor], dtype: torch.dtype, *row: int) -> torch.Tensor:
    return torch.cat(parts) if parts else torch.zeros(0, *row, dtype=dtype)


class GatheredRows:
    """Every item's output row and label row, all-gathered at :meth:`reduce`: the base of the
    metrics that are not functions of counts (regression errors per column, ROC-AUC and average
    precision per label). Missing labels (NaN) stay in place and each metric skips them."""

    def __init__(self, width: int):
        self.width = width
        self._out: list[torch.Tensor] = []
        self._y: list[torch.Tensor] = []
        self.nonfinite = torch.zeros((), dtype=torch.int64)

    def update(self, outputs: torch.Tensor, y: torch.Tensor) -> None:
        outputs = outputs.detach().double().cpu().reshape(-1, self.width)
        self.nonfinite += (~torch.isfinite(outputs)).any(dim=1).sum()
        self._out.append(outputs)
        self._y.append(y.detach().double().cpu().reshape(-1, self.width))

    def reduce(self, ctx: DistContext):
        self.nonfinite = ctx.all_reduce_sum(self.nonfinite)
        self._out = _gathered(ctx, self._out, torch.float64, self.width)
        self._y = _gathered(ctx, self._y, torch.float64, self.width)
        return self

    def rows(self, prefix: str) -> tuple[torch.Tensor, torch.Tensor]:
        out, y = _cat(self._out, torch.float64, self.width), _cat(self._y, torch.float64, self.width)
        if int(self.nonfinite):
            raise TrainingDivergedError(
                f"the model's outputs are NaN or infinite for {int(self.nonfinite)} of {out.shape[0]} {prefix} "
                "item(s), which are never scored"
            )
        return out, y


class RegressionScores(GatheredRows):
    """MAE, RMSE and R² as OGB's regression evaluators define them (ogbg-molesol's RMSE): each
    column over its labelled items, then the mean over columns (scikit-learn's ``r2_score``
    with uniform weights for R²). A column without a labelled item is left out; R² of a
    column whose labels are all equal is undefined and left out too (None when none is left).
    ``units``: how the model's outputs become values in the labels' units (a fitted target's
    scale, applied in float64 before anything is scored); None: they are the values."""

    def __init__(self, width: int, units=None):
        super().__init__(width)
        self.units = units

    def update(self, outputs: torch.Tensor, y: torch.Tensor) -> None:
        if self.units is not None:
            outputs = self.units(outputs.detach().double().reshape(-1, self.width))
        super().update(outputs, y)

    def as_metrics(self, prefix: str) -> dict[str, float | None]:
        out, y = self.rows(prefix)
        mae, rmse, r2 = [], [], []
        for col in range(self.width):
            known = ~torch.isnan(y[:, col])
            if not bool(known.any()):
                continue
            err = out[known, col] - y[known, col]
            mae.append(float(err.abs().mean()))
            rmse.append(float(err.square().mean().sqrt()))
            spread = float((y[known, col] - y[known, col].mean()).square().sum())
            if spread > 0:
                r2.append(1.0 - float(err.square().sum()) / spread)
        return {f"{prefix}_mae": _mean(mae), f"{prefix}_rmse": _mean(rmse), f"{prefix}_r2": _mean(r2)}


class MultilabelScores(GatheredRows):
    """ROC-AUC and average precision as OGB defines them for multi-label tasks (ogbn-proteins,
    ogbg-molhiv, ogbg-molpcba): per label over its labelled items, averaged over the labels that
    have both a positive and a negative there (None when no label has). Also ``label_acc``: the
    share of labelled entries whose output's sign (probability 0.5) matches the label."""

    def as_metrics(self, prefix: str) -> dict[str, float | None]:
        out, y = self.rows(prefix)
        aucs, aps = [], []
        for col in range(self.width):
            known = ~torch.isnan(y[:, col])
            labels, scores = y[known, col].long(), out[known, col]
            positives = int(labels.sum())
            if 0 < positives < labels.numel():
                aucs.append(roc_auc(scores, labels))
                aps.append(average_precision(scores, labels))
        known = ~torch.isnan(y)
        right = int(((out[known] > 0) == (y[known] > 0.5)).sum())
        return {
            f"{prefix}_roc_auc": _mean(aucs),
            f"{prefix}_ap": _mean(aps),
            f"{prefix}_label_acc": right / int(known.sum()) if bool(known.any()) else None,
        }


def average_precision(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Average precision of binary ``labels`` ranked by ``scores`` (scikit-learn's and OGB's:
    the sum over distinct score thresholds, highest first, of the recall gained there times
    the precision there; tied scores form one threshold)."""
    order = torch.argsort(scores, descending=True, stable=True)
    s, hit = scores[order], labels[order].double()
    last = torch.ones_like(s, dtype=torch.bool)
    last[:-1] = s[1:] != s[:-1]  # the last item of each run of equal scores: one threshold
    tp = torch.cumsum(hit, 0)[last]
    seen = torch.arange(1, s.numel() + 1, dtype=torch.float64)[last]
    recall = tp / tp[-1]
    gained = torch.diff(recall, prepend=recall.new_zeros(1))
    return float((gained * (tp / seen)).sum())


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
