"""Writing files safely, in one place: every file gnnbridge keeps or hands to a user is written
through here. (Not through here: scratch files a step creates and removes itself, the node-shared
tensors in shared memory, the crash report ``tempfile`` names, files another library writes.)

Three ways of writing, each kept hand-written because the standard library stops short of it:

* **Replace** (:func:`replace`, :func:`replacing`, :func:`write_text`, :func:`write_json`,
  :func:`append_text`, :func:`replace_with_copy`): the file a run keeps rewriting (a checkpoint, ``results.json``, a
  metrics table). ``os.replace`` renames atomically, but neither it nor ``tempfile`` fsyncs the
  new file before the rename nor the folder after it, so a power cut could bring back the old
  name or an empty file; here both are fsynced.
* **Publish** (:func:`reserved`, :func:`publish`): a file the user named that must never
  replace an existing one (``predict --out``, ``plot --out``). A rename always replaces; a hard
  link (``os.link``) fails on an existing name instead, so the file is written beside its target
  and linked into place.
* **Lock** (:func:`lock_run_folder`, :func:`release_run_folder`, :func:`run_folder_in_use`,
  :func:`taking_turns`): one run per run folder, one prepare per dataset folder. ``fcntl.flock``
  is the lock the kernel drops when its process dies, however it dies; the standard library
  offers nothing above it.

Why replace whole: a run folder lives on after its run (``--resume`` continues it, a restart
rewrites it, a user copies or shares it), and any file in it may meanwhile have become a
symbolic or hard link to a file elsewhere. Writing in place (``open(path, "a")``,
``savefig(path)``) would write through such a link, outside the folder, into whatever it names;
and a write cut short (a crash, a full disk, Ctrl-C) would leave half a file that the next
reader trusts. So every writer fills a temporary file of its own beside the target, created
with ``O_EXCL | O_NOFOLLOW`` (never an existing file, never a link), and renames it over the
target in one step: a rename replaces a link itself, never what it points to, and a reader sees
the old file or the new one, whole.

Stop signals (Ctrl-C, SIGTERM, SIGHUP) are held while a file is replaced
(:func:`~gnnbridge.core.compiled.signals_deferred`) and delivered once it is in place: a write
that started ends, so ``torch.save``'s C++ writer never sees an interrupt (it turned one into
"RuntimeError ... inline_container", reported as a crash), and the stop then comes as itself.
A long fill (a prepared array) asks not to hold them (``hold_signals=False``).

An append is a read, a rewrite and a replace (:func:`append_text`): the files appended to (a
metrics table) are small. :func:`links_leaving` finds links a run folder must not hold before
anything writes into it. :func:`output_error` turns an ``OSError`` into the one line a user
reads. This is a layer of its own under everything that writes (``training``, ``app``, the
backends and the built-in plugins); it imports only ``errors`` and ``compiled``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from gnnbridge.core.compiled import signals_deferred
from gnnbridge.core.errors import OutputExistsError, OutputPathError

PARTIAL = ".partial"  # what a write killed midway leaves (see remove_partial)
# A file being written for publish: named apart from PARTIAL, so the remove_partial of a run
# continued in the same folder never takes a predict's file from under it.
UNPUBLISHED = ".tmp"
LOCK = ".gnnbridge.lock"  # a run folder's lock file
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_held: dict[Path, int] = {}  # run folder -> the descriptor holding its lock, in this process


def partial_name(path: Path, ending: str = PARTIAL) -> Path:
    """A temporary name beside ``path`` that no other writer shares (pid and a random tag)."""
    return path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}{ending}")


# --------------------------------------------------------------------------- replace


@contextlib.contextmanager
def replacing(path: Path, hold_signals: bool = True) -> Iterator[Path]:
    """Yield a fresh temporary name beside ``path`` to fill (it does not exist yet); it then
    replaces ``path`` in one rename, or is removed. Stop signals wait for the end of the block
    (unless ``hold_signals`` is False: a long fill stays interruptible)."""
    with signals_deferred() if hold_signals else contextlib.nullcontext():
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


def write_text(path: Path, text: str) -> None:
    """:func:`replace` with an ``OSError`` turned into one line naming ``path``
    (:func:`output_error`)."""
    try:
        replace(path, text)
    except OSError as exc:
        raise output_error(path, exc, path.name) from None


def write_json(path: Path, payload: Any) -> None:
    """``payload`` as indented JSON, through :func:`write_text`."""
    write_text(path, json.dumps(payload, indent=2) + "\n")


def replace_with_copy(path: Path, src: Path) -> None:
    """``path`` becomes the same file as ``src``: a hard link (no second write) where the file
    system has them, else a copy; atomic either way. Raises ``OSError``; ``path`` is then
    untouched."""
    try:
        with replacing(path) as tmp:
            os.link(src, tmp)
    except OSError:
        with open(src, "rb") as f:
            replace(path, lambda out: shutil.copyfileobj(f, out))


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


def fsync_file(path: Path) -> None:
    """Flush ``path``'s written data to disk (a file filled through a memory map, say)."""
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def replace_link(link: Path, source: Path) -> None:
    """``link`` becomes a symbolic link to ``source`` in one rename: concurrent processes never see
    a half-made link or none at all."""
    if link.is_symlink() and Path(os.readlink(link)) == source:
        return
    tmp = link.with_name(f".{link.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(source)
    os.replace(tmp, link)


# --------------------------------------------------------------------------- publish


@contextlib.contextmanager
def reserved(out: Path, what: str = "--out") -> Iterator[Path]:
    """A new empty temporary file beside ``out`` (its folder made first), created before any work
    so an unwritable folder is found at once, and always removed; ``out`` itself appears only
    whole, through :func:`publish`. A failure to create it is :func:`output_error`'s line."""
    tmp = partial_name(out, UNPUBLISHED)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.touch(exist_ok=False)
    except OSError as exc:
        raise output_error(out, exc, what) from None
    try:
        yield tmp
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def publish(out: Path, tmp: Path, write: Callable[[BinaryIO], object], doing: str, what: str = "--out") -> None:
    """Fill ``tmp`` (from :func:`reserved`) with what ``write`` writes to the open binary file,
    then hard-link it as ``out``: a link, unlike a rename, never replaces a file, so one that
    appeared meanwhile is left as it is (one line: it "appeared while ``doing``"). Any other
    ``OSError`` is :func:`output_error`'s line."""
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.link(tmp, out)
    except FileExistsError:
        raise OutputExistsError(f"'{out}' appeared while {doing}; it was left as it is.") from None
    except OSError as exc:
        raise output_error(out, exc, what) from None


# --------------------------------------------------------------------------- lock


def lock_run_folder(run_dir: Path) -> None:
    """Hold ``run_dir`` for this process until :func:`release_run_folder` (or its exit): an
    exclusive ``flock`` on its ``.gnnbridge.lock``; refuse if another process holds it."""
    if run_dir in _held:
        return
    try:  # never through a link: the lock file is created in the folder, or is the folder's own
        fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise OutputPathError(
            f"'{run_dir / LOCK}' is a symbolic link; gnnbridge writes only inside a run folder: "
            "remove the link, then try again."
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise OutputExistsError(
            f"Run folder '{run_dir}' is in use by another gnnbridge run (training or resuming it); wait for it to "
            "finish, or choose another folder."
        ) from None
    except OSError:  # a file system without locks (some network mounts): go on unguarded
        pass
    _held[run_dir] = fd


def release_run_folder(run_dir: Path | None) -> None:
    fd = _held.pop(run_dir, None) if run_dir is not None else None
    if fd is not None:
        os.close(fd)


def run_folder_in_use(path: Path) -> bool:
    """Whether another process holds ``path``'s lock (this one's own hold does not count)."""
    if path in _held or not (path / LOCK).is_file():
        return False
    try:
        fd = os.open(path / LOCK, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


@contextlib.contextmanager
def taking_turns(folder: Path) -> Iterator[None]:
    """Wait for, then hold, an exclusive ``flock`` on ``folder/.lock`` for the block: two prepares
    of one folder take turns (the second then finds it prepared). A block that leaves nothing
    else in ``folder`` (a refused prepare) takes the folder away with its lock, so a refusal
    leaves no trace; a waiter that then wakes on the removed lock takes a new one."""
    lock = folder / ".lock"
    while True:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.fstat(fd).st_ino == os.stat(lock).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)  # woke on a lock its holder removed: take the one there now
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if [p.name for p in folder.iterdir()] == [lock.name]:
                lock.unlink()
                folder.rmdir()
        os.close(fd)  # releases the lock


# --------------------------------------------------------------------------- errors and links


OS_REASONS = {
    errno.EROFS: "it is on a read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.ENAMETOOLONG: "a name in it is longer than the file system allows (255 bytes)",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.EEXIST: "it exists and is not a folder (a file, or a link to nothing)",
    errno.ENOENT: "a part of the path does not exist (a link to nothing?)",
    errno.ELOOP: "it is a loop of symbolic links",
}


def output_error(path: Path, exc: OSError, what: str) -> OutputPathError:
    """One line for an ``OSError`` raised while writing ``path``: what, where, why, and the fix."""
    reason = OS_REASONS.get(exc.errno, exc.strerror or type(exc).__name__)
    fix = (
        "free some space and try again"
        if exc.errno in (errno.ENOSPC, errno.EDQUOT)
        else "choose a folder you can write (--out DIR)"
    )
    return OutputPathError(f"Cannot write {what} '{path}': {reason}; {fix}.")


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
