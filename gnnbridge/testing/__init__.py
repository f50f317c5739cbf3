"""Helpers for testing gnnbridge and its plugins: the backend conformance suite, rank workers."""

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def registered_plugin(plugin: object, name: str) -> Iterator[object]:
    """Register ``plugin`` for the duration of a ``with`` block (tests of plugins, ours or yours).

    Registries are rebuilt on entry and exit, so names the plugin adds exist only inside.
    """
    from gnnbridge.core.contracts import plugins

    plugins.load_plugins()
    plugins.pm.register(plugin, name=name)
    plugins.reset_registries()
    try:
        yield plugin
    finally:
        plugins.pm.unregister(plugin)
        plugins.reset_registries()
