"""Built-in backends. Each folder has the same modules: ``plugin`` (hook), ``backend`` (the
:class:`~gnnbridge.core.interfaces.Backend`), ``models`` and ``sampler``."""
