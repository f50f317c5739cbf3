"""The plugin contract: every hook gnnbridge calls, with when and what it expects.

Plugins (built-in or from any installed package exposing the ``gnnbridge`` entry-point group)
implement hooks with ``@gnnbridge.hookimpl``. Registration hooks receive a ``register``
callback: core owns validation, de-duplication and error messages, so a plugin stays short::

    from gnnbridge import hookimpl

    @hookimpl
    def register_datasets(register):
        register("my-graph", load_my_graph, "My lab's citation graph")
"""
from __future__ import annotations

import pluggy

PROJECT = "gnnbridge"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_backends(register):
    """Called once when plugins load. Call ``register(backend)`` with a ``Backend`` instance."""


@hookspec
def register_datasets(register):
    """Called once when plugins load. Call ``register(name, loader, description)``.

    ``loader(config: DatasetConfig, seed: int)`` returns a ``GraphData`` (node tasks) or a
    ``GraphCollection`` (graph tasks). It runs once, in the launching process; it must validate
    its inputs and raise ``DataError`` / ``ConfigError`` with one line.
    """


@hookspec
def register_experiments(register):
    """Called once when plugins load. Call ``register(name, config_dict, description)``.

    ``config_dict`` is a partial config (same keys as a YAML experiment file).
    """
