"""Calling numba-compiled code so that Ctrl-C and SIGTERM still stop a run as themselves.

A signal's Python handler runs at the next point the main thread is back in Python. Around
numba that point was inside numba's own machinery, and the stop went wrong two ways (both
measured; ``tests/core/sampling/test_sampling.py``):

* **During a call**, the handler ran while the dispatcher called back into Python to box the
  result, and CPython wrapped the handler's ``RunInterrupted`` in ``SystemError: ... returned a
  result with an exception set``: a SIGTERM nine times in ten ended in a crash report instead
  of "Stopped by SIGTERM".
* **During a compile**, LLVM reports to numba through a ctypes callback, and an exception raised
  in a ctypes callback is printed and dropped: the stop was lost and the next call hung.

:func:`signals_deferred` holds the Python handler until the compiled call returns, then
delivers the signal to the handler the run had. Compiled code cannot be interrupted anyway, so
this delays nothing; it costs a few microseconds a block (four ``signal.signal`` calls), and a
caller making many compiled calls in a row (the typed sampler: a hop and a relabel per
relation) opens one block around all of them, inside which the kernels' own blocks are free.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

import torch

try:  # numba is a dependency; without it (an image that lacks it) the torch paths run.
    import numba

    # numba's own thread pool, not OpenMP: its OpenMP layer shares libgomp with DGL, and setting
    # numba's thread count there changes how many threads DGL's sampler draws with, which made
    # DGL's seeded samples differ from one call to the next.
    if "NUMBA_THREADING_LAYER" not in os.environ:
        numba.config.THREADING_LAYER = "workqueue"
except ImportError:  # pragma: no cover - exercised only where numba is missing
    numba = None

_depth = [0]  # open blocks on the main thread: an inner block (a kernel call in a batch) costs nothing
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP for the block, then deliver them; also a decorator.

    Only the main thread runs handlers (and may set them), so elsewhere this does nothing. The
    C-level part of a signal (``signal.set_wakeup_fd``, which the watchdog reads) is untouched."""
    if threading.current_thread() is not threading.main_thread() or _depth[0]:
        yield  # another thread, or inside an outer block that already holds them
        return
    caught: list[int] = []
    previous: dict = {}
    _depth[0] += 1
    try:  # the swap inside: a stop arriving while it runs raises here, and the block is undone
        for signum in STOP_SIGNALS:
            if callable(signal.getsignal(signum)):  # SIG_DFL and SIG_IGN never run Python
                previous[signum] = signal.signal(signum, lambda number, frame: caught.append(number))
        yield
    finally:
        _depth[0] -= 1
        try:
            _restore(list(previous.items()))
        finally:
            for signum in dict.fromkeys(caught):
                signal.raise_signal(signum)


def _restore(handlers: list) -> None:
    """Put every handler back, even when one already put back runs (and raises) for a signal
    arriving meanwhile: a handler left as the recorder would swallow every later stop. Recursive,
    not a loop: a raise between a loop's iterations would skip the rest."""
    if handlers:
        try:
            signal.signal(*handlers[0])
        finally:
            _restore(handlers[1:])


_launching = threading.RLock()


@contextlib.contextmanager
def parallel_launch(parallel: bool = True) -> Iterator[None]:
    """The process's one right to start numba's thread pool, held for a ``parallel=True``
    kernel's call (``parallel=False``: nothing to hold).

    Why: the workqueue layer chosen above aborts the whole process ("Concurrent access has been
    detected") when two Python threads launch parallel kernels at once, e.g. the prefetch
    thread's sampler and the training loop's feature gather or ``RowAdam`` step. Such kernels
    use every core of the rank anyway, so taking turns costs nothing."""
    if not parallel:
        yield
        return
    with _launching:
        yield


def threads() -> int:
    """Sets numba's thread count to torch's (a rank's share of the cores; per calling thread)
    and returns it."""
    count = max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(count)
    return count
