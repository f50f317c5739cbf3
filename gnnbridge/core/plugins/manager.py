"""The plugin manager: pluggy's, loaded once, lazily, on first use.

Plugins load from every installed package exposing the ``gnnbridge`` entry-point group
(gnnbridge's own backends and datasets included, declared in its ``pyproject.toml``), then the
default modules the package named with :func:`set_defaults` that were not already loaded that
way (a source checkout that was never pip-installed has no entry points). Core itself names no
plugin and no backend: the ``gnnbridge`` package, which sits above core, hands over its built-in
list and default backend when it is imported.

``GNNBRIDGE_LOAD_PLUGINS=a,b`` restricts loading to the named plugins (empty: load none), which
is how tests and users isolate a misbehaving third-party package.

A plugin that fails to import, implements a hook gnnbridge does not have (pluggy's hook callers
find it; we add the did-you-mean), or raises inside a registration hook is
named in one warning line on stderr and left out; everything else keeps working. What pluggy
does not give, and this module adds: the warning-once-per-job policy, leaving a broken plugin out
instead of failing, and telling the registries (:mod:`.registries`) to forget what it registered.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import pluggy

from gnnbridge.core import environ
from gnnbridge.core.contracts import hookspecs
from gnnbridge.core.errors import did_you_mean
from gnnbridge.core.plugins.faults import PluginError, describe, is_plugin_fault, short, stdout_to_stderr

ENTRY_POINT_GROUP = "gnnbridge"
ENV_LOAD = environ.LOAD_PLUGINS
# Set by gnnbridge's launcher for the ranks it starts: the launching process printed the warnings.
ENV_WARNED = environ.PLUGIN_WARNINGS_SHOWN
_failures: dict[str, str] = {}  # plugin name -> why it was left out
_loading: list[str] = []  # the plugin being imported now (registries must not be used then)
_on_removed: list[Callable[[], None]] = []  # told when a plugin is left out after registering


def _quiet() -> bool:
    """Whether another process of this job shows plugin warnings: the launching process (for the
    ranks it starts), or rank 0 (in a torchrun / SLURM job)."""
    if ENV_WARNED in os.environ:
        return True
    return (os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or "0") != "0"


def warn(line: str) -> None:
    """One warning line on stderr, once per job."""
    if not _quiet():
        print(f"Warning: {line}", file=sys.stderr)


pm = pluggy.PluginManager(hookspecs.PROJECT)
pm.add_hookspecs(hookspecs)
_lock = threading.RLock()
_loaded = False
_defaults: dict[str, str] = {}  # plugin name -> module, loaded when no entry point provided it
_default_backend: str | None = None


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
        if _loading:  # a plugin's import reached a registry: loading again would recurse forever
            raise PluginError(
                f"Plugin '{_loading[-1]}' uses gnnbridge's registries while it is imported; use them "
                "inside its hooks instead."
            )
        allowed = _allowed()
        points = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
        _check_allowed(allowed, {ep.name for ep in points} | set(_defaults))
        for ep in points:
            if allowed is None or ep.name in allowed:
                _load_one(ep.name, ep.value, ep.load)
        for name, module in _defaults.items():
            if allowed is None or name in allowed:
                _load_one(name, module, lambda module=module: importlib.import_module(module))
        _loaded = True


def _load_one(name: str, where: str, load: Callable[[], Any]) -> None:
    """Import and register one plugin, or warn and leave it out (a broken third-party package
    must not take the command line, or the other plugins, down with it)."""
    held = pm.get_plugin(name)
    if held is not None or name in _failures:
        if held is not None and getattr(held, "__name__", where) != where.partition(":")[0]:
            warn(
                f"plugin name '{name}' is taken by {getattr(held, '__name__', held)}; {where} is left out "
                f"(two installed packages use the name; uninstall one)"
            )
        return
    _loading.append(name)
    try:
        with stdout_to_stderr():
            plugin = load()
    except BaseException as exc:  # noqa: BLE001 - ImportError, or anything its import raises
        if not is_plugin_fault(exc):
            raise
        return plugin_failed(name, f"({where}) failed to load: {describe(exc)}")
    finally:
        _loading.pop()
    if pm.is_registered(plugin):
        return
    try:
        pm.register(plugin, name=name)
    except pluggy.PluginValidationError as exc:
        return plugin_failed(name, f"({where}) has a malformed hook: {short(exc)}")
    # pluggy's hook callers say which of this plugin's hooks have no spec (``check_pending``
    # would look at every plugin, and so could blame this one for another's typo).
    unknown = [
        caller.name
        for caller in pm.get_hookcallers(plugin) or []
        if not caller.has_spec() and any(i.plugin is plugin and not i.optionalhook for i in caller.get_hookimpls())
    ]
    if unknown:
        hooks = [n for n in dir(hookspecs) if n.startswith("register_")]
        plugin_failed(
            name,
            f"({where}) implements '{unknown[0]}', which is not a gnnbridge hook"
            f"{did_you_mean(unknown[0], hooks)}; hooks: {', '.join(hooks)}",
        )


def plugin_failed(name: str, why: str) -> None:
    """Leave plugin ``name`` out, saying why in one warning line (once per job)."""
    _failures[name] = why
    plugin = pm.get_plugin(name)
    if plugin is not None:
        pm.unregister(plugin)
        for callback in _on_removed:  # what it registered elsewhere goes with it
            callback()
    warn(f"plugin '{name}' {why}; it is left out (uninstall it, or exclude it with {ENV_LOAD}).")


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


def is_builtin(plugin: str) -> bool:
    """Whether ``plugin`` is one the package itself ships (see :func:`set_defaults`): its name and
    its module, so a third-party package cannot claim the name to skip the checks on its code."""
    return plugin in _defaults and getattr(pm.get_plugin(plugin), "__name__", None) == _defaults[plugin]


def default_backend_name() -> str | None:
    """The backend the package named for a config that names none (None: no default)."""
    return _default_backend


def on_plugin_removed(callback: Callable[[], None]) -> None:
    """Call ``callback`` whenever a registered plugin is left out (the registries forget then)."""
    _on_removed.append(callback)
