"""Domain errors.

Every error a user can cause is a subclass of :class:`GnnBridgeError` and carries one line that
names the bad value, the valid choices and the fix. The CLI prints that line alone (no
traceback) and exits non-zero; library callers can catch the builtin base they expect
(``KeyError`` for unknown names, ``ValueError`` for bad values, ``FileNotFoundError`` ...).
"""

from __future__ import annotations

import difflib
import re
import signal
import threading
from collections.abc import Iterable

_signals_received: list[int] = []  # stop signals this process was sent (see record_interrupts)
_recording = [False]  # whether record_interrupts installed its handler here


def note_signal(signum: int) -> None:
    """Remember that ``signum`` was delivered to this process (by a signal handler)."""
    _signals_received.append(int(signum))


def signal_received() -> bool:
    """Whether a stop signal really arrived: a ``KeyboardInterrupt`` without one was raised by
    some code (a plugin's), and is that code's failure, not a Ctrl-C. Where no handler records
    signals (a notebook calling the library), every interrupt counts as real."""
    return bool(_signals_received) or not _recording[0]


def last_signal() -> int | None:
    """The last stop signal this process was sent (see :func:`note_signal`), or None."""
    return _signals_received[-1] if _signals_received else None


def _on_sigint(signum, frame):
    note_signal(signum)
    raise KeyboardInterrupt


def record_interrupts() -> None:
    """Ctrl-C keeps raising ``KeyboardInterrupt``, but the process now remembers that it came
    from a signal (:func:`signal_received`). Only Python's default handler is replaced: an
    ignored SIGINT (a background job) stays ignored, and a handler someone set stays theirs."""
    if threading.current_thread() is not threading.main_thread():
        return
    current = signal.getsignal(signal.SIGINT)
    if current is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
    if current in (signal.default_int_handler, _on_sigint, signal.SIG_IGN):  # SIG_IGN: no Ctrl-C can arrive
        _recording[0] = True


class GnnBridgeError(Exception):
    """Base of all user-facing errors; ``str(err)`` is the one line shown to the user."""

    def __str__(self) -> str:  # KeyError quotes its message; we never want that.
        return str(self.args[0]) if self.args else self.__class__.__name__


class ConfigError(GnnBridgeError, ValueError):
    """A config key, value or type is wrong."""


class DataError(GnnBridgeError, ValueError):
    """A dataset file or in-memory graph breaks an invariant."""


class DataFileNotFoundError(GnnBridgeError, FileNotFoundError):
    """A file the user named does not exist or cannot be read."""


class UnknownNameError(GnnBridgeError, KeyError):
    """A name (backend, dataset, experiment, architecture ...) is not registered."""


class BackendUnavailableError(GnnBridgeError, RuntimeError):
    """A registered backend cannot run here (library missing, wrong build, no CUDA ...)."""


class OutputExistsError(GnnBridgeError, FileExistsError):
    """The output folder already holds a run; we never overwrite a user's results."""


class CheckpointError(GnnBridgeError, ValueError):
    """A checkpoint is missing, corrupt, from another model, or carries pickled code."""


class OutputPathError(GnnBridgeError, OSError):
    """An output (run folder, checkpoint, prediction file) cannot be written where the user asked."""


class ResourceError(ConfigError):
    """A value asks for more memory or disk than the machine has: refused before allocating it."""


DIVERGED = "Training diverged"  # how a TrainingDivergedError's line starts, also as another rank's failure


class TrainingDivergedError(GnnBridgeError, FloatingPointError):
    """The loss or the model's outputs became NaN or infinite; nothing past the last good
    checkpoint is kept. Its line starts with :data:`DIVERGED`."""


class RunInterrupted(KeyboardInterrupt):
    """The run was stopped by SIGINT (Ctrl-C) or SIGTERM, in any launch mode.

    A ``KeyboardInterrupt``, so library callers (a notebook, a script) see what they pressed;
    ``str(err)`` is the one line the CLI prints (what was kept and how to continue) and
    ``exit_code`` is the shell's ``128 + signal``."""

    def __init__(self, signum: int, message: str = ""):
        super().__init__(message or f"Stopped by {signal_name(signum)}; nothing was written.")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum)

    def __str__(self) -> str:
        return str(self.args[0])


def signal_name(signum: int) -> str:
    import signal

    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    return f"{name} (Ctrl-C)" if name == "SIGINT" else name


class RankFailedError(GnnBridgeError, RuntimeError):
    """A training process failed; the message names the rank and its error.

    In a torchrun / SLURM job every rank raises it; ``quiet`` is set on all but one rank per
    node, so the CLI prints the line once per node instead of once per rank."""

    quiet = False


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """Return `` (did you mean 'x'?)`` for the closest choice, or an empty string.

    Case is ignored (``IMDB-BINARY`` finds ``imdb-binary``); the suggestion keeps the choice's own."""
    by_lower = {c.lower(): c for c in choices}
    typed = str(value).lower()
    close = difflib.get_close_matches(typed, list(by_lower), n=5, cutoff=0.6)
    # Among the close ones, the fewest edits wins, a swap of two neighbours counting one ('gta'
    # is one swap from 'gat', two edits from 'hgt': difflib's ratio ties them).
    close.sort(key=lambda c: (_edits(typed, c), -difflib.SequenceMatcher(None, typed, c).ratio()))
    return f" (did you mean '{by_lower[close[0]]}'?)" if close else ""


def _edits(a: str, b: str) -> int:
    """Edits from ``a`` to ``b``: insertions, deletions, substitutions and swaps of neighbours
    (the optimal string alignment distance)."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


HIDDEN = "***"  # what a password is shown as
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://\S+")


def hide_url_password(url: str) -> str:
    """``url`` with the password of its user-info (``user:password@``, up to the last ``@``
    before the query, so that an unencoded ``/`` or ``@`` in it is hidden too) and of a
    ``password=`` parameter replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    head, mark, query = rest.partition("?")
    userinfo, at, hostpath = head.rpartition("@")
    if at and ":" in userinfo:
        head = f"{userinfo.partition(':')[0]}:{HIDDEN}@{hostpath}"
    query = re.sub(r"(?i)(^|&)password=[^&]*", rf"\1password={HIDDEN}", query)
    return f"{scheme}{sep}{head}{mark}{query}"


def scrubbed(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***``: whatever leaves the
    process (a crash report, a tracked run's params, a warning) may quote a URL as the user typed
    it, ``postgresql://user:secret@host/db`` or ``https://user:token@mlflow.lab``."""
    return _URL.sub(lambda url: hide_url_password(url.group(0)), text)


def unknown_name(kind: str, value: str, choices: Iterable[str], fix: str = "") -> UnknownNameError:
    """Build the standard "Unknown <kind> 'x'. Available: a, b." error."""
    choices = sorted(choices)
    msg = f"Unknown {kind} '{value}'{did_you_mean(value, choices)}. Available: {', '.join(choices) or 'none'}."
    return UnknownNameError(f"{msg} {fix}".strip())
