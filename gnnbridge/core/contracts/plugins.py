"""Plugin machinery: the pluggy manager, plugin loading, and the name registries.

Plugins load once, lazily, on first use: every installed package exposing the ``gnnbridge``
entry-point group (gnnbridge's own backends and datasets included, declared in its
``pyproject.toml``), then the default modules the package named with :func:`set_defaults` that
were not already loaded that way (a source checkout that was never pip-installed has no entry
points). Core itself names no plugin and no backend: the ``gnnbridge`` package, which sits above
core, hands over its built-in list and default backend when it is imported.

``GNNBRIDGE_LOAD_PLUGINS=a,b`` restricts loading to the named plugins (empty: load none), which
is how tests and users isolate a misbehaving third-party package.
"""
from __future__ import annotations

import contextlib
import contextvars
import importlib
import importlib.metadata
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pluggy

from gnnbridge.core.contracts import hookspecs
from gnnbridge.core.errors import ConfigError, GnnBridgeError, did_you_mean, unknown_name

ENTRY_POINT_GROUP = "gnnbridge"
ENV_LOAD = "GNNBRIDGE_LOAD_PLUGINS"

pm = pluggy.PluginManager(hookspecs.PROJECT)
pm.add_hookspecs(hookspecs)
_lock = threading.Lock()
_loaded = False
_defaults: dict[str, str] = {}  # plugin name -> module, loaded when no entry point provided it
_default_backend: str | None = None


class PluginError(GnnBridgeError, RuntimeError):
    """A plugin failed to load or registered something invalid."""


def _allowed() -> set[str] | None:
    raw = os.environ.get(ENV_LOAD)
    if raw is None:
        return None
    return {part.strip() for part in raw.split(",") if part.strip()}


def load_plugins() -> None:
    """Load entry-point and built-in plugins once; later calls do nothing."""
    global _loaded
    with _lock:
        if _loaded:
            return
        allowed = _allowed()
        points = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
        _check_allowed(allowed, {ep.name for ep in points} | set(_defaults))
        for ep in points:
            if allowed is not None and ep.name not in allowed:
                continue
            try:
                plugin = ep.load()
            except Exception as exc:  # a broken third-party package must not break the CLI
                raise PluginError(f"Plugin '{ep.name}' ({ep.value}) failed to load: {exc!r}. "
                                  f"Uninstall it or exclude it with {ENV_LOAD}.") from None
            _register(plugin, ep.name)
        for name, module in _defaults.items():
            if allowed is not None and name not in allowed:
                continue
            _register(importlib.import_module(module), name)
        pm.check_pending()
        _loaded = True


_downloads: contextvars.ContextVar[bool] = contextvars.ContextVar("gnnbridge_downloads", default=True)


def downloads_allowed() -> bool:
    """Whether a dataset plugin may download or create its files now. ``evaluate`` and
    ``predict`` load the dataset a checkpoint names, and a checkpoint is data, not orders: there a
    dataset must already be where its config says, or the loader raises one line."""
    return _downloads.get()


@contextlib.contextmanager
def no_downloads():
    token = _downloads.set(False)
    try:
        yield
    finally:
        _downloads.reset(token)


def _check_allowed(allowed: set[str] | None, known: set[str]) -> None:
    unknown = sorted((allowed or set()) - known)
    if unknown:
        raise PluginError(
            f"{ENV_LOAD}={os.environ.get(ENV_LOAD)!r} names {', '.join(repr(u) for u in unknown)}, which is not an "
            f"installed plugin{did_you_mean(unknown[0], known)}. Installed: {', '.join(sorted(known))} "
            "(gnnbridge plugins lists them; unset the variable to load all)."
        )


def set_defaults(plugins: dict[str, str], backend: str | None) -> None:
    """Name the plugin modules to load when no entry point provides them, and the backend a
    config without ``backend`` runs on. Called by the ``gnnbridge`` package on import."""
    global _default_backend
    _defaults.update(plugins)
    _default_backend = backend


def default_backend() -> str:
    """The backend for a config that names none."""
    if _default_backend is None:
        raise ConfigError(f"No backend was chosen and none is the default; pass --backend "
                          f"(available: {', '.join(backends.names()) or 'none'}).")
    return _default_backend


def _register(plugin: Any, name: str) -> None:
    if pm.is_registered(plugin) or pm.get_plugin(name) is not None:
        return
    pm.register(plugin, name=name)


def plugin_info() -> list[dict]:
    """Loaded plugins and the hooks each implements (for ``gnnbridge plugins``)."""
    load_plugins()
    out = []
    for name, plugin in sorted(pm.list_name_plugin(), key=lambda item: item[0]):
        hooks = sorted(h.name for h in pm.get_hookcallers(plugin) or [])
        out.append({"name": name, "module": getattr(plugin, "__name__", repr(plugin)), "hooks": hooks})
    return out


# --------------------------------------------------------------------------- registries


@dataclass
class Entry:
    name: str
    value: Any
    description: str
    plugin: str


class Registry:
    """Names to objects for one kind of thing; errors list what is available."""

    def __init__(self, kind: str, hook: str, fix: str = ""):
        self.kind = kind
        self.hook = hook
        self.fix = fix
        self._entries: dict[str, Entry] | None = None

    def _collect(self) -> dict[str, Entry]:
        if self._entries is not None:
            return self._entries
        load_plugins()
        entries: dict[str, Entry] = {}
        for impl in getattr(pm.hook, self.hook).get_hookimpls():
            register = self._register_callback(entries, impl.plugin_name)
            impl.function(register)
        self._entries = entries
        return entries

    def _register_callback(self, entries: dict[str, Entry], plugin: str) -> Callable[..., None]:
        def register(name: Any, value: Any = None, description: str = "") -> None:
            if value is None and hasattr(name, "name"):  # register(obj) with obj.name / obj.description
                name, value, description = name.name, name, getattr(name, "description", "")
            if not isinstance(name, str) or not name:
                raise PluginError(f"Plugin '{plugin}' registered a {self.kind} with an invalid name {name!r}.")
            if name in entries:
                raise PluginError(
                    f"{self.kind.capitalize()} '{name}' is registered twice (plugins '{entries[name].plugin}' "
                    f"and '{plugin}'); uninstall one or exclude it with {ENV_LOAD}."
                )
            entries[name] = Entry(name, value, description, plugin)

        return register

    def names(self) -> list[str]:
        return sorted(self._collect())

    def entries(self) -> list[Entry]:
        return [self._collect()[n] for n in self.names()]

    def get(self, name: str) -> Any:
        entries = self._collect()
        if name not in entries:
            raise unknown_name(self.kind, name, entries, self.fix)
        return entries[name].value

    def reset(self) -> None:
        """Forget collected entries (after registering or unregistering a plugin)."""
        self._entries = None


backends = Registry("backend", "register_backends", "Install one with pip install 'gnnbridge[pyg]' or 'gnnbridge[dgl]'.")
datasets = Registry("dataset", "register_datasets", "Or pass a file: --dataset PATH.npz.")
experiments = Registry("experiment", "register_experiments", "Or pass a YAML file path.")
REGISTRIES = (backends, datasets, experiments)


def reset_registries() -> None:
    for registry in REGISTRIES:
        registry.reset()


def get_backend(name: str):
    return backends.get(name)


def gnnbridge_version() -> str:
    """The installed distribution's version (a source checkout without metadata says so)."""
    try:
        return importlib.metadata.version("gnnbridge")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def library_versions(backend_name: str) -> dict[str, str]:
    """gnnbridge, Python, torch and the backend's libraries: recorded with every result and
    checkpoint, because a number is only reproducible with the stack that produced it."""
    import platform

    import torch

    out = {"gnnbridge": gnnbridge_version(), "python": platform.python_version(), "torch": torch.__version__}
    out.update(backends.get(backend_name).versions())
    return {name: str(version) for name, version in out.items()}  # torch's is a str subclass
