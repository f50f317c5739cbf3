"""What the ranks' fork server imports once, so that no rank imports it again.

Ranks start by the ``forkserver`` method (see :func:`~gnnbridge.core.runtime.launcher.fork_server`):
a fresh process, started by exec like a spawned rank (so it is as safe with CUDA and OpenMP,
which a fork of the launcher would not be), imports torch, the backend's library and gnnbridge
once, and each rank is a fork of it. A spawned rank spends most of its start importing: torch
with PyG is about 6 s of CPU, paid by every rank of every attempt; on a busy machine that is
most of a short job. Forked ranks share the imported pages, too.

The launcher names the modules in :data:`~gnnbridge.core.environ.PRELOAD`: the backend's
:meth:`~gnnbridge.core.contracts.interfaces.Backend.rank_modules` (``module`` or
``module:function``, a function that imports the library the way the backend must) and the
``gnnbridge`` modules it has itself imported by then; the server imports each here. One that
fails is skipped: the rank that needs it imports it again and reports the failure as a spawned
rank would. Importing this module anywhere else does nothing (the launcher that forks its
server from itself imports the same entries with :func:`import_entry`).
"""

from __future__ import annotations

import importlib
import os

from gnnbridge.core import environ


def import_entry(name: str) -> None:
    """Import one entry, ``module`` or ``module:function`` (then call the function)."""
    module, _, function = name.partition(":")
    imported = importlib.import_module(module)
    if function:
        getattr(imported, function)()


def _import_named() -> None:
    for name in filter(None, os.environ.pop(environ.PRELOAD, "").split(",")):
        try:
            import_entry(name)
        except BaseException:  # noqa: BLE001, S112 - the rank imports it again and says why it failed
            continue


_import_named()
