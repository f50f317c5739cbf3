"""Telling a plugin's failure from everything else, and saying it in one line.

A plugin's bug (an exception from its import, a registration hook, a model's forward) must name
the plugin and leave the rest of gnnbridge working; gnnbridge's own errors, memory exhaustion, a
failed peer and a Ctrl-C that really arrived must pass through untouched.
"""

from __future__ import annotations

import contextlib
import sys

from gnnbridge.core.errors import GnnBridgeError, signal_received


class PluginError(GnnBridgeError, RuntimeError):
    """A plugin failed to load or registered something invalid."""


def is_plugin_fault(exc: BaseException) -> bool:
    """Whether ``exc``, raised while plugin code ran, is that plugin's failure. Not so for
    gnnbridge's own errors, memory exhaustion, a failed peer, or a Ctrl-C / SIGTERM that really
    arrived. ``SystemExit`` and a ``KeyboardInterrupt`` no signal caused are the plugin's: they
    must not end a command as a success or look like the user stopped it."""
    if isinstance(exc, (GnnBridgeError, MemoryError, GeneratorExit)):
        return False
    if isinstance(exc, KeyboardInterrupt):
        return not signal_received()
    if isinstance(exc, SystemExit):
        return True
    if not isinstance(exc, Exception):
        return False
    torch = sys.modules.get("torch")
    return torch is None or not isinstance(exc, (torch.OutOfMemoryError, torch.distributed.DistError))


def describe(exc: BaseException) -> str:
    """``Type: first line`` of a plugin's exception; SystemExit says what it exits with."""
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r}) (a plugin must raise an exception, not exit the process)"
    if isinstance(exc, KeyboardInterrupt):
        return "KeyboardInterrupt, though no Ctrl-C or signal arrived"
    return f"{type(exc).__name__}: {short(exc)}"


@contextlib.contextmanager
def stdout_to_stderr():
    """While plugin code loads or registers, what it prints goes to stderr: stdout is the
    command's output (``models --json``, ``config show > file.yaml``)."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


@contextlib.contextmanager
def blame(origin: str, what: str):
    """Turn an exception from a plugin's code (a model's forward, a sampler's loader) into one
    line naming it (see :func:`is_plugin_fault` for what passes through)."""
    try:
        yield
    except BaseException as exc:  # noqa: BLE001
        if not is_plugin_fault(exc):
            raise
        raise PluginError(f"{origin} failed in its {what}: {describe(exc)}") from None


def short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else "no message"
