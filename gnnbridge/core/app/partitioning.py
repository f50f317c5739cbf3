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
from gnnbridge.core.config import ExperimentConfig
from gnnbridge.core.storage.linkparts import cut_link_task, link_settings


def link_config(folder: str | os.PathLike, experiment=None, overrides=()) -> ExperimentConfig:
    """The config of the link task that ``experiment`` and ``overrides`` describe on ``folder``
    whole, checked (a bad key, a bad value) before anything is written."""
    config = resolve_config(experiment, dataset=os.fspath(folder), overrides=(*overrides, "task=link"))
    config.dataset.partitions = 0
    return config


def cut_link(folder: str | os.PathLike, parts: int, config: ExperimentConfig | None = None, **given) -> dict:
    """Cut the link task of ``config`` (:func:`link_config`; or made here from ``given``: its
    ``experiment`` and ``overrides``) into ``folder``'s partitioning into ``parts``; see
    :func:`~gnnbridge.core.storage.linkparts.cut_link_task`."""
    config = config if config is not None else link_config(folder, **given)
    return cut_link_task(folder, parts, task_record(config), link_settings(config))
