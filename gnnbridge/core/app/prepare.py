"""``gnnbridge prepare`` and ``gnnbridge partition`` as core runs them: the command parses and
prints, this module picks the dataset source through the one registry
(:mod:`gnnbridge.core.plugins.sources`) and runs its prepare, or cuts a prepared folder.

A source's prepare removes what it wrote when it fails or is stopped (the built-in ones say so
through :func:`~gnnbridge.core.runtime.launcher.undone_on_stop`, as :func:`partition` does).
"""

from __future__ import annotations

import os
from pathlib import Path

from gnnbridge.core.errors import ConfigError, DataFileNotFoundError
from gnnbridge.core.plugins.sources import dataset_sources
from gnnbridge.core.runtime.launcher import undone_on_stop


def prepare(
    source: str, out: str | os.PathLike | None = None, dtype: str = "float32", progress: bool = True, **options
) -> dict:
    """Prepare ``source`` (a folder of ``.npy`` files, an ``.npz`` file, a dataset name, tables,
    or any kind a plugin registered) with the prepare of the first source that takes it.

    :param options: the source's own options (tables: ``label``, ``schema``, ``target``,
        ``on_dangling``, ``like``); ``None`` values count as not given. An option the chosen
        source does not take is refused in one line naming the kinds that take it.
    :returns: prepare's result (:func:`gnnbridge.core.storage.prepare.describe` prints it)."""
    given = {key: value for key, value in options.items() if value is not None}
    chosen = dataset_sources.source_for(os.fspath(source))
    _check_options(chosen, os.fspath(source), given)
    if chosen.prepare is None:
        raise ConfigError(f"{source!r} is {chosen.describe}, which needs no prepare; train with --dataset {source}.")
    return chosen.prepare(os.fspath(source), out, dtype, progress, **given)


def _check_options(chosen, source: str, given: dict) -> None:
    extra = [key for key in given if key not in chosen.options]
    if not extra:
        return
    flags = ", ".join("--" + key.replace("_", "-") for key in extra)
    takers = [s.describe for s in dataset_sources.sources() if set(extra) <= set(s.options)]
    fix = "give " + "; ".join(takers) if takers else "no installed source takes them"
    if not Path(source).exists():  # not of the kind that takes them: no other kind can be named either
        raise DataFileNotFoundError(f"{flags}: {source!r} does not exist; {fix}.")
    raise ConfigError(f"{flags}: {source!r} is {chosen.describe}, which takes no {flags}; {fix}.")


def partition(
    path: str | os.PathLike, parts: int, method: str = "auto", seed: int = 0, progress: bool = True, reuse: bool = False
) -> dict:
    """:func:`~gnnbridge.core.storage.partition.partition` as the command runs it: a stop signal
    undoes what it wrote, and says so."""
    from gnnbridge.core.storage.partition import partition as cut

    with undone_on_stop("the parts this partition wrote were removed", f"gnnbridge partition {path} --parts {parts}"):
        return cut(path, parts, method, seed, progress, reuse=reuse)
