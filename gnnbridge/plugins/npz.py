"""Reading a dataset ``.npz`` member by member: the one place the built-in dataset plugins read
the format (``datasets``' homogeneous graphs and collections, ``hetero_datasets``' typed keys,
``folder_datasets``' streaming into a folder of ``.npy`` files).

Why not ``numpy.load``: it trusts each member's header and allocates what it claims before
reading. Here every header (dtype, dimensions, size) is checked against the format's tables
(:mod:`gnnbridge.core.storage.formats`) and against what the member and this machine can hold
before a byte of data is read; object arrays (pickles) are refused; a member is read in chunks,
never whole into a temporary copy.
"""

from __future__ import annotations

import math
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np

from gnnbridge.core.errors import DataError, DataFileNotFoundError, ResourceError
from gnnbridge.core.interfaces import format_bytes
from gnnbridge.core.records.hetero import HeteroSource
from gnnbridge.core.records.reading import Reading, as_reading
from gnnbridge.core.storage.formats import (
    HETERO_MARKERS,
    NPZ_ARRAYS,
    check_member_header,
    graph_from_arrays,
    missing_arrays,
    missing_members,
    typed_keys,
)
from gnnbridge.core.storage.npy import read_header
from gnnbridge.plugins.options import check_fits

# NPZ_ARRAYS (core.storage.formats): what each array of the format is; nothing else in a file is
# read (an unused member is never decompressed, whatever its header claims).
DEFLATE_MAX_RATIO = 1100  # deflate cannot expand data more than ~1032x: a header claiming more lies
ZIP_ERRORS = (
    OSError,
    ValueError,
    EOFError,
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    NotImplementedError,
    RuntimeError,
    zlib.error,
    struct.error,
    KeyError,
    OverflowError,
    SyntaxError,
    TypeError,
)


def read_npz(path: Path, reading: Reading | str | None = None) -> dict[str, np.ndarray]:
    """Read the format's arrays from ``path``, checking each header (dtype, shape, size) before
    any data is read: object arrays (pickles) are refused, and so is a header that claims more
    data than the member holds or than this machine could hold.

    Why not ``numpy.load``: it trusts each header and allocates what it claims before reading.
    ``y`` is checked as labels of the reading's form (:mod:`gnnbridge.core.records.reading`;
    None: classes), and required where the reading needs node labels."""
    reading = as_reading(reading)

    def select(members: dict) -> dict:
        missing = missing_members(members, reading)
        if missing:
            raise missing_arrays(path, missing, reading)
        return {key: spec for key, spec in NPZ_ARRAYS.items() if key in members}

    arrays = read_members(path, select, form=reading.form)
    if arrays["edge_index"].shape[0] != 2:
        raise DataError(f"{path}: edge_index has shape {list(arrays['edge_index'].shape)}; expected [2, E].")
    return arrays


def is_hetero_npz(path: Path) -> bool:
    """Whether the file uses the heterogeneous format's typed keys (``kind__type``)."""
    return bool(read_members(path, lambda members: {}, names_only=True) & set(HETERO_MARKERS))


def read_members(path: Path, select, names_only: bool = False, form: str = "class"):
    """``{key: array}`` for the members ``select(members)`` returns as ``{key: (dtype, ndim)}``,
    each checked before it is read (labels as ``form``'s); ``names_only``: the set of array-kind
    prefixes present."""
    check_file(path)
    try:
        with zipfile.ZipFile(path) as archive:
            members = {info.filename[:-4]: info for info in archive.infolist() if info.filename.endswith(".npy")}
            if names_only:
                return {name.split("__", 1)[0] for name in members if "__" in name}
            return {
                key: _read_member(path, archive, members[key], key, *spec, form)
                for key, spec in select(members).items()
            }
    except (DataError, ResourceError):
        raise
    except ZIP_ERRORS as exc:
        raise not_an_npz(path, exc) from None


def check_file(path: Path) -> None:
    if path.is_dir():
        raise DataFileNotFoundError(f"Dataset file '{path}' is a folder, not a file; give the .npz file itself.")
    if path.exists() and not path.is_file():
        raise DataFileNotFoundError(
            f"Dataset file '{path}' is not a regular file (a device, pipe or socket); give the .npz file itself."
        )
    if not path.is_file():
        raise DataFileNotFoundError(
            f"Dataset file '{path}' does not exist; give an existing .npz (a run or checkpoint "
            "whose data moved: --set dataset.path=NEW)."
        )


def _read_member(
    path: Path, archive: zipfile.ZipFile, info: zipfile.ZipInfo, key: str, dtype, ndim: int, form: str
) -> np.ndarray:
    with archive.open(info) as f:
        try:
            shape, fortran, found = read_header(f)
        except ValueError as exc:
            raise DataError(
                f"{path}: {key} is not a numpy array ({str(exc)[:100]}); save arrays with numpy.savez."
            ) from None
        _check_header(path, key, found, shape, dtype, ndim, form)
        nbytes = math.prod(shape) * found.itemsize
        if nbytes > info.file_size - f.tell() or nbytes > info.compress_size * DEFLATE_MAX_RATIO + 4096:
            raise DataError(
                f"{path}: {key} claims shape {list(shape)} ({format_bytes(nbytes)}) but the file holds "
                "less: it is truncated or corrupt; write it again."
            )
        check_fits(f"{path}: {key} {list(shape)}", nbytes, "use a machine with more memory, or a smaller graph")
        buffer = bytearray(nbytes)
        if _read_into(f, buffer) != nbytes:
            raise DataError(f"{path}: {key} ends early: the file is truncated or corrupt; write it again.")
    array = np.frombuffer(buffer, dtype=found)
    return array.reshape(shape, order="F" if fortran else "C")


READ_CHUNK = 64 << 20


def _read_into(f, buffer: bytearray) -> int:
    """Fill ``buffer`` from ``f`` chunk by chunk; returns the bytes read. A zip member's
    ``readinto`` reads the whole member into a temporary ``bytes`` first, which doubled the peak
    memory of loading a Reddit-scale edge list (1.75 GB more)."""
    view, pos = memoryview(buffer), 0
    while pos < len(buffer):
        chunk = f.read(min(READ_CHUNK, len(buffer) - pos))
        if not chunk:
            break
        view[pos : pos + len(chunk)] = chunk
        pos += len(chunk)
    return pos


_check_header = check_member_header  # the format's header check, shared with folder datasets (core)


def read_hetero_npz(path: Path, form: str = "class") -> dict[str, np.ndarray]:
    """The typed arrays of a heterogeneous ``.npz`` (see docs/tasks.md, "Heterogeneous graphs"),
    labels checked as ``form``'s."""
    return read_members(path, lambda members: typed_keys(path, members), form=form)


def load_hetero_npz(path: Path) -> HeteroSource:
    """A heterogeneous graph from typed ``.npz`` keys."""
    return graph_from_arrays(path, read_hetero_npz(path), 0, path.stem)


def not_an_npz(path, exc: BaseException) -> DataError:
    """The one line for a file that is not a readable ``.npz`` (``exc``: what zipfile or numpy raised)."""
    detail = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
    return DataError(
        f"{path}: cannot be read as a numpy .npz file ({detail}); write it with "
        "numpy.savez(path, edge_index=..., x=..., y=...)."
    )
