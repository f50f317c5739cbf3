"""Helpers for testing gnnbridge and its plugins: the conformance suites for backends
(:mod:`.conformance`) and for plugin models and samplers (:mod:`.plugins`), rank workers."""

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def registered_plugin(plugin: object, name: str) -> Iterator[object]:
    """Register ``plugin`` for the duration of a ``with`` block (tests of plugins, ours or yours).

    Registries are rebuilt on entry and exit, so names the plugin adds exist only inside.
    """
    from gnnbridge.core import plugins
    from gnnbridge.core.plugins import manager

    plugins.load_plugins()
    plugins.pm.register(plugin, name=name)
    plugins.reset_registries()
    try:
        yield plugin
    finally:
        if plugins.pm.is_registered(plugin):  # a plugin that failed was unregistered already
            plugins.pm.unregister(plugin)
        manager._failures.pop(name, None)
        plugins.reset_registries()
