"""What a task family is, as a contract: the config's ``task`` names one.

A family decides what the items of a task are and how a run handles them: the record a dataset
becomes (and the checks it must pass first), how a run samples its items, the width of a batch's
outputs, which evaluator scores them each epoch and at the end, and the order ``predict`` writes
its rows in. What each item is predicted *as* (the loss, the metrics, the monitor) is the
target's business (:mod:`.targets`), which any family takes unless it names the ones it takes.

Every family runs as one of the built-in *kinds* (:class:`~gnnbridge.core.config.Task`: node,
graph, link, edge): the kind picks the record type, the model builders and the backends that can
run it, so a plugin's family reuses all of those and changes only what it overrides. The
built-in families (``gnnbridge.core.inference.families``) register through the
``register_tasks`` hook exactly as a plugin's does; a plugin subclasses one of them (exported by
``gnnbridge.core.interfaces``) rather than this class, which declares what assembly asks of them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from gnnbridge.core.config import Task


class TaskFamily(ABC):
    """One family of tasks (see the module docstring); ``parts`` is a run's assembled parts
    (``gnnbridge.core.inference.assembly.RunParts``: config, data, backend, model, sampler ...)."""

    name: str = ""  # the value of the config's ``task``
    description: str = ""
    kind: Task = Task.NODE  # the built-in shape it runs as (records, models, backends)
    targets: tuple[str, ...] = ()  # the ``target`` values it takes; empty: any registered target
    # the form the dataset's own labels are read in (core/records/labels.py); "": the target's. A
    # family whose record() makes the targets itself names the form of the datasets it reads.
    labels: str = ""
    # whether it reads the dataset's node labels (``y``); False: a homogeneous graph without them
    # trains it (link prediction reads features and edges alone, an edge task its edges' labels)
    node_labels: bool = True
    per_graph: bool = False  # the model returns a row per graph (ModelCall checks it)
    layered: bool = True  # evaluation may run layer-wise or on every neighbour (not whole graphs)

    def record(self, data: Any, config: Any) -> Any:
        """The task's record made from the kind's (the built-in families return it as it is). Runs
        on every rank and in preflight, so it must give the same record from the same data."""
        return data

    def check(self, data: Any, config: Any) -> None:
        """Refuse ``data`` (the family's record) in one :class:`~gnnbridge.core.errors.ConfigError`
        line before training starts; nothing by default."""
        return None

    @abstractmethod
    def output_width(self, parts: Any) -> int:
        """The columns of a training batch's outputs."""

    @abstractmethod
    def sampler(self, parts: Any, every_neighbour: bool = False) -> Any:
        """The training sampler, or (``every_neighbour``) one taking all neighbours at every hop."""

    @abstractmethod
    def through(self, parts: Any, sampler: Any) -> Any:
        """An evaluator scoring the items through ``sampler``."""

    @abstractmethod
    def layerwise(self, parts: Any) -> Any:
        """The exact layer-wise evaluator."""

    @abstractmethod
    def can_run_layerwise(self, parts: Any) -> bool:
        """Whether :meth:`layerwise` can score this run's model."""

    def in_given_order(self, parts: Any, rows: Any) -> Any:
        """``predict``'s rows in the order a user reads them (by default as they come)."""
        return rows
