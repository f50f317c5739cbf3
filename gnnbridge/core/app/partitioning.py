"""``gnnbridge partition --task link``: a link task cut into a partitioned folder's parts.

The cut needs the task's whole record (its split and negatives are drawn over the whole graph,
see :mod:`gnnbridge.core.storage.linkparts`), which is what a run of the folder whole builds
from its config: so the command resolves a config as ``train`` does (an experiment, ``--set``)
and builds the record through the same path, then writes its parts. The storage room cannot
do this itself: building a task record is the app's (it loads the dataset through its plugin).
"""

from __future__ import annotations

import os

from gnnbridge.core.app.preflight import task_record
from gnnbridge.core.app.resolve import resolve_config
from gnnbridge.core.storage.linkparts import cut_link_task, link_settings


def cut_link(folder: str | os.PathLike, parts: int, experiment=None, overrides=()) -> dict:
    """Cut the link task that ``experiment`` and ``overrides`` describe (on ``folder`` whole) into
    ``folder``'s partitioning into ``parts``; see :func:`~gnnbridge.core.storage.linkparts.cut_link_task`."""
    config = resolve_config(experiment, dataset=os.fspath(folder), overrides=("task=link", *overrides))
    config.dataset.partitions = 0
    return cut_link_task(folder, parts, task_record(config), link_settings(config))
