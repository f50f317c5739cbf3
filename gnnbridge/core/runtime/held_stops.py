"""Stop signals held over a few lines that must not be cut in the middle, then delivered.

Every gnnbridge command turns SIGINT / SIGTERM into an exception raised wherever the main
thread happens to be. Most code is fine with that; a database write is not. Measured on
``tune --parallel``: a SIGTERM raised inside a trial's Optuna report left that SQLite
connection holding the write lock (``KeyboardInterrupt`` is not an ``Exception``, so the
session was never rolled back); the trial's mark "interrupted", written next on another
connection of the same process, then waited on that lock until the parent killed the worker,
and the trial was never marked. The same holds between ``study.ask()`` and the line that
records a trial's owner: a stop there left a trial no later ``tune`` took over.

:func:`stops_held` swaps the handlers for one that only notes the signal (not a signal mask: a
mask is the calling thread's, and a process-directed signal is then delivered to another
thread, torch's or a driver's, whose C handler still has the main thread run the Python one),
and on leaving gives the first signal that came to the handler it would have reached: a
Python handler is called, a default action is taken by raising the signal again. Nested holds
are one hold; only the main thread can own handlers, elsewhere nothing is held.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

STOPS = (signal.SIGINT, signal.SIGTERM)
_holding: dict = {}  # while held: the handlers the stops had, and the stops that came meanwhile


def hold() -> bool:
    """Start holding; False where nothing is newly held (already held, or not the main thread)."""
    if "handlers" in _holding or threading.current_thread() is not threading.main_thread():
        return False
    _holding["handlers"] = {signum: signal.getsignal(signum) for signum in STOPS}
    _holding["came"] = []
    for signum, old in _holding["handlers"].items():
        if old not in (signal.SIG_IGN, None):  # None: a handler not set from Python; left alone
            signal.signal(signum, lambda signum, frame: _holding["came"].append(signum))
    return True


def release() -> None:
    """The handlers back; the first stop that came meanwhile goes to its own handler now."""
    handlers = _holding.pop("handlers", None)
    if handlers is None:
        return
    came = _holding.pop("came", [])
    for signum, old in handlers.items():
        if old is not None:
            signal.signal(signum, old)
    if not came:
        return
    old = handlers[came[0]]
    if callable(old):
        old(came[0], None)  # gnnbridge's handlers note the signal and raise
    else:
        signal.raise_signal(came[0])  # SIG_DFL: the process ends as it would have


@contextmanager
def stops_held() -> Iterator[None]:
    """Hold stop signals over the ``with`` block (see the module); a stop is delivered at its end."""
    mine = hold()
    try:
        yield
    finally:
        if mine:
            release()
