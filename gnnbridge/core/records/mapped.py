"""Records that are views of files travel as "open it yourself", never as their tensors.

A record opened from files (a prepared folder, whose arrays are ``np.load(mmap_mode="r")``) has
tensors whose pages belong to the OS page cache, which every process of a machine that maps the
same files already shares. Copying them into ``/dev/shm`` for the ranks, as an in-memory record
is shared, would hold the dataset in RAM twice: exactly what mapping avoids. So such a record
carries ``mapped_from = (opener, args)``, a picklable function and its arguments that give the
record again in any process, and then:

* ``share_memory_()`` leaves it as it is (its pages are shared already, through the page cache);
* pickling it (plain ``pickle``, or ``torch.multiprocessing``'s ForkingPickler when the launcher
  hands it to the ranks it spawns) writes only ``(opener, args)``; unpickling calls
  ``opener(*args)`` in the receiving process, which maps the same files (:func:`reopen`);
* :func:`~gnnbridge.core.runtime.sharing.node_shared` (torchrun, SLURM) publishes that small
  pickle instead of exporting tensors: each rank opens the files itself, and each machine opens
  its own (a shared file system, or its own copy, which its opener checks).

A record derived from a mapped one (``for_task`` builds a link or heterogeneous task's topology
from the opened source) is new in-memory topology around the source's mapped features; it keeps
a ``mapped_from`` that reopens the source and derives again with the same arguments (the same
seed gives the same record), so its features stay mapped in every rank and only the topology is
rebuilt there. Records without ``mapped_from`` (``None``, the default) pickle and share as before.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gnnbridge.core import environ


class Mapped:
    """Mixin of the records: ``mapped_from`` (class default ``None``; an opener sets it on the
    record it returns) decides whether the record travels as its tensors or as its opener."""

    mapped_from: tuple[Callable[..., Any], tuple] | None = None
    # Declared, not probed: a machine's part of a partitioned folder (the opener of
    # :mod:`gnnbridge.core.storage.parts` sets its ``Partition`` / ``TypedPartition``); every
    # other record is whole, ``None``. Callers read ``data.partition``.
    partition: Any = None

    @property
    def is_mapped(self) -> bool:
        return self.mapped_from is not None

    def __reduce_ex__(self, protocol):
        if self.mapped_from is None:
            return super().__reduce_ex__(protocol)
        opener, args = self.mapped_from
        return reopen, (opener, tuple(args))

    def __copy__(self):
        """A shallow copy shares the tensors (pickling would reopen the files instead)."""
        copied = object.__new__(type(self))
        copied.__dict__.update(self.__dict__)
        return copied


# Set by the launcher for the ranks it spawns (see :func:`reopen`); each rank drops it in
# :func:`opened`, so processes a rank starts itself get records, not placeholders.
DEFER_VAR = environ.RANKS_OPEN_DATA


def reopen(opener: Callable[..., Any], args: tuple):
    """``opener(*args)``: what a mapped record unpickles to. In a rank that gnnbridge's launcher
    is starting (multiprocessing's spawn unpickles its arguments before any of its own code runs,
    where a refusal would end it with a traceback and a bare exit code) the opening is deferred
    to :func:`opened`, which the rank calls once it has joined the job, so that a refusal (a copy
    of the folder that differs from its manifest) is that rank's failure, reported in one line.
    The stdlib's own proxies look at the same flag (``managers.RebuildProxy``)."""
    if getattr(multiprocessing.current_process(), "_inheriting", False) and os.environ.get(DEFER_VAR):
        return Unopened(opener, args)
    return opener(*args)


@dataclass(frozen=True)
class Unopened:
    """A mapped record that reached a rank still being started; :func:`opened` opens it."""

    opener: Callable[..., Any]
    args: tuple

    def __reduce__(self):
        return reopen, (self.opener, self.args)


def opened(values: tuple) -> tuple:
    """``values`` (a rank's worker arguments) with every :class:`Unopened` record opened; from
    here on records unpickled in this process, or in processes it starts, open at once."""
    os.environ.pop(DEFER_VAR, None)
    return tuple(v.opener(*v.args) if isinstance(v, Unopened) else v for v in values)
