"""Trained models as files that run without gnnbridge, PyG or DGL (``gnnbridge export``).

Why our own programs: neither library's layers export (DGL has no ONNX path at all; PyG's
scatter reductions read ``int(index.max())`` and break ``torch.export`` on data-dependent
sizes), so each built-in architecture is written once more in plain torch
(:mod:`.programs`), fed the neutral weights both libraries' layouts map onto, and handed to
torch's own exporters (:mod:`.formats`).
"""

from gnnbridge.core.export.formats import FORMATS, describe_file, load, run

__all__ = ["FORMATS", "describe_file", "load", "run"]
