"""What a dataset plugin's loader is told: ``loader(config, seed)`` receives a
:class:`LoaderConfig`, the run's dataset section and, as a declared field, what core knows of the
run that the section does not say.

A loader's signature is public and fixed, so what it needs beyond the section reaches it on the
object it already takes: ``config.reading`` (a :class:`~gnnbridge.core.records.reading.Reading`)
says how the run reads the graph, and ``config.label_form`` is its form of labels (``class``
int64, ``multilabel`` 0/1 columns, ``regression`` floats; see
:mod:`gnnbridge.core.records.labels`), set by core before the call. A loader that reads a
dataset of one form only refuses another there, in one line, before reading a file; one that
hands arrays to core's readers (``graph_from_arrays``, ``open_prepared``) passes the reading on.

It is a subclass, not a field of :class:`~gnnbridge.core.config.DatasetConfig`: the reading
follows from the task and the target, so a user never sets it, and a run's saved config never
holds it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from gnnbridge.core.config import DatasetConfig
from gnnbridge.core.records.reading import CLASSES, Reading, as_reading


@dataclass
class LoaderConfig(DatasetConfig):
    """The dataset section as a loader receives it.

    :param reading: how the run reads the graph (the labels' form, edge or node labels, the
        data's own splits, whether labels may be absent).
    """

    reading: Reading = field(default=CLASSES)

    @property
    def label_form(self) -> str:
        """The form the run reads labels in (the task family's, else the target's)."""
        return self.reading.form

    @classmethod
    def of(cls, section: DatasetConfig, reading: Reading | str) -> LoaderConfig:
        """``section``'s values, told ``reading`` (or a form alone; a copy: the run's section is
        left as it is)."""
        values = {f.name: getattr(section, f.name) for f in dataclasses.fields(DatasetConfig)}
        return cls(**values, reading=as_reading(reading))

    def settle(self, section: DatasetConfig) -> None:
        """What the loader set on its section (``digest``, which a library's class pins) back on
        the run's ``section``, which the run records."""
        for f in dataclasses.fields(DatasetConfig):
            setattr(section, f.name, getattr(self, f.name))


def reading_of(config: DatasetConfig) -> Reading:
    """How a loader reads: its :class:`LoaderConfig`'s reading, or, for a plain section (a script
    calling a built-in loader itself, as ``benchmarks/`` do), class labels read as the data
    gives them, so the loaders stay callable as they were."""
    return config.reading if isinstance(config, LoaderConfig) else CLASSES


def label_form_of(config: DatasetConfig) -> str:
    """The form a loader reads labels in (see :func:`reading_of`)."""
    return reading_of(config).form
