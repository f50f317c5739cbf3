"""The built-in task families (the config's ``task``: node, graph, link, edge; see
:mod:`gnnbridge.core.inference.families`) and targets (the config's ``target``), registered
through ``register_tasks`` as a plugin's are (see :mod:`gnnbridge.core.contracts.targets` for the
targets' contract):

    class       one class per item: cross-entropy; accuracy, macro-F1, ROC-AUC of two classes
    multilabel  L labels of 0/1 per item, NaN where missing: binary cross-entropy of the labels
                present; ROC-AUC and average precision as OGB defines them, label accuracy
    regression  T values per item, NaN where missing: mse, l1 or huber over the values present,
                in standard units (each column's training mean and std,
                ``train.target_scaling=standard``, kept in the checkpoint); MAE, RMSE and R² in
                the labels' units (lower is better for the errors)
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from gnnbridge.core.config.schema import TARGET_MONITORS
from gnnbridge.core.contracts.hookspecs import hookimpl
from gnnbridge.core.contracts.targets import Target
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.inference.families import BUILTIN_FAMILIES
from gnnbridge.core.inference.metrics import (
    ClassificationScores,
    ConfusionCounts,
    MultilabelScores,
    RegressionScores,
)
from gnnbridge.core.records.labels import LabelScale


class ClassTarget(Target):
    name = "class"
    description = "one class per item (cross-entropy; accuracy, macro-F1, ROC-AUC of two classes)"
    labels = "class"
    losses = ("cross_entropy",)
    monitors = TARGET_MONITORS["class"]

    def loss(self, outputs, y, name):
        return F.cross_entropy(outputs.float(), y, reduction="sum"), y.new_tensor(y.numel())

    def running(self, width, device):
        return torch.zeros((width, width), dtype=torch.int64, device=device)

    def add_running(self, sums, outputs, y):
        ConfusionCounts.of(sums).update(outputs.detach(), y)

    def running_metrics(self, sums, prefix):
        return {f"{prefix}_acc": ConfusionCounts.of(sums).accuracy()}

    def scores(self, width):
        return ClassificationScores(width)

    def derived(self, items, width):
        return {
            "probs": (lambda z: torch.softmax(z, dim=1), torch.float32, (items, width)),
            "pred": (lambda z: z.argmax(dim=1), torch.int64, (items,)),
        }

    def check(self, data, monitor):
        if monitor == "val_roc_auc" and data.num_classes != 2:
            raise ConfigError(
                f"train.monitor=val_roc_auc needs two classes but the dataset has {data.num_classes}; "
                "use train.monitor=val_acc or val_macro_f1."
            )
        if monitor == "val_roc_auc":
            classes = data.y[data.val_idx].unique()
            if classes.numel() < 2:
                raise ConfigError(
                    f"train.monitor=val_roc_auc, but every {data.item_name} of the val split has class "
                    f"{int(classes[0])}, so ROC-AUC is undefined there and no epoch could ever be best; use "
                    "train.monitor=val_acc, or a val split holding both classes."
                )


def _known(outputs: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The outputs and labels where a label is present (not NaN), flattened."""
    y = y.reshape(outputs.shape)
    known = ~torch.isnan(y)
    return outputs.float()[known], y[known]


def _present(y: torch.Tensor) -> int:
    """The entries of ``y`` that hold a label (not NaN)."""
    return int((~torch.isnan(y)).sum())


class MultilabelTarget(Target):
    name = "multilabel"
    description = "several 0/1 labels per item, NaN where missing (binary cross-entropy; ROC-AUC, AP)"
    labels = "multilabel"
    losses = ("bce",)
    monitors = TARGET_MONITORS["multilabel"]

    def loss(self, outputs, y, name):
        out, labels = _known(outputs, y)
        return F.binary_cross_entropy_with_logits(out, labels, reduction="sum"), labels.new_tensor(labels.numel())

    def running(self, width, device):
        return torch.zeros(2, dtype=torch.float64, device=device)  # right, labelled entries

    def add_running(self, sums, outputs, y):
        out, labels = _known(outputs.detach(), y)
        sums += torch.stack([((out > 0) == (labels > 0.5)).sum(), sums.new_tensor(labels.numel())]).double()

    def running_metrics(self, sums, prefix):
        right, total = sums.tolist()  # over no labelled entry the figure is absent, never 0
        return {f"{prefix}_label_acc": right / total if total else None}

    def labelled(self, y):
        return _present(y)

    def scores(self, width):
        return MultilabelScores(width)

    def derived(self, items, width):
        return {
            "probs": (torch.sigmoid, torch.float32, (items, width)),
            "pred": (lambda z: (z > 0).long(), torch.int64, (items, width)),
        }

    def check(self, data, monitor):
        if monitor in ("val_roc_auc", "val_ap"):
            val = data.y[data.val_idx]
            both = ((val == 1).any(dim=0) & (val == 0).any(dim=0)).any()
            if not bool(both):
                raise ConfigError(
                    f"train.monitor={monitor}, but no label of the val split has both a 0 and a 1, so it is "
                    "undefined there and no epoch could ever be best; use train.monitor=val_label_acc, or "
                    "a val split holding both."
                )


class RegressionTarget(Target):
    """Values per item. Fitted (:meth:`fitted`), the model learns them standardised per column
    (:class:`~gnnbridge.core.records.labels.LabelScale`): the loss compares standard units (a
    huber delta of 1 is one standard deviation), every figure and predicted value is in the
    labels' units. Unfitted (``train.target_scaling=none``, or a checkpoint from before scaling),
    the model's outputs are the values themselves."""

    name = "regression"
    description = "one or more values per item, NaN where missing (mse, l1, huber; MAE, RMSE, R²)"
    labels = "regression"
    losses = ("mse", "l1", "huber")
    monitors = TARGET_MONITORS["regression"]
    lower_is_better = ("mae", "rmse")
    scale: LabelScale | None = None  # None: the outputs are the values (no scaling)

    def fitted(self, labels, width, reduce):
        return self._scaled(LabelScale.fit(labels(), width, reduce))

    def state(self):
        return None if self.scale is None else {"scale": self.scale.state()}

    def restored(self, state):
        return self if not state or "scale" not in state else self._scaled(LabelScale.from_state(state["scale"]))

    def _scaled(self, scale: LabelScale) -> RegressionTarget:
        out = copy.copy(self)  # a plugin's subclass stays itself
        out.scale = scale
        return out

    def units(self, outputs):
        return outputs if self.scale is None else self.scale.units(outputs)

    def loss(self, outputs, y, name):
        y = y.reshape(outputs.shape)
        out, values = _known(outputs, y if self.scale is None else self.scale.standard(y.float()))
        fn = {"mse": F.mse_loss, "l1": F.l1_loss, "huber": F.huber_loss}[name]
        return fn(out, values, reduction="sum"), values.new_tensor(values.numel())

    def running(self, width, device):
        return torch.zeros(3, dtype=torch.float64, device=device)  # |error|, error², labelled values

    def add_running(self, sums, outputs, y):
        out, values = _known(self.units(outputs.detach().float()), y)
        err = (out - values).double()
        sums += torch.stack([err.abs().sum(), err.square().sum(), sums.new_tensor(values.numel())])

    def running_metrics(self, sums, prefix):
        absolute, squared, total = sums.tolist()  # over no labelled value the figures are absent, never 0
        if not total:
            return {f"{prefix}_mae": None, f"{prefix}_rmse": None}
        return {f"{prefix}_mae": absolute / total, f"{prefix}_rmse": (squared / total) ** 0.5}

    def labelled(self, y):
        return _present(y)

    def scores(self, width):
        return RegressionScores(width, self.scale.units if self.scale is not None else None)

    def derived(self, items, width):
        if self.scale is None:
            return {}
        return {"logits": (lambda z: self.scale.units(z.float()), torch.float32, (items, width))}


BUILTIN_TARGETS = (ClassTarget(), MultilabelTarget(), RegressionTarget())


@hookimpl
def register_tasks(register):
    for each in (*BUILTIN_FAMILIES, *BUILTIN_TARGETS):
        register(each)
