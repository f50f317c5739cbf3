"""Core's plugin machinery, one job per module (the built-in plugins themselves live in
``gnnbridge/plugins`` and ``gnnbridge/backends``, and register like any third-party package):

    manager.py     pluggy's manager: loading entry points and defaults once, leaving a broken
                   plugin out with one warning line (``GNNBRIDGE_LOAD_PLUGINS`` restricts it)
    registries.py  names to things per kind (backends, datasets, experiments, models, samplers,
                   loggers), filled through the ``register_*`` hooks' callbacks
    faults.py      a plugin's failure told from everything else, and said in one line
    switches.py    no downloads, no imported code: what evaluate / predict turn off
    commands.py    plugins adding commands to the command line
    sources.py     dataset sources in the order they are asked: which kind a text names
    info.py        what is installed (``gnnbridge plugins``) and the versions every result records

The names callers need are re-exported here; a test reaching into the manager's state imports
:mod:`.manager` itself.

May import: ``errors``, ``config`` and ``contracts`` (the hook specs): plugins are described by
the contracts, and every layer above asks the registries for them; ``records`` and ``storage``
(a dataset plugin's arrays become a record by the file format's rules).
"""

from gnnbridge.core.plugins.commands import extend_cli
from gnnbridge.core.plugins.faults import PluginError, blame, describe, is_plugin_fault, stdout_to_stderr
from gnnbridge.core.plugins.info import gnnbridge_version, library_versions, plugin_info
from gnnbridge.core.plugins.manager import (
    ENTRY_POINT_GROUP,
    ENV_LOAD,
    ENV_WARNED,
    is_builtin,
    load_plugins,
    pm,
    set_defaults,
    warn,
)
from gnnbridge.core.plugins.registries import (
    ANY_BACKEND,
    REGISTRIES,
    Component,
    Entry,
    Registry,
    ScopedRegistry,
    backends,
    dataset_libraries,
    datasets,
    default_backend,
    experiments,
    families,
    get_backend,
    get_family,
    get_target,
    graph_readers,
    loggers,
    models,
    reset_registries,
    samplers,
    targets,
)
from gnnbridge.core.plugins.sources import SourceRegistry, dataset_sources, source_for
from gnnbridge.core.plugins.switches import code_allowed, code_switch, downloads_allowed, no_code, no_downloads

__all__ = [
    "ANY_BACKEND",
    "ENTRY_POINT_GROUP",
    "ENV_LOAD",
    "ENV_WARNED",
    "REGISTRIES",
    "Component",
    "Entry",
    "PluginError",
    "Registry",
    "ScopedRegistry",
    "SourceRegistry",
    "backends",
    "blame",
    "code_allowed",
    "code_switch",
    "dataset_libraries",
    "dataset_sources",
    "datasets",
    "default_backend",
    "describe",
    "downloads_allowed",
    "experiments",
    "extend_cli",
    "families",
    "get_backend",
    "get_family",
    "get_target",
    "graph_readers",
    "gnnbridge_version",
    "is_builtin",
    "is_plugin_fault",
    "library_versions",
    "load_plugins",
    "loggers",
    "models",
    "no_code",
    "no_downloads",
    "pm",
    "plugin_info",
    "reset_registries",
    "samplers",
    "source_for",
    "targets",
    "set_defaults",
    "stdout_to_stderr",
    "warn",
]
