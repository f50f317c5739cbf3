"""A library's own dataset classes by name: ``--dataset pyg:Planetoid --set
dataset.options.name=Cora`` opens ``torch_geometric.datasets.Planetoid``, ``dgl:CoraGraphDataset``
opens ``dgl.data.CoraGraphDataset``, each through the library's own reader (and download);
the object it returns is then read like a graph handed over in memory (the backend's
``objects`` module). Both backends open classes the same way, so the rules live here once.

``dataset.options`` are the class's keyword arguments, checked against its signature before it
runs. Its folder argument (PyG's ``root``, DGL's ``raw_dir``), unless given as an option, is
``<data root>/<library>/<class>`` (the data root as for every dataset: ``dataset.root``, else
``$GNNBRIDGE_DATA``, else ``~/.cache/gnnbridge/datasets``). ``evaluate`` and ``predict`` never
download: there a missing folder is one line.
"""

from __future__ import annotations

import importlib
import inspect

from gnnbridge.core import environ
from gnnbridge.core.errors import ConfigError, DataFileNotFoundError, did_you_mean
from gnnbridge.core.interfaces import DatasetConfig, downloads_allowed


def open_class(prefix: str, module: str, base: str, folder_arg: str, name: str, config: DatasetConfig):
    """An instance of ``module.name`` (a subclass of ``base``, ``module:Class``) built from ``config``."""
    library = importlib.import_module(module)
    base_module, _, base_name = base.partition(":")
    cls = _dataset_class(prefix, library, getattr(importlib.import_module(base_module), base_name), name)
    params = inspect.signature(cls).parameters
    kwargs = dict(config.options)
    if folder_arg in params and folder_arg not in kwargs:
        folder = environ.data_root(config.root) / prefix / name
        if not downloads_allowed() and not folder.exists():
            raise DataFileNotFoundError(
                f"Dataset '{prefix}:{name}' is not in '{folder}', and evaluate/predict never download; point "
                f"--set dataset.root=DIR (or dataset.options.{folder_arg}) at the folder that holds it."
            )
        kwargs[folder_arg] = str(folder)
    if "verbose" in params and "verbose" not in kwargs:
        kwargs["verbose"] = False
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as exc:
        takes = ", ".join(p for p in params if p != folder_arg) or "none"
        raise ConfigError(
            f"dataset '{prefix}:{name}': {exc} (its options: {takes}; --set dataset.options.NAME=VALUE)."
        ) from None
    try:
        return cls(**kwargs)
    except OSError as exc:  # a download that failed (URLError, requests' errors), a file it could not read
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise DataFileNotFoundError(
            f"Dataset '{prefix}:{name}' could not be read or downloaded into '{kwargs.get(folder_arg, '?')}' "
            f"({type(exc).__name__}: {detail}); put the library's files there, or point --set dataset.root=DIR "
            f"(or dataset.options.{folder_arg}) at a folder that holds them."
        ) from None


def _dataset_class(prefix: str, library, base: type, name: str) -> type:
    cls = getattr(library, name, None)
    if isinstance(cls, type) and issubclass(cls, base) and cls is not base:
        return cls
    choices = [
        f"{prefix}:{n}"
        for n, v in vars(library).items()
        if isinstance(v, type) and issubclass(v, base) and v is not base and not n.startswith("_")
    ]
    raise ConfigError(
        f"Unknown dataset '{prefix}:{name}'{did_you_mean(f'{prefix}:{name}', choices)}: {library.__name__} has no "
        f"dataset class '{name}' (it has {len(choices)}, e.g. {', '.join(sorted(choices)[:3])})."
    )
