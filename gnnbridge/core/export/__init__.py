"""Trained models as files that run without gnnbridge, PyG or DGL (``gnnbridge export``).

Why our own programs: neither library's layers export (DGL has no ONNX path at all; PyG's
scatter reductions read ``int(index.max())`` and break ``torch.export`` on data-dependent
sizes), so each built-in architecture is written once more in plain torch
(:mod:`.programs`), fed the neutral weights both libraries' layouts map onto, and handed to
torch's own exporters (:mod:`.formats`). Writing one from a run (the checkpoint, the neutral
names, the check against ``predict``) is :mod:`gnnbridge.core.app.export`'s.

May import: ``errors``, ``config``, ``models`` (and what they may).
"""

from gnnbridge.core.export.formats import FORMATS, describe_file, load, run

__all__ = ["FORMATS", "describe_file", "load", "run"]
