"""The forms a record's labels ``y`` take, and the checks each form gets.

A task predicts one of three kinds of target (the config's ``target``, a task object of
:mod:`gnnbridge.core.contracts.targets` each), and a record's ``y`` is laid out by its form:

    class       int64 [items]: one class in ``0 .. C-1``, every class present; width C
    multilabel  [items, L] of 0 and 1 (int64 or float32; NaN marks a missing label, as
                ogbg-molpcba has); width L; stored as float32
    regression  float32 [items] or [items, T] (NaN marks a missing value); width T (1 for [items])

The width is what the record calls ``num_classes``: the model's output columns.

Which form a graph's labels take is passed down as an argument: a dataset plugin's loader reads
it from its config (``config.label_form``, :mod:`gnnbridge.core.contracts.loading`), the
records take it as ``labels=`` and the readers of the format, of prepared folders and parts and
the task builders as ``form``. The context (:func:`label_form`, :func:`current_form`) remains
as what those arguments default to, for code that does not pass one: a plugin's loader or graph
reader written before ``config.label_form``, which builds records without ``labels=``. Records
built outside a :func:`label_form` block, and without ``labels=``, read their labels as classes.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch

from gnnbridge.core.errors import DataError

FORMS = ("class", "multilabel", "regression")
_FORM: contextvars.ContextVar[str] = contextvars.ContextVar("label_form", default="class")


# The class count of the model that will score a graph without labels, while ``predict`` opens
# one (None: labels are required, as training and evaluation need them). A context, not a
# parameter: the graph passes through a dataset plugin's loader, whose signature is public.
_UNLABELLED_CLASSES: contextvars.ContextVar[int | None] = contextvars.ContextVar("unlabelled_classes", default=None)


# Whether a library's graph object is read for an edge task, whose labels (``edge_label`` ...)
# its readers then take from the edges; read for another task, the edges' labels are left alone
# (they might not even suit that task's label form). A context for the reason above.
_EDGE_LABELS: contextvars.ContextVar[bool] = contextvars.ContextVar("edge_labels", default=False)


@contextlib.contextmanager
def reading_edge_labels(wanted: bool) -> Iterator[None]:
    """Inside: the graph readers take an edge task's labels and splits from the edges."""
    with scoped(_EDGE_LABELS, wanted):
        yield


def edge_labels_wanted() -> bool:
    return _EDGE_LABELS.get()


# Whether the run's task family reads a graph's node labels (its declared ``node_labels``): link
# prediction reads features and edges alone and an edge task its edges' labels, so a homogeneous
# graph without ``y`` trains them; node classification needs them. A context for the reason above.
_NODE_LABELS: contextvars.ContextVar[bool] = contextvars.ContextVar("node_labels", default=True)


@contextlib.contextmanager
def reading_node_labels(wanted: bool) -> Iterator[None]:
    """Inside: a homogeneous graph must bring node labels (``y``) only if ``wanted`` (its task
    family reads them); without, it opens as a record of placeholder labels (``labelled`` False)."""
    with scoped(_NODE_LABELS, wanted):
        yield


def node_labels_wanted() -> bool:
    return _NODE_LABELS.get()


def node_labels_needed() -> bool:
    """Whether a homogeneous graph must bring node labels here: its task family reads them
    (:func:`reading_node_labels`) and they are not optional (:func:`labels_optional`, predict's)."""
    return node_labels_wanted() and not labels_are_optional()


# Whether the splits a graph's arrays hold are read (``dataset.splits: given``) or left out so that
# gnnbridge draws its seeded split (``drawn``: a library's class whose masks cannot be completed,
# such as KarateClub's lone train_mask). A context for the reason above.
_SPLITS: contextvars.ContextVar[bool] = contextvars.ContextVar("splits", default=True)


@contextlib.contextmanager
def reading_splits(given: bool) -> Iterator[None]:
    """Inside: the graph readers and the format take a graph's own splits (``given``) or none."""
    with scoped(_SPLITS, given):
        yield


def splits_wanted() -> bool:
    return _SPLITS.get()


# The edge type whose edges an edge task's model scores ("src,rel,dst"), while predict opens a
# graph that may not label them (see labels_optional).
_UNLABELLED_EDGES: contextvars.ContextVar[str | None] = contextvars.ContextVar("unlabelled_edges", default=None)


@contextlib.contextmanager
def labels_optional(num_classes: int | None, target_edge: str | None = None) -> Iterator[None]:
    """Inside: a homogeneous graph for node classification may come without labels (``y``); it
    opens as a record of ``num_classes`` classes, all-zero placeholder labels and empty splits,
    marked ``labelled = False`` (what ``predict`` on a new graph needs, and nothing else may
    read its labels). ``num_classes`` None: labels stay required. Read for an edge task
    (:func:`reading_edge_labels`), a graph may come without edge labels the same way: those of
    ``target_edge`` (a typed graph's, ``src,rel,dst``) are then placeholders (:func:`unlabelled_edges`)."""
    with scoped(_UNLABELLED_CLASSES, num_classes), scoped(_UNLABELLED_EDGES, target_edge):
        yield


def labels_are_optional() -> bool:
    """Whether a graph reader may leave out a graph's node labels here (see :func:`labels_optional`)."""
    return _UNLABELLED_CLASSES.get() is not None


def unlabelled_width() -> int | None:
    """The model's output width while labels are optional (see :func:`labels_optional`)."""
    return _UNLABELLED_CLASSES.get()


def unlabelled_target() -> str | None:
    """The edge type ("src,rel,dst") an edge task's model scores while labels are optional."""
    return _UNLABELLED_EDGES.get()


@contextlib.contextmanager
def label_form(form: str) -> Iterator[None]:
    """Inside: records read ``y`` in ``form`` (one of :data:`FORMS`)."""
    if form not in FORMS:
        raise ValueError(f"label form {form!r}; one of {', '.join(FORMS)}")
    with scoped(_FORM, form):
        yield


@contextlib.contextmanager
def scoped(var: contextvars.ContextVar, value) -> Iterator[None]:
    """``var`` holds ``value`` inside the block (what a reader is told without a parameter)."""
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


def current_form() -> str:
    return _FORM.get()


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
