"""The one reader of ``.npy`` headers: a folder's files, an archive's members, a benchmark's shapes.

Why read the header alone: it says what an array claims to be (dtype, shape, order) before a
byte of it is read or mapped, so a file that claims 10**12 elements, another dtype or more
bytes than it holds is refused in one line before anything is allocated. numpy has a reader
per format version (``np.lib.format.read_array_header_1_0`` / ``_2_0``) but no one function
over them; version 3.0 exists only for structured dtypes, which no array of ours is.
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def read_header(f: BinaryIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran order, dtype)`` of the ``.npy`` stream ``f``, read from its start; ``f``
    is left at the first byte of the data. ValueError (or EOFError) where ``f`` is not an
    ``.npy`` of version 1 or 2."""
    version = np.lib.format.read_magic(f)
    if version not in READERS:
        raise ValueError(f"npy format version {version}")
    return READERS[version](f)
