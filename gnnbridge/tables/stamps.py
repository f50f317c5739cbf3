"""Fingerprints of the files a table source reads, so that prepare never writes a dataset of a
state its files were never in.

Prepare reads each table twice (its keys and encoders, then its rows) and joins the tables by
key: a file that a writer appends to, truncates, rewrites, replaces or removes while that goes on
is read half before and half after (a Parquet footer of one version and row groups of another, a
customer that the second pass sees and the first never did). So each file's fingerprint (size,
modification time in nanoseconds, inode) is taken when the source is opened, before anything is
read from it, and compared once the last batch is read, before the folder is swapped into place:
a difference is refused in one line naming the files, and nothing is written. A failure of the
read that such a change caused (a file removed or cut short under the reader) is told as the
change, not as its symptom.

The fingerprints also go into ``tables.json``, so a later prepare into the same ``--out`` can say
which files changed since (a note: the new state is read whole, there is nothing to refuse).

What it assumes: a writer moves a file's size or modification time, or puts a new file in its
place (a new inode), as every writer does unless it sets the time back by hand. A database's side
file is fingerprinted with it (SQLite's ``-wal``, DuckDB's ``.wal``: a committed write may sit
there before it reaches the main file); a side file that is absent and one that is empty are the
same (a reader opening a SQLite database in WAL mode creates it empty). A file added to a folder
after it was listed is not read, so it changes nothing. A source with no files on this disk (a
PostgreSQL server) has no fingerprints: it reads one snapshot instead (:mod:`.postgres`).
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from gnnbridge.core.errors import DataError


class SourceChangedError(DataError):
    """A source file changed while prepare read it; the same prepare once its writer is done works."""


@dataclass(frozen=True)
class Files:
    """The files a source reads (by the path shown to the user), fingerprinted when it was opened;
    ``sides`` are the side files among them (absent and empty the same)."""

    taken: dict = field(default_factory=dict)
    sides: frozenset = frozenset()

    @classmethod
    def of(cls, files: Iterable[Path], sides: Iterable[Path] = ()) -> Files:
        """The fingerprints of ``files`` and ``sides`` now: call it before reading any of them."""
        sides = [str(p) for p in sides]
        taken = {str(p): fingerprint(Path(p), str(p) in sides) for p in [*map(str, files), *sides]}
        return cls(taken, frozenset(sides))

    def changes(self) -> list[str]:
        """``NAME (what changed)`` of each file whose fingerprint differs now from when it was taken."""
        out = []
        for path, before in self.taken.items():
            what = change(before, fingerprint(Path(path), path in self.sides))
            if what:
                out.append(f"{path} ({what})")
        return out

    def record(self) -> dict:
        """``{absolute path: fingerprint}`` of the files (side files left out), for ``tables.json``."""
        return {str(Path(p).resolve()): s for p, s in self.taken.items() if p not in self.sides and s}


def fingerprint(path: Path, side: bool = False) -> dict | None:
    """``{"size", "mtime_ns", "inode"}`` of ``path``; None when it is absent (or, a side file, empty)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    if side and st.st_size == 0:
        return None
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def change(before: dict | None, after: dict | None) -> str | None:
    """What differs between two fingerprints, in words; None when nothing does. Only the keys
    ``before`` holds are compared (a ``tables.json`` written before inodes were recorded has none)."""
    if before is None or after is None:
        if before == after:
            return None
        return "removed" if after is None else f"size 0 -> {after['size']}"
    if before.get("inode", after["inode"]) != after["inode"]:
        return "replaced by another file"
    if before["size"] != after["size"]:
        return f"size {before['size']} -> {after['size']}"
    return "modified time changed" if before["mtime_ns"] != after["mtime_ns"] else None


def changed_since(recorded: dict) -> list[str]:
    """``NAME (what changed)`` of the files ``recorded`` (by :meth:`Files.record`) that differ now."""
    out = []
    for path, before in recorded.items():
        what = change(before, fingerprint(Path(path)))
        if what:
            out.append(f"{Path(path).name} ({what})")
    return out


@contextmanager
def read_unchanged(files: Files, out):
    """The reading of a source (its schema checked or inferred, both passes of the build), refused
    at its end when one of ``files`` changed meanwhile; a failure while one did is that refusal too
    (a file removed or cut short under the reader fails it, and the change is what to fix).
    Interrupts pass through untouched: a stop is not a change."""
    try:
        yield
    except Exception:
        _refuse(files, out)
        raise
    _refuse(files, out)


def _refuse(files: Files, out) -> None:
    changed = files.changes()
    if changed:
        them = "it" if len(changed) == 1 else "them"
        raise SourceChangedError(
            f"{', '.join(changed)} changed while prepare read {them}; prepare again once whatever writes "
            f"{them} is done (nothing was written to {out})."
        ) from None
