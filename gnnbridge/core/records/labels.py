"""The forms a record's labels ``y`` take, and the checks each form gets.

A task predicts one of three kinds of target (the config's ``target``, a task object of
:mod:`gnnbridge.core.contracts.targets` each), and a record's ``y`` is laid out by its form:

    class       int64 [items]: one class in ``0 .. C-1``, every class present; width C
    multilabel  [items, L] of 0 and 1 (int64 or float32; NaN marks a missing label, as
                ogbg-molpcba has); width L; stored as float32
    regression  float32 [items] or [items, T] (NaN marks a missing value); width T (1 for [items])

The width is what the record calls ``num_classes``: the model's output columns.

Which form a graph's labels take is declared, never guessed from where a call runs: a dataset's
readers are told it on a :class:`~gnnbridge.core.records.reading.Reading` (a loader on its
``config.reading``), the records take it as ``labels=``. A record built without ``labels=`` (a
plugin's loader written before ``config.label_form``) takes the form its ``y`` shows
(:func:`inferred`), which core settles to the run's once the loader returns (:func:`settled`).
"""

from __future__ import annotations

import torch

from gnnbridge.core.errors import DataError

FORMS = ("class", "multilabel", "regression")


def inferred(y: object) -> str:
    """The form of labels ``y`` given without one (``labels=`` left out): classes for int64 labels
    of one dimension (or none yet), 0/1 columns of integers or bools multilabel, floats
    regression (whose float32 storage multilabel shares); :func:`settled` then makes it the
    run's form or refuses it in one line."""
    if not isinstance(y, torch.Tensor) or y.is_floating_point():
        return "class" if not isinstance(y, torch.Tensor) else "regression"
    return "multilabel" if y.dim() == 2 else "class"


def settled(record, form: str, item: str) -> None:
    """``record`` (a record with ``labels`` and ``y``, one row per ``item``) read in the run's
    ``form``: a record of float targets becomes one of the other float form (regression and
    multilabel store alike; multilabel's 0/1 checked); labels of another layout are refused with
    the line naming the target that reads them."""
    given = getattr(record, "labels", form) or form
    y = getattr(record, "y", None)
    if given == form or not isinstance(y, torch.Tensor) or not getattr(record, "labelled", True):
        return
    if given == "class":
        raise classes_under(form, item, int(record.num_classes))
    check_values(y, form, int(record.num_classes), int(y.shape[0]), item)
    record.labels = form


def accepted(form: str) -> tuple[tuple[torch.dtype, ...], tuple[int, ...]]:
    """The dtypes and dimension counts ``y`` may have in ``form``, as given (before :func:`stored`)."""
    if form == "class":
        return (torch.int64,), (1,)
    if form == "multilabel":
        return (torch.float32, torch.int64, torch.bool), (2,)
    return (torch.float32, torch.float64), (1, 2)


def described(form: str) -> str:
    """How ``y`` looks in ``form``, for messages."""
    return {
        "class": "int64 [items], a class per item",
        "multilabel": "[items, L] of 0/1 (int64 or float32, NaN for a missing label)",
        "regression": "float32 [items] or [items, T] (NaN for a missing value)",
    }[form]


def classes_under(form: str, item: str, classes: int) -> DataError:
    """The line for a dataset of classes (int64, one per ``item``) trained with another target."""
    return DataError(
        f"y holds a class per {item} ({classes} classes), but target={form} reads {described(form)}; "
        "this dataset trains with target=class."
    )


def stored(y: torch.Tensor, form: str) -> torch.Tensor:
    """``y`` as a record keeps it: class labels as they are, every other form as float32."""
    return y if form == "class" or y.dtype == torch.float32 else y.to(torch.float32)


def check_form(y: object, form: str, name: str = "y") -> None:
    """``y`` has a dtype and dimensions ``form`` takes; the line names what was found and, where
    the labels look like another form's, the ``target`` that reads them."""
    if not isinstance(y, torch.Tensor):
        raise DataError(f"{name} must be a tensor, got {type(y).__name__}.")
    dtypes, dims = accepted(form)
    if y.dtype in dtypes and y.dim() in dims:
        return
    found = f"{str(y.dtype).replace('torch.', '')} {list(y.shape)}"
    hint = ""
    if form == "class" and y.is_floating_point():
        hint = " (float labels are targets of regression or multilabel: set target=regression or target=multilabel)"
    elif form == "class" and y.dim() == 2:
        hint = " (a 0/1 column per label is target=multilabel)"
    raise DataError(f"{name} is {found}; target={form} reads {described(form)}{hint}.")


def width(y: torch.Tensor, form: str, name: str = "y") -> int:
    """The model's output columns for labels ``y`` of ``form`` (checked first; ``name``: what
    the messages call ``y``, the array the user gave)."""
    check_form(y, form, name)
    if form == "class":
        return infer_num_classes(y, name)
    return 1 if y.dim() == 1 else int(y.shape[1])


def checked_width(y: torch.Tensor, form: str, name: str, item: str) -> int:
    """:func:`width` of ``y``, a label row per ``item``, its values checked too (:func:`check_values`)."""
    columns = width(y, form, name)
    check_values(y, form, columns, int(y.shape[0]), item, name)
    return columns


def placeholder(items: int, num_classes: int, form: str) -> torch.Tensor:
    """Labels of a graph that has none (what ``predict`` scores, or a task that reads none
    trains on): zeros of ``form``'s layout."""
    if form == "class":
        return torch.zeros(items, dtype=torch.int64)
    return torch.zeros(items, num_classes, dtype=torch.float32)


def infer_num_classes(y: torch.Tensor, name: str = "y") -> int:
    """The class count of labels that must be ``0 .. C-1``, every class present.

    Labels are refused rather than guessed at: 1-based labels would otherwise add an empty
    class 0 (and turn a binary task into a 3-class one without ROC-AUC), and one stray large
    label would size every confusion matrix by it.
    """
    check_form(y, "class", name)
    if y.numel() == 0:
        raise DataError(f"{name} is empty; give one label per node (or graph, or edge).")
    if int(y.min()) < 0:
        raise DataError(f"{name} holds the label {int(y.min())}; labels must be 0 .. C-1.")
    present = torch.unique(y)
    if present.numel() < 2:
        raise DataError(f"{name} holds one class only ({int(present[0])}); classification needs at least 2 classes.")
    num_classes = int(y.max()) + 1
    if present.numel() != num_classes:
        absent = first_absent(present, 5)
        shown = ", ".join(map(str, absent)) + (" ..." if num_classes - present.numel() > len(absent) else "")
        raise DataError(
            f"{name} has labels up to {num_classes - 1} but no {shown}; labels must be 0 .. C-1 with every class "
            "present (renumber them, e.g. numpy.unique(y, return_inverse=True)[1])."
        )
    return num_classes


def first_absent(present: torch.Tensor, k: int) -> list[int]:
    """The first ``k`` labels from 0 up missing from the sorted, unique ``present``: work bounded by
    the labels there are, not by the largest (one label of 10**9 must not build a billion-set)."""
    starts = torch.cat([present.new_zeros(1), present + 1])  # each gap starts after a present label
    ends = torch.cat([present, present.new_full((1,), present[-1] + 1)])  # ... and ends before the next
    absent: list[int] = []
    for lo, hi in zip(starts.tolist(), ends.tolist()):
        absent.extend(range(lo, min(hi, lo + k - len(absent))))
        if len(absent) >= k:
            break
    return absent


def check_values(y: torch.Tensor, form: str, num_classes: int, items: int, item: str, name: str = "y") -> None:
    """One row per item, and values ``form`` allows, for a record of ``num_classes`` columns
    (``name``: what the messages call ``y``)."""
    check_form(y, form, name)
    if y.shape[0] != items:
        raise DataError(f"{name} has {y.shape[0]} rows but there are {items} {item}s; give one label row per {item}.")
    if form == "class":
        return _check_classes(y, num_classes, name)
    columns = 1 if y.dim() == 1 else int(y.shape[1])
    if columns != num_classes or columns < 1:
        raise DataError(f"{name} has {columns} column(s) but the record says num_classes={num_classes}.")
    if torch.isinf(y).any():
        row = int(torch.isinf(y).reshape(items, -1).any(dim=1).nonzero()[0])
        raise DataError(f"{name} holds an infinite value (first at {item} {row}); a missing label is NaN.")
    if form == "multilabel":
        known = y[~torch.isnan(y)]
        if bool(((known != 0) & (known != 1)).any()):
            bad = float(known[(known != 0) & (known != 1)][0])
            raise DataError(f"{name} holds {bad:g}; multilabel targets are 0 or 1 (NaN for a missing label).")


def _check_classes(y: torch.Tensor, num_classes: int, name: str) -> None:
    if num_classes < 2:
        raise DataError(f"num_classes={num_classes}; classification needs at least 2 classes.")
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise DataError(
            f"{name} holds labels in [{int(y.min())}, {int(y.max())}] but num_classes={num_classes}; "
            "labels must be in [0, num_classes)."
        )


class LabelScale:
    """A regression record's values standardised per column: ``(y - mean) / std``, with the mean
    and the (population) standard deviation of each column over the training split's labelled
    values, as chemprop and scikit-learn's ``StandardScaler`` fit them. A model then learns values
    of unit scale whatever the labels' units (a share of 5 +- 2, a price of 300,000 +- 80,000, both
    at the default learning rate), and every figure a user reads is put back in the labels' units
    (:meth:`units`). A column without two distinct labelled values keeps its scale (std 1; mean 0
    where none is labelled). ``state()`` is what a checkpoint keeps of it (two float64 tensors)."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor):
        self.mean, self.std = mean.double().cpu(), std.double().cpu()
        self._on: dict[tuple[torch.device, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}

    @classmethod
    def fit(cls, y: torch.Tensor, width: int, reduce=lambda t: t) -> LabelScale:
        """The scale of labels ``y`` (``[items]`` or ``[items, width]``, NaN where missing): this
        process's share of them, summed over processes by ``reduce`` (an all-reduce; each process
        sums the same labels as its peers or its own, which gives the same mean either way). Two
        passes, so a mean large against the spread loses nothing to cancellation."""
        y = y.detach().reshape(-1, width).double().cpu()
        known = ~torch.isnan(y)
        values = torch.where(known, y, torch.zeros_like(y))
        sums = reduce(torch.stack([values.sum(0), known.sum(0).double()]))
        count = sums[1]
        mean = torch.where(count > 0, sums[0] / count.clamp(min=1), torch.zeros_like(count))
        spread = reduce(torch.where(known, (y - mean).square(), torch.zeros_like(y)).sum(0))
        std = (spread / count.clamp(min=1)).sqrt()
        usable = (count > 1) & torch.isfinite(std) & (std > 1e-12 * mean.abs().clamp(min=1.0))
        return cls(mean, torch.where(usable, std, torch.ones_like(std)))

    @classmethod
    def from_state(cls, state: dict) -> LabelScale:
        return cls(state["mean"], state["std"])

    def state(self) -> dict:
        return {"mean": self.mean.clone(), "std": self.std.clone()}

    def _like(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        key = (t.device, t.dtype)
        if key not in self._on:
            self._on[key] = (self.mean.to(t.device, t.dtype), self.std.to(t.device, t.dtype))
        return self._on[key]

    def standard(self, y: torch.Tensor) -> torch.Tensor:
        """Labels ``[items, width]`` in standard units (what the model learns to output)."""
        mean, std = self._like(y)
        return (y - mean) / std

    def units(self, z: torch.Tensor) -> torch.Tensor:
        """Model outputs ``[items, width]`` in the labels' units."""
        mean, std = self._like(z)
        return z * std + mean

    def __getstate__(self) -> dict:  # picklable (a model handed back holds one), without the device copies
        return {"mean": self.mean, "std": self.std}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["mean"], state["std"])
