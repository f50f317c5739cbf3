"""What a graph is read for: one declared value handed to every reader of a dataset.

Which labels a graph's readers take, and how, follows from the run, not from the data: the form
of ``y`` (the task family's, else the target's), whether an edge task reads the edges' labels,
whether the family reads node labels at all (link prediction does not), whether the data's own
splits are kept (``dataset.splits: drawn`` leaves them out), and whether the labels may be
absent (``predict`` on a new graph, with the model's output width for the placeholders).

These travel as one frozen :class:`Reading`, passed as an argument from where core opens a
dataset (:func:`gnnbridge.core.app.objects.reading_of`) down to the loaders (on
:class:`~gnnbridge.core.contracts.loading.LoaderConfig`), the format's and folders' readers,
the library objects' graph readers and the task builders. It used to be five context
variables; an argument is what a reader in another process (a rank reopening a memory-mapped
record) is handed too, so it is part of ``mapped_from`` and nothing depends on where a call
happens to run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gnnbridge.core.records.labels import FORMS


@dataclass(frozen=True)
class Reading:
    """How a graph's labels and splits are read.

    :param form: the form ``y`` is read in, one of :data:`~gnnbridge.core.records.labels.FORMS`.
    :param edge_labels: an edge task reads it: its labels and splits are the edges' (``edge_label``);
        read for another task, the edges' labels are left alone (they may not suit its form).
    :param node_labels: the task family reads node labels (its declared ``node_labels``); without,
        a homogeneous graph without ``y`` opens with placeholder labels (``labelled`` False).
    :param splits: the data's own splits are read (``dataset.splits: given``); False leaves them
        out so gnnbridge draws its seeded split.
    :param unlabelled_classes: the model's output width where labels may be absent (``predict``
        on a new graph: placeholders of this width); None: labels are required.
    :param unlabelled_edge: the edge type ("src,rel,dst") an edge task's model scores, where its
        edges may come without labels (with ``unlabelled_classes``).
    """

    form: str = "class"
    edge_labels: bool = False
    node_labels: bool = True
    splits: bool = True
    unlabelled_classes: int | None = None
    unlabelled_edge: str | None = None

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ValueError(f"label form {self.form!r}; one of {', '.join(FORMS)}")

    @property
    def labels_optional(self) -> bool:
        """Whether a graph may come without labels (``predict``'s)."""
        return self.unlabelled_classes is not None

    @property
    def node_labels_needed(self) -> bool:
        """Whether a homogeneous graph must bring node labels: its family reads them and they are
        not optional."""
        return self.node_labels and not self.labels_optional

    def unlabelled(self, num_classes: int | None, target_edge: str | None = None) -> Reading:
        """This reading, the labels optional for a model of ``num_classes`` outputs (None: required)."""
        return dataclasses.replace(self, unlabelled_classes=num_classes, unlabelled_edge=target_edge)

    def of_form(self, form: str) -> Reading:
        return dataclasses.replace(self, form=form)


CLASSES = Reading()


def as_reading(reading: Reading | str | None) -> Reading:
    """``reading`` as a :class:`Reading`: a form alone (``config.label_form``, which a loader may
    pass as the form core's readers used to take) is read otherwise as :data:`CLASSES` is; None
    is :data:`CLASSES`."""
    if reading is None:
        return CLASSES
    return Reading(form=reading) if isinstance(reading, str) else reading
