"""A dataset as a run opens it: its record together with what it was opened for.

Opening a dataset is one contract (:func:`gnnbridge.core.app.preflight.open_dataset`), as
GraphBolt's ``Dataset`` is one object: what a caller needs to know of the opened data (the task
family it was read for, the target and the form its labels were read in, the machine's part
when a partitioned folder was opened) is a declared field here, not a probe of the record
(``getattr(data, "partition", None)``) or a context variable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gnnbridge.core.records.reading import Reading


@dataclass(frozen=True)
class Dataset:
    """An opened dataset.

    :param record: the task's record (``GraphData``, ``GraphCollection`` or ``HeteroGraphData``),
        checked to suit the task.
    :param family: the task family it was read for (``config.task``: ``node``, ``link`` ...).
    :param target: what each item is predicted as (``config.target``: ``class``, ``regression`` ...).
    :param reading: how it was read (:class:`~gnnbridge.core.records.reading.Reading`: the form
        its labels were read in, whether they were optional ...).
    :param partition: this machine's part of a partitioned folder (its ``Partition``), or None
        for a graph whole on every machine.
    """

    record: Any
    family: str
    target: str
    reading: Reading
    partition: Any = None

    @property
    def label_form(self) -> str:
        """The form its labels were read in (:data:`~gnnbridge.core.records.labels.FORMS`)."""
        return self.reading.form
