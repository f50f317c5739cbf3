"""A library's own dataset classes by name: ``--dataset pyg:Planetoid --set
dataset.options.name=Cora`` opens ``torch_geometric.datasets.Planetoid``, ``dgl:CoraGraphDataset``
opens ``dgl.data.CoraGraphDataset``, each through the library's own reader (and download);
the object it returns is then read like a graph handed over in memory (the backend's
``objects`` module). Both backends open classes the same way, so the rules live here once.

``dataset.options`` are the class's keyword arguments, checked against its signature before it
runs: unknown keys, and a value of the wrong type for an argument whose default (or annotation)
is a bool, int, float or str, are refused by name; what the class itself refuses of the values
it was given (an assertion, a ValueError), or cannot allocate, is one line naming them. Its
folder argument (PyG's ``root``, DGL's ``raw_dir``), unless given as an option, is
``<data root>/<library>/<class>`` (the data root as for every dataset: ``dataset.root``, else
``$GNNBRIDGE_DATA``, else ``~/.cache/gnnbridge/datasets``). ``evaluate`` and ``predict`` never
download: there a missing folder is one line.
"""

from __future__ import annotations

import importlib
import inspect
import re

from gnnbridge.core import environ
from gnnbridge.core.config.values import show
from gnnbridge.core.errors import ConfigError, DataFileNotFoundError, ResourceError, did_you_mean
from gnnbridge.core.interfaces import DatasetConfig, available_memory, downloads_allowed, format_bytes


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
    _check_types(f"{prefix}:{name}", params, config.options)
    return _build(f"{prefix}:{name}", f"{module}.{name}", cls, kwargs, folder_arg, config.options)


def _build(dataset: str, qualified: str, cls: type, kwargs: dict, folder_arg: str, options: dict):
    """``cls(**kwargs)``; what it fails at on a file, memory, or a value it refuses (of the
    ``options`` the user gave) is one line."""
    try:
        return cls(**kwargs)
    except OSError as exc:  # a download that failed (URLError, requests' errors), a file it could not read
        raise DataFileNotFoundError(
            f"Dataset '{dataset}' could not be read or downloaded into '{kwargs.get(folder_arg, '?')}' "
            f"({type(exc).__name__}: {_first_line(exc)}); put the library's files there, or point --set "
            f"dataset.root=DIR (or dataset.options.{folder_arg}) at a folder that holds them."
        ) from None
    except (MemoryError, RuntimeError) as exc:
        asked = re.search(r"allocate (\d+) bytes", str(exc))
        if not isinstance(exc, MemoryError) and "allocate" not in str(exc):
            raise
        raise ResourceError(
            f"Dataset '{dataset}' does not fit in this machine's memory with {_given(options)} (it asked for "
            f"{format_bytes(int(asked[1])) if asked else 'more'}; {format_bytes(available_memory())} is free); "
            "give it smaller sizes."
        ) from None
    except (TypeError, ValueError, AssertionError) as exc:
        if not options:  # the class's own failure, not a value of the user's: the plugin is blamed
            raise
        detail = f": {_first_line(exc)}" if str(exc).strip() else ""
        raise ConfigError(
            f"Dataset '{dataset}' refused {_given(options)} ({type(exc).__name__}{detail}); see {qualified} for "
            "the values it takes."
        ) from None


# A class's keyword argument whose default (or annotation) is one of these takes only that type
# (an int where a float is expected too): what a command line gives as text is refused by name.
PLAIN_TYPES = {t.__name__: t for t in (bool, int, float, str)}


def _check_types(dataset: str, params, options: dict) -> None:
    """Each option the class declares as a plain bool, int, float or str is one."""
    for key, value in options.items():
        param = params.get(key)
        expected = _plain_type(param) if param is not None else None
        if expected is None or type(value) is expected or (expected is float and type(value) is int):
            continue
        default = "" if param.default is inspect.Parameter.empty else f"; its default is {show(param.default)}"
        raise ConfigError(
            f"dataset.options.{key}={show(value)} has the wrong type for dataset '{dataset}': expected "
            f"{expected.__name__}{default}."
        )


def _plain_type(param: inspect.Parameter) -> type | None:
    if param.default is not inspect.Parameter.empty and param.default is not None:
        return type(param.default) if type(param.default) in PLAIN_TYPES.values() else None
    annotation = param.annotation
    if isinstance(annotation, str):
        return PLAIN_TYPES.get(annotation)
    return annotation if annotation in PLAIN_TYPES.values() else None


def _given(options: dict) -> str:
    return "dataset.options " + ", ".join(f"{key}={show(value, 40)}" for key, value in options.items())


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]


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
