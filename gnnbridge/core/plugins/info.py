"""What is installed: the loaded plugins and what each registered (``gnnbridge plugins``), and
the versions recorded with every result and checkpoint."""

from __future__ import annotations

import importlib.metadata

from gnnbridge.core.plugins import manager
from gnnbridge.core.plugins.manager import ENTRY_POINT_GROUP, load_plugins
from gnnbridge.core.plugins.registries import REGISTRIES, backends


def plugin_info() -> list[dict]:
    """Loaded plugins (the distribution that installed each, the hooks it implements, what it
    registered) and the plugins left out with why (for ``gnnbridge plugins``)."""
    load_plugins()
    dists = {ep.name: ep.dist for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    out = []
    for name, plugin in sorted(manager.pm.list_name_plugin(), key=lambda item: item[0]):
        if name in manager._failures:
            continue
        hooks = sorted(h.name for h in manager.pm.get_hookcallers(plugin) or [])
        dist = dists.get(name)
        out.append(
            {
                "name": name,
                "module": getattr(plugin, "__name__", type(plugin).__name__),
                "hooks": hooks,
                "distribution": f"{dist.name} {dist.version}" if dist else None,
                "registers": _registers(name),
            }
        )
    out += [{"name": name, "error": why} for name, why in sorted(manager._failures.items())]
    return out


def _registers(plugin: str) -> dict[str, list[str]]:
    """What ``plugin`` registered, by hook (``tasks``: its families and targets together)."""
    found: dict[str, list[str]] = {}
    for registry in REGISTRIES:
        found.setdefault(registry.hook.removeprefix("register_"), []).extend(registry.names_from(plugin))
    return {hook: sorted(names) for hook, names in found.items() if names}


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
