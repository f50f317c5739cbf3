"""Switches a command turns off around work it does not trust: downloading a dataset, and
importing code a config names. ``evaluate`` and ``predict`` read a checkpoint, which is data, not
orders (context variables: the switch holds for the code it wraps, thread by thread).
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
