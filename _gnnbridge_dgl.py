"""Makes a plain ``import dgl`` work on the torch gnnbridge pins (a DGL user's own script, a
notebook), installed with gnnbridge: ``gnnbridge-dgl.pth`` beside it in site-packages runs
:func:`install` when Python starts.

Why a start-up hook: PyPI's newest DGL (2.1.0) looks for a graphbolt library built for the
running torch and raises at import when there is none (see gnnbridge/backends/dgl/compat.py,
which points DGL at a stand-in). gnnbridge's own code imports DGL through that repair; a user's
``import dgl`` does not pass through gnnbridge, so the repair has to be waiting for it. Nothing
here runs at start-up but putting a finder on ``sys.meta_path``: it imports nothing and costs
microseconds. The first ``import dgl`` asks it, it applies gnnbridge's repair once (which only
sets ``DGL_LIBRARY_PATH`` and a folder of links in the user's cache) and steps aside; Python's
own finders then import DGL as usual. DGL's installed files are never edited. Set
``GNNBRIDGE_DGL_HOOK=0`` to turn it off.

A top-level module of its own, not part of the ``gnnbridge`` package: Python imports it at every
start in this environment, and importing ``gnnbridge`` would cost far more than this file.
"""

import os
import sys


class _RepairDglOnImport:
    """A ``sys.meta_path`` finder that never finds anything: it only notices the first ``dgl``."""

    def find_spec(self, name, path=None, target=None):
        if name != "dgl":
            return None
        try:
            sys.meta_path.remove(self)  # once: the repair looks DGL up itself
            from gnnbridge.backends.dgl.compat import prepare_for_import

            prepare_for_import()
        except Exception:  # noqa: BLE001 - never break an import: DGL then says itself what fails
            pass
        return None


def install() -> None:
    if os.environ.get("GNNBRIDGE_DGL_HOOK", "1") != "0" and "dgl" not in sys.modules:
        if not any(isinstance(f, _RepairDglOnImport) for f in sys.meta_path):
            sys.meta_path.insert(0, _RepairDglOnImport())
