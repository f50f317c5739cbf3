"""Built-in plugins: the backends (with their models), the core sampler, and the datasets and
experiments that ship with gnnbridge, and the table sources (``gnnbridge.tables``).

They are installed as entry points like any third-party plugin's, and this list is the one place
they are named: ``setup.py`` writes the entry points from it, and it also loads them from a
source checkout that was never pip-installed (no entry points then).
``gnnbridge/__init__.py`` hands it, and the default backend, to core's plugin manager.
"""

BUILTIN_PLUGINS = {
    "pyg": "gnnbridge.backends.pyg.plugin",
    "dgl": "gnnbridge.backends.dgl.plugin",
    "samplers": "gnnbridge.plugins.samplers",
    "datasets": "gnnbridge.plugins.datasets",
    "hetero-datasets": "gnnbridge.plugins.hetero_datasets",
    "folder-datasets": "gnnbridge.plugins.folder_datasets",
    "real-datasets": "gnnbridge.plugins.real_datasets",
    "hetero-real-datasets": "gnnbridge.plugins.hetero_real_datasets",
    "experiments": "gnnbridge.plugins.experiments",
    "loggers": "gnnbridge.plugins.loggers",
    "tasks": "gnnbridge.plugins.tasks",
    "tables": "gnnbridge.tables.plugin",
}

# The backend a config without ``backend`` (and a command without --backend) runs on.
DEFAULT_BACKEND = "pyg"
