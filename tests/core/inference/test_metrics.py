"""Exact metrics: ROC-AUC against its definition; link prediction's MRR and Hits@K against OGB's
definitions, written out here; multi-label ROC-AUC and AP and regression RMSE against OGB's own
``Evaluator`` on arrays of its datasets' shapes; and the same floats across ranks."""

import threading

import pytest
import torch

from gnnbridge.core.inference.metrics import (
    ClassificationScores,
    LinkScores,
    MultilabelScores,
    RegressionScores,
    SharedLinkScores,
    average_precision,
    roc_auc,
)
from gnnbridge.core.runtime.context import DistContext

ALONE = DistContext(0, 1, 0, torch.device("cpu"))


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


# --------------------------------------------------------------------------- link prediction, as OGB reports it


def ogb_per_edge(pos, neg, ks):
    """OGB's ogbl-citation2 definitions, written out: an edge's rank is 1 + the mean of its
    optimistic (negatives above it) and pessimistic (negatives at or above it) counts."""
    ranks = []
    for p, row in zip(pos.tolist(), neg.tolist()):
        optimistic = sum(n > p for n in row)
        pessimistic = sum(n >= p for n in row)
        ranks.append(0.5 * (optimistic + pessimistic) + 1)
    out = {"mrr": sum(1 / r for r in ranks) / len(ranks)}
    out.update({f"hits@{k}": sum(r <= k for r in ranks) / len(ranks) for k in ks})
    return out


def ogb_shared(pos, neg, ks):
    """OGB's ogbl-collab Hits@K, written out: the share of positives strictly above the K-th
    highest negative score (1 with fewer than K negatives)."""
    ordered = sorted(neg.tolist(), reverse=True)
    return {
        f"hits@{k}": 1.0 if len(ordered) < k else sum(p > ordered[k - 1] for p in pos.tolist()) / len(pos) for k in ks
    }


def test_per_edge_link_metrics_by_hand_with_ties_and_several_k():
    scores = LinkScores([1, 2, 3])
    # ranks: 1 (above both); 3 (both above); 2 (both tie: half a place each); 1.5 (one ties)
    scores.update(torch.tensor([3.0, 0.0, 1.0, 2.0]), torch.tensor([[1.0, 2.0], [5.0, 6.0], [1.0, 1.0], [2.0, 0.0]]))
    m = scores.as_metrics("test")
    assert m["test_mrr"] == pytest.approx((1 + 1 / 3 + 1 / 2 + 1 / 1.5) / 4)
    assert (m["test_hits@1"], m["test_hits@2"], m["test_hits@3"]) == (0.25, 0.75, 1.0)
    assert m["test_hits"] == m["test_hits@1"]  # the first K keeps the old name
    assert m["test_roc_auc"] == pytest.approx(
        pairwise_auc(torch.tensor([3, 0, 1, 2, 1, 2, 5, 6, 1, 1, 2, 0.0]), torch.tensor([1] * 4 + [0] * 8))
    )


def test_shared_link_metrics_by_hand_are_ogbs_hits_at_k():
    scores = SharedLinkScores([1, 2, 3, 6])
    scores.add_positives(torch.tensor([3.0, 2.0]))
    scores.add_positives(torch.tensor([1.0, 5.0]))
    scores.add_negatives(torch.tensor([4.0, 2.0, 2.0, 1.0, 0.0]))
    m = scores.as_metrics("val")
    assert m["val_hits@1"] == 0.25  # above 4: only 5
    assert m["val_hits@2"] == 0.5  # above 2: 3 and 5
    assert m["val_hits@3"] == 0.5  # the 3rd highest is 2 again (repeats count); the positive 2 ties it: a miss
    assert m["val_hits@6"] == 1.0  # fewer negatives than K: OGB's evaluator says 1
    assert "val_mrr" not in m and m["val_hits"] == m["val_hits@1"]
    assert m["val_roc_auc"] == pytest.approx(
        pairwise_auc(torch.tensor([3, 2, 1, 5, 4, 2, 2, 1, 0.0]), torch.tensor([1] * 4 + [0] * 5))
    )


@pytest.mark.parametrize("seed", range(4))
def test_link_metrics_equal_a_plain_reference_of_ogbs_definitions(seed):
    gen = torch.Generator().manual_seed(seed)
    pos = torch.randint(0, 8, (60,), generator=gen).double()  # few distinct values: ties everywhere
    neg = torch.randint(0, 8, (60, 20), generator=gen).double()
    ks = [1, 3, 10, 20]
    per_edge = LinkScores(ks)
    per_edge.update(pos, neg)
    got, want = per_edge.as_metrics("val"), ogb_per_edge(pos, neg, ks)
    assert got["val_mrr"] == pytest.approx(want["mrr"], abs=1e-12)
    assert all(got[f"val_{k}"] == v for k, v in want.items() if k != "mrr")
    shared_neg = neg.flatten()[:150]
    shared = SharedLinkScores([*ks, 150, 151])
    shared.add_positives(pos)
    shared.add_negatives(shared_neg)
    got, want = shared.as_metrics("val"), ogb_shared(pos, shared_neg, [*ks, 150, 151])
    assert {k: got[f"val_{k}"] for k in want} == want


class Ranks:
    """Ranks of a job as threads: each rank's collectives meet at a barrier (gather, then sum)."""

    def __init__(self, world: int):
        self.world, self.barrier, self.slots = world, threading.Barrier(world), [None] * world

    def exchange(self, rank: int, value):
        self.slots[rank] = value
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()
        return out


class ThreadCtx:
    def __init__(self, ranks: Ranks, rank: int):
        self.ranks, self.rank, self.world_size = ranks, rank, ranks.world
        self.distributed = ranks.world > 1

    def all_reduce_sum(self, tensor):
        return sum(self.ranks.exchange(self.rank, tensor.clone()))

    def all_gather_rows(self, rows, sizes):
        return torch.cat([part[:n] for part, n in zip(self.ranks.exchange(self.rank, rows), sizes)])


def metrics_on(world: int, make, feed) -> list[dict]:
    """Every rank's metrics when ``world`` ranks each feed their share (``feed(scores, rank, world)``)."""
    ranks, out = Ranks(world), [None] * world

    def rank_main(rank):
        scores = make()
        feed(scores, rank, world)
        out[rank] = scores.reduce(ThreadCtx(ranks, rank)).as_metrics("test")

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_link_metrics_are_the_same_floats_whatever_the_world_size():
    gen = torch.Generator().manual_seed(0)
    pos, neg = torch.randn(101, generator=gen), torch.randn(101, 30, generator=gen)
    shared_neg = torch.randn(997, generator=gen)
    shared_neg[::7] = pos[0]  # ties with a positive

    def per_edge(scores, rank, world):
        scores.update(pos[rank::world], neg[rank::world])  # an interleaved share: another order of edges

    def shared(scores, rank, world):
        scores.add_positives(pos[rank::world])
        scores.add_negatives(shared_neg.tensor_split(world)[rank])

    for make, feed in ((lambda: LinkScores([1, 10]), per_edge), (lambda: SharedLinkScores([1, 10, 50]), shared)):
        (alone,) = metrics_on(1, make, feed)
        for world in (2, 3):
            assert metrics_on(world, make, feed) == [alone] * world


def ogb_shaped(seed: int, items: int, labels: int, missing: float, binary: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Outputs and labels of an OGB dataset's shape (float64), a share of labels missing (NaN)."""
    gen = torch.Generator().manual_seed(seed)
    outputs = torch.randn(items, labels, generator=gen, dtype=torch.float64)
    y = (outputs + torch.randn(items, labels, generator=gen, dtype=torch.float64) > 0).double()
    if not binary:
        y = outputs * 0.8 + torch.randn(items, labels, generator=gen, dtype=torch.float64)
    outputs[:, ::3] = outputs[:, ::3].round(decimals=1)  # ties in every third label
    y[torch.rand(items, labels, generator=gen) < missing] = float("nan")
    return outputs, y


@pytest.mark.parametrize(
    "dataset, items, labels, missing, metric, ours",
    [
        ("ogbg-molhiv", 300, 1, 0.0, "rocauc", "roc_auc"),
        ("ogbg-molpcba", 300, 128, 0.7, "ap", "ap"),
        ("ogbn-proteins", 300, 112, 0.0, "rocauc", "roc_auc"),
        ("ogbg-molesol", 300, 1, 0.1, "rmse", "rmse"),
    ],
)
def test_multilabel_and_regression_metrics_are_ogbs_evaluators(dataset, items, labels, missing, metric, ours):
    from ogb.graphproppred import Evaluator as GraphEvaluator
    from ogb.nodeproppred import Evaluator as NodeEvaluator

    outputs, y = ogb_shaped(0, items, labels, missing, binary=metric != "rmse")
    scores = (RegressionScores if metric == "rmse" else MultilabelScores)(labels)
    for part in range(3):  # in batches, as an evaluation adds them
        scores.update(outputs[part::3], y[part::3])
    got = scores.reduce(ALONE).as_metrics("test")[f"test_{ours}"]
    order = torch.cat([torch.arange(part, items, 3) for part in range(3)])
    evaluator = (NodeEvaluator if dataset.startswith("ogbn") else GraphEvaluator)(dataset)
    expected = evaluator.eval({"y_true": y[order].numpy(), "y_pred": outputs[order].numpy()})[metric]
    assert got == pytest.approx(expected, rel=1e-12)


def test_average_precision_and_r2_are_scikit_learns_with_ties():
    from sklearn.metrics import average_precision_score, r2_score

    gen = torch.Generator().manual_seed(3)
    for _ in range(5):
        scores = torch.randint(0, 8, (200,), generator=gen).double()  # many ties
        labels = torch.randint(0, 2, (200,), generator=gen)
        assert average_precision(scores, labels) == pytest.approx(average_precision_score(labels, scores), rel=1e-12)
    truth, guess = torch.randn(100, 3, generator=gen, dtype=torch.float64), torch.randn(100, 3, dtype=torch.float64)
    scores = RegressionScores(3)
    scores.update(guess, truth)
    r2 = scores.reduce(ALONE).as_metrics("val")["val_r2"]
    assert r2 == pytest.approx(r2_score(truth.numpy(), guess.numpy()), rel=1e-12)


def test_a_label_with_one_class_in_the_split_is_left_out_and_none_means_undefined():
    y = torch.tensor([[1.0, 0.0], [1.0, 1.0], [1.0, float("nan")]])
    outputs = torch.tensor([[0.3, -1.0], [0.1, 2.0], [0.2, 5.0]])
    scores = MultilabelScores(2)
    scores.update(outputs, y)
    metrics = scores.reduce(ALONE).as_metrics("val")
    assert metrics["val_roc_auc"] == 1.0 and metrics["val_ap"] == 1.0  # label 0 (all 1) is left out
    only_ones = MultilabelScores(1)
    only_ones.update(outputs[:, :1], y[:, :1])
    assert only_ones.reduce(ALONE).as_metrics("val")["val_roc_auc"] is None
