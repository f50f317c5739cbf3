"""Registers the PyG backend through the public hook, exactly as a third-party package would."""
from gnnbridge.core.contracts.hookspecs import hookimpl


@hookimpl
def register_backends(register):
    from gnnbridge.backends.pyg.backend import PygBackend

    register(PygBackend())
