"""Writing a file in a run folder: it is replaced whole, never written in place or through a link.

Why: a run folder lives on after its run (``--resume`` continues it, a restart rewrites it, a
user copies or shares it), and any file in it may meanwhile have become a symbolic or hard link
to a file elsewhere. Writing in place (``open(path, "a")``, ``savefig(path)``) would write
through such a link, outside the folder, into whatever it names; and a write cut short (a crash,
a full disk, Ctrl-C) would leave half a file that the next reader trusts. So every writer fills
a temporary file of its own beside the target, created with ``O_EXCL | O_NOFOLLOW`` (never an
existing file, never a link), and renames it over the target in one step: a rename replaces a
link itself, never what it points to, and a reader sees the old file or the new one, whole.

Stop signals (Ctrl-C, SIGTERM, SIGHUP) are held while a file is written
(:func:`~gnnbridge.core.compiled.signals_deferred`) and delivered once it is in place: a write
that started ends, so ``torch.save``'s C++ writer never sees an interrupt (it turned one into
"RuntimeError ... inline_container", reported as a crash), and the stop then comes as itself.

An append is a read, a rewrite and a replace (:func:`append_text`): the files appended to (a
metrics table) are small. :func:`links_leaving` finds links a run folder must not hold before
anything writes into it.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from gnnbridge.core.compiled import signals_deferred

PARTIAL = ".partial"  # what a write killed midway leaves (see remove_partial)
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def partial_name(path: Path) -> Path:
    """A temporary name beside ``path`` that no other writer shares (pid and a random tag)."""
    return path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}{PARTIAL}")


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """Yield a fresh temporary name beside ``path`` to fill (it does not exist yet); it then
    replaces ``path`` in one rename, or is removed. Stop signals wait for the end of the block."""
    with signals_deferred():
        tmp = partial_name(path)
        try:
            yield tmp
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)


def replace(path: Path, content: bytes | str | Callable[[BinaryIO], object]) -> None:
    """``path`` becomes a new file holding ``content`` (bytes, text as UTF-8, or what a function
    writes to the open binary file), on disk (fsynced) before it takes the name. Raises
    ``OSError``; the old file is then untouched."""
    with replacing(path) as tmp, os.fdopen(os.open(tmp, _NEW, 0o666), "wb") as f:
        if callable(content):
            content(f)
        else:
            f.write(content.encode() if isinstance(content, str) else content)
        f.flush()
        os.fsync(f.fileno())


def append_text(path: Path, text: str) -> None:
    """``path`` becomes its old content followed by ``text`` (a new file, like :func:`replace`)."""
    try:
        with open(path, "rb") as f:
            old = f.read()
    except FileNotFoundError:
        old = b""
    replace(path, old + text.encode())


def remove_partial(folder: Path) -> None:
    """Remove the temporary files that writes killed midway left in ``folder`` (a run folder is
    locked by one run at a time, so none of them is still being written)."""
    for leftover in Path(folder).glob(f".*{PARTIAL}"):
        with contextlib.suppress(OSError):
            leftover.unlink()


def links_leaving(folder: Path) -> list[tuple[Path, str]]:
    """The symbolic links under ``folder`` (its subfolders included, links not followed) that
    lead out of it, as (the link relative to ``folder``, what it points to). A link to a file
    or folder inside is harmless: writes replace the link, and nothing outside is reached."""
    root = os.path.realpath(folder)
    found = []
    for parent, dirs, names in os.walk(folder):
        for name in sorted(dirs + names):
            link = os.path.join(parent, name)
            if not os.path.islink(link):
                continue
            target = os.path.realpath(link)
            if os.path.commonpath([root, target]) != root:
                found.append((Path(os.path.relpath(link, folder)), os.readlink(link)))
    return found


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (a power cut after it must not bring back the old name)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some network file systems refuse it
        pass
    finally:
        os.close(fd)
