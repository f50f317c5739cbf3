"""Switches a command turns off around work it does not trust: downloading a dataset, and
importing code a config names. ``evaluate`` and ``predict`` read a checkpoint, which is data, not
orders (context variables: the switch holds for the code it wraps, thread by thread). A refusal
names the way its caller turns the switch back on: a keyword of gnnbridge's Python functions
(``trust_code=True``), or the command line's flag (``--trust-code``), which the CLI says it is
around its commands (:func:`command_line`).
"""

from __future__ import annotations

import contextlib
import contextvars

_downloads: contextvars.ContextVar[bool] = contextvars.ContextVar("gnnbridge_downloads", default=True)


def downloads_allowed() -> bool:
    """Whether a dataset plugin may download or create its files now. ``evaluate`` and
    ``predict`` load the dataset a checkpoint names, and a checkpoint is data, not orders: there a
    dataset must already be where its config says, or the loader raises one line."""
    return _downloads.get()


@contextlib.contextmanager
def _switched_off(flag: contextvars.ContextVar[bool]):
    token = flag.set(False)
    try:
        yield
    finally:
        flag.reset(token)


def no_downloads():
    return _switched_off(_downloads)


_code: contextvars.ContextVar[bool] = contextvars.ContextVar("gnnbridge_code", default=True)


def code_allowed() -> bool:
    """Whether a config may name code to import (``model.arch: module:Class``). Not so for the
    config inside a checkpoint that ``evaluate`` / ``predict`` read, unless the user trusts it:
    importing a module runs it."""
    return _code.get()


def no_code():
    return _switched_off(_code)


# How a refusal names the switch that lets code run: the Python functions' keyword, unless the
# command line is the caller (a context, for the reason above: the functions are the same).
_code_switch: contextvars.ContextVar[str] = contextvars.ContextVar("gnnbridge_code_switch", default="trust_code=True")


def code_switch() -> str:
    """``trust_code=True``, or ``--trust-code`` inside :func:`command_line`: what a refusal to run
    a checkpoint's code tells the user to give."""
    return _code_switch.get()


@contextlib.contextmanager
def command_line():
    """Inside: the caller is the ``gnnbridge`` command, and refusals name its flags."""
    token = _code_switch.set("--trust-code")
    try:
        yield
    finally:
        _code_switch.reset(token)
