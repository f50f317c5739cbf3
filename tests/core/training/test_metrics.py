"""Exact metrics: ROC-AUC against its definition, and across ranks."""

import torch

from gnnbridge.core.training.metrics import ClassificationScores, roc_auc


def pairwise_auc(scores, labels):
    pos, neg = scores[labels == 1], scores[labels == 0]
    wins = (pos[:, None] > neg[None]).double() + 0.5 * (pos[:, None] == neg[None]).double()
    return float(wins.mean())


def test_roc_auc_is_the_pairwise_win_rate_with_ties_counting_half():
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        scores = torch.randint(0, 6, (50,), generator=gen).double()  # many ties
        labels = torch.randint(0, 2, (50,), generator=gen)
        assert abs(roc_auc(scores, labels) - pairwise_auc(scores, labels)) < 1e-12


def test_roc_auc_is_undefined_with_one_class():
    assert roc_auc(torch.tensor([0.1, 0.9]), torch.tensor([1, 1])) is None


def test_binary_scores_report_roc_auc_and_multiclass_do_not():
    logits = torch.tensor([[0.0, 2.0], [1.0, 0.0], [0.0, 0.5], [3.0, 0.0]])
    scores = ClassificationScores(2)
    scores.update(logits, torch.tensor([1, 0, 0, 1]))
    metrics = scores.as_metrics("test")
    assert metrics["test_acc"] == 0.5
    assert metrics["test_roc_auc"] == 0.5  # positives rank 4th and 1st of 4
    assert "test_roc_auc" not in ClassificationScores(3).as_metrics("test")
