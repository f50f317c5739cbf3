"""What a dataset plugin's loader is told: ``loader(config, seed)`` receives a
:class:`LoaderConfig`, the run's dataset section and, as declared fields, what core knows of the
run that the section does not say.

A loader's signature is public and fixed, so what it needs beyond the section reaches it on the
object it already takes: ``config.label_form`` is the form the run's target reads labels in
(``class`` int64, ``multilabel`` 0/1 columns, ``regression`` floats; see
:mod:`gnnbridge.core.records.labels`), set by core before the call. A loader that reads a
dataset of one form only refuses another there, in one line, before reading a file.

It is a subclass, not a field of :class:`~gnnbridge.core.config.DatasetConfig`: the form follows
from the task and the target, so a user never sets it, and a run's saved config never holds it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gnnbridge.core.config import DatasetConfig
from gnnbridge.core.records.labels import FORMS, current_form


@dataclass
class LoaderConfig(DatasetConfig):
    """The dataset section as a loader receives it.

    :param label_form: the form the run reads labels in, one of
        :data:`~gnnbridge.core.records.labels.FORMS` (the task family's, else the target's).
    """

    label_form: str = "class"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.label_form not in FORMS:
            raise ValueError(f"label_form={self.label_form!r}; one of {', '.join(FORMS)}")

    @classmethod
    def of(cls, section: DatasetConfig, label_form: str) -> LoaderConfig:
        """``section``'s values, told ``label_form`` (a copy: the run's section is left as it is)."""
        values = {f.name: getattr(section, f.name) for f in dataclasses.fields(DatasetConfig)}
        return cls(**values, label_form=label_form)

    def settle(self, section: DatasetConfig) -> None:
        """What the loader set on its section (``digest``, which a library's class pins) back on
        the run's ``section``, which the run records."""
        for f in dataclasses.fields(DatasetConfig):
            setattr(section, f.name, getattr(self, f.name))


def label_form_of(config: DatasetConfig) -> str:
    """The form a loader reads labels in: its :class:`LoaderConfig`'s, or, for a plain section
    (a script calling a built-in loader itself, as ``benchmarks/`` do), the form in effect
    (``class`` unless a caller chose another), so the loaders stay callable as they were."""
    return config.label_form if isinstance(config, LoaderConfig) else current_form()
