"""Registers the DGL backend through the public hook, exactly as a third-party package would."""
from gnnbridge.core.contracts.hookspecs import hookimpl


@hookimpl
def register_backends(register):
    from gnnbridge.backends.dgl.backend import DglBackend

    register(DglBackend())
