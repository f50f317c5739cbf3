"""Built-in backends. Each folder has the same modules: ``plugin`` (hook), ``backend`` (the
:class:`~gnnbridge.core.interfaces.Backend`), ``models`` and ``sampler``. Beside them,
:mod:`.catalogue` declares once the neutral architectures every backend builds; a backend
imports it and core, never another backend, the built-in plugins or the CLI."""
