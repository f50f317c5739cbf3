"""Plugins adding commands to the command line (the ``register_commands`` hook)."""

from __future__ import annotations

from typing import Any

from gnnbridge.core.plugins.faults import describe, is_plugin_fault, stdout_to_stderr
from gnnbridge.core.plugins.manager import load_plugins, plugin_failed, pm, warn


def extend_cli(group: Any) -> None:
    """Let every plugin add commands to the click ``group``; a name already taken keeps its command
    (gnnbridge's own first), and the plugin that tried is named in a warning."""
    load_plugins()
    for impl in pm.hook.register_commands.get_hookimpls():  # in the order the plugins were registered
        before = dict(group.commands)
        try:
            with stdout_to_stderr():
                impl.function(group)
        except BaseException as exc:  # noqa: BLE001
            if not is_plugin_fault(exc):
                raise
            group.commands.clear()
            group.commands.update(before)
            plugin_failed(impl.plugin_name, f"raised in register_commands: {describe(exc)}")
            continue
        for name, command in list(group.commands.items()):
            if name in before and before[name] is not command:
                group.commands[name] = before[name]
                owner = getattr(before[name], "gnnbridge_plugin", "gnnbridge")
                warn(
                    f"plugin '{impl.plugin_name}' adds a command '{name}', which plugin '{owner}' already has; the "
                    "first one is kept."
                )
            elif name not in before:
                command.gnnbridge_plugin = impl.plugin_name
