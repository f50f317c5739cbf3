"""A mid-epoch checkpoint's running sums: the target's, and those a checkpoint written before
targets holds (a confusion matrix under ``counts``), which resume as one loss term per item."""

import torch

from gnnbridge.core.plugins import get_target
from gnnbridge.core.runtime.context import DistContext
from gnnbridge.core.training.midepoch import EpochSums

ALONE = DistContext(0, 1, 0, torch.device("cpu"))


def test_a_checkpoint_from_before_targets_resumes_its_confusion_counts():
    sums = EpochSums(get_target("class"), 3, torch.device("cpu"))
    counts = torch.tensor([[4, 1, 0], [0, 3, 0], [1, 0, 1]])
    sums.load({"loss_sum": 5.0, "first_bad": -1, "counts": counts})
    loss, running = sums.reduce(ALONE)
    assert loss == 5.0 / 10 and running == {"train_acc": 8 / 10}


def test_a_regression_epochs_sums_round_trip_through_a_checkpoint():
    target = get_target("regression")
    sums = EpochSums(target, 2, torch.device("cpu"))
    outputs, y = torch.tensor([[1.0, 2.0], [0.0, 0.0]]), torch.tensor([[1.5, float("nan")], [1.0, 2.0]])
    loss, terms = target.loss(outputs, y, "mse")
    sums.add(0, loss, terms, outputs, y)
    again = EpochSums(target, 2, torch.device("cpu"))
    again.load(sums.state())
    assert again.reduce(ALONE) == sums.reduce(ALONE)
    mean_loss, running = again.reduce(ALONE)
    assert mean_loss == (0.25 + 1.0 + 4.0) / 3  # the missing value is no term
    assert running["train_mae"] == (0.5 + 1.0 + 2.0) / 3
