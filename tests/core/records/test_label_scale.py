"""Regression's values standardised for training (``LabelScale``, the fitted ``regression``
target): fitted on the training split's labelled values only, per column, as scikit-learn's
``StandardScaler`` fits them; the loss compares standard units, every figure a user reads is in
the labels' units, and a checkpoint that kept no scale scores as it was trained."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from sklearn.metrics import mean_absolute_error, r2_score
from sklearn.preprocessing import StandardScaler

from gnnbridge.core.plugins import get_target
from gnnbridge.core.records.labels import LabelScale


def labels(seed: int = 0) -> torch.Tensor:
    """Two columns in other units (a price around 300,000, a share around 5), some missing."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.stack([300_000 + 80_000 * torch.randn(500, generator=gen), 5 + 2 * torch.randn(500, generator=gen)], 1)
    y[torch.rand(500, 2, generator=gen) < 0.2] = float("nan")
    return y.float()


def test_the_scale_is_standard_scalers_over_each_columns_labelled_values():
    y = labels()
    scale = LabelScale.fit(y, 2)
    for col in range(2):
        known = y[:, col][~torch.isnan(y[:, col])].double().numpy()[:, None]
        ref = StandardScaler().fit(known)
        assert scale.mean[col].item() == pytest.approx(ref.mean_[0], rel=1e-12)
        assert scale.std[col].item() == pytest.approx(ref.scale_[0], rel=1e-9)
    z = scale.standard(y)
    assert torch.isnan(z).equal(torch.isnan(y))  # a missing value stays missing
    assert torch.allclose(scale.units(z)[~torch.isnan(y)], y[~torch.isnan(y)], rtol=1e-6)


def fitted_on_ranks(shares: list[torch.Tensor]) -> list[LabelScale]:
    """Each rank's scale when rank ``r`` fits ``shares[r]``, its reductions summed over the ranks
    (threads standing in for ranks: every rank waits for the others' tensor at each reduction)."""
    world = len(shares)
    barrier, slots, out = threading.Barrier(world), [None] * world, [None] * world

    def rank(r: int) -> None:
        def reduce(t: torch.Tensor) -> torch.Tensor:
            slots[r] = t.clone()
            barrier.wait()
            total = sum(slots)
            barrier.wait()
            return total

        out[r] = LabelScale.fit(shares[r], 2, reduce)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_ranks_holding_their_own_shares_or_the_same_labels_fit_the_whole_splits_scale():
    """A partitioned graph's machines each hold their part's labels; a graph loaded whole on
    every machine holds them all on each: both sum to the whole split's scale on every rank."""
    y = labels(1)
    whole = LabelScale.fit(y, 2)
    for shares in ([y[:150], y[150:]], [y, y], [y[:100], y[100:350], y[350:]]):
        for scale in fitted_on_ranks(shares):
            assert torch.allclose(scale.mean, whole.mean, rtol=1e-12, atol=0)
            assert torch.allclose(scale.std, whole.std, rtol=1e-9, atol=0)


def test_a_column_without_spread_keeps_its_units_and_one_without_labels_too():
    y = torch.tensor([[3.0, float("nan"), 1.0], [3.0, float("nan"), 2.0], [3.0, float("nan"), 4.0]])
    scale = LabelScale.fit(y, 3)
    assert scale.std.tolist()[:2] == [1.0, 1.0] and scale.mean.tolist()[:2] == [3.0, 0.0]
    assert scale.std[2].item() == pytest.approx(np.std([1.0, 2.0, 4.0]))
    assert torch.isfinite(scale.standard(y)[:, [0, 2]]).all()


def test_a_fitted_regression_learns_standard_units_and_reports_the_labels_units():
    y = labels(2)
    target = get_target("regression")
    fitted = target.fitted(lambda: y, 2, lambda t: t)
    scale = fitted.scale
    z = torch.randn(500, 2)  # a model's outputs, in standard units
    values = scale.units(z)
    known = ~torch.isnan(y)
    loss, terms = fitted.loss(z, y, "mse")
    standard = (y.double() - scale.mean) / scale.std
    assert loss.item() == pytest.approx(float((z.double() - standard)[known].square().sum()), rel=1e-5)
    assert terms.item() == int(known.sum())
    scores = fitted.scores(2)
    scores.update(z, y)
    figures = scores.as_metrics("test")
    ref_mae = np.mean([mean_absolute_error(y[known[:, c], c], values[known[:, c], c]) for c in range(2)])
    ref_r2 = np.mean([r2_score(y[known[:, c], c], values[known[:, c], c]) for c in range(2)])
    assert figures["test_mae"] == pytest.approx(ref_mae, rel=1e-5)  # tens of thousands: the price's units
    assert figures["test_r2"] == pytest.approx(ref_r2, rel=1e-5)
    ((name, (fn, dtype, shape)),) = fitted.derived(500, 2).items()
    assert name == "logits" and shape == (500, 2) and torch.allclose(fn(z), values.float())
    running = fitted.running(2, torch.device("cpu"))
    fitted.add_running(running, z, y)
    assert fitted.running_metrics(running, "train")["train_mae"] == pytest.approx(
        float((values - y)[known].abs().mean()), rel=1e-5
    )


def test_a_checkpoint_keeps_the_scale_and_one_without_it_scores_as_it_was_trained():
    y = labels(3)
    target = get_target("regression")
    fitted = target.fitted(lambda: y, 2, lambda t: t)
    state = fitted.state()
    back = target.restored(state)
    assert torch.equal(back.scale.mean, fitted.scale.mean) and torch.equal(back.scale.std, fitted.scale.std)
    assert back is not target and target.scale is None  # the registered target is never fitted in place
    old = target.restored(None)  # a checkpoint from before scaling: its outputs are the values
    z = torch.randn(500, 2)
    assert torch.equal(old.units(z), z) and old.derived(500, 2) == {} and old.state() is None
    loss, _ = old.loss(z, y, "mse")
    assert loss.item() == pytest.approx(float((z - y)[~torch.isnan(y)].square().sum()), rel=1e-5)
    for other in ("class", "multilabel"):  # nothing to fit: the same object back
        t = get_target(other)
        assert t.fitted(lambda: y, 2, lambda s: s) is t and t.state() is None and t.restored(None) is t
