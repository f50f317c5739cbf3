"""Key columns as numpy arrays, built from arrow's buffers without a Python object per row, and
sets of keys kept as sorted unique arrays, so that memory follows the distinct keys, not the rows.

A key compares alike from every source: an integer column as int64, anything else as its text
(arrow's cast to string) in UTF-8, as fixed-width numpy bytes (``S``, NUL-padded to the longest
key). UTF-8's byte order is code-point order, so text keys sort exactly as numpy's ``str`` (and
Python's) would, at a quarter of its memory; like numpy's ``str``, a trailing NUL is padding.

Why sort-based and hand-written: ``np.unique`` in numpy 2.4 hashes and then sorts, about 100 times
slower than sorting on 10M keys; ``pyarrow.compute.index_in`` rebuilds its hash table of the
value set on every call, so a set of 10M keys cannot be asked batch by batch.
"""

from __future__ import annotations

import numpy as np

SCATTER_BYTES = 1 << 24  # text bytes copied at once when keys differ in length
MERGE_ROWS = 1 << 20  # a key set merges its pending batches once they hold this many (or its own size)


def text_bytes(array) -> np.ndarray:
    """A string array's values (missing ones as empty) as fixed-width UTF-8 bytes, NUL-padded."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(array, pa.ChunkedArray):
        parts = [text_bytes(c) for c in array.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, "S1")
    if array.null_count:
        array = pc.fill_null(array, "")
    n = len(array)
    if n == 0:
        return np.zeros(0, "S1")
    _, offsets, data = array.buffers()
    wide = pa.types.is_large_string(array.type)
    offsets = np.frombuffer(offsets, np.int64 if wide else np.int32)[array.offset : array.offset + n + 1]
    data = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets).astype(np.int64)
    width = max(int(lengths.max()), 1)
    if (lengths == width).all():
        return data[offsets[0] : offsets[-1]].view(f"S{width}").copy()
    out = np.zeros((n, width), np.uint8)
    step = max(1, SCATTER_BYTES // width)
    for lo in range(0, n, step):
        hi = min(lo + step, n)
        size, start = lengths[lo:hi], offsets[lo:hi].astype(np.int64)
        rows = np.repeat(np.arange(lo, hi), size)
        cols = np.arange(int(size.sum())) - np.repeat(start - start[0], size)
        out[rows, cols] = data[start[0] : offsets[hi]]
    return out.view(f"S{width}").ravel()


def key_values(array) -> np.ndarray:
    """A key column's present values (missing ones left out): int64 for integers, else text bytes."""
    import pyarrow as pa
    import pyarrow.compute as pc

    valid = array.drop_null()
    if pa.types.is_integer(valid.type):
        return np.asarray(valid.to_numpy(), dtype=np.int64) if len(valid) else np.zeros(0, np.int64)
    return text_bytes(pc.cast(valid, pa.string()))


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` by sorting (see the module docstring for why not ``np.unique`` itself)."""
    values = np.sort(values)
    if len(values) < 2:
        return values
    keep = np.empty(len(values), bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def _range(keys: np.ndarray, values: np.ndarray) -> tuple[int, int] | None:
    """``(first, last)`` of sorted unique integer keys that are every integer between them (ids
    counted up, the usual case), where a key's position is its distance from the first."""
    if keys.dtype.kind != "i" or values.dtype.kind != "i" or len(keys) == 0:
        return None
    first, last = int(keys[0]), int(keys[-1])
    return (first, last) if last - first + 1 == len(keys) and -(2**62) < first and last < 2**62 else None


def contains(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Whether each of ``values`` is among the sorted unique ``keys`` (of the same kind)."""
    if len(keys) == 0 or len(values) == 0:
        return np.zeros(len(values), bool)
    span = _range(keys, values)
    if span is not None:
        return (values >= span[0]) & (values <= span[1])
    pos = np.minimum(np.searchsorted(keys, values), len(keys) - 1)
    return keys[pos] == values


def count_in(keys: np.ndarray, values: np.ndarray) -> int:
    """How many of ``values`` are among the sorted unique ``keys`` (asked in sorted order)."""
    return int(contains(keys, values if _range(keys, values) else np.sort(values)).sum())


def positions(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``np.searchsorted(keys, values)``: by subtraction where the keys are a range of integers,
    else asked in sorted order (binary searches that walk the keys in order stay in cache: several
    times faster on millions of keys) and put back."""
    span = _range(keys, values)
    if span is not None:
        return np.clip(values, span[0], span[1] + 1).astype(np.int64) - span[0]
    if len(values) < 2:
        return np.searchsorted(keys, values)
    order = np.argsort(values, kind="stable")
    out = np.empty(len(values), np.int64)
    out[order] = np.searchsorted(keys, values[order])
    return out


def integer_key(t) -> bool:
    """Whether a column of arrow type ``t`` holds integer keys (else text keys: an integer 5 is not
    the text '5')."""
    import pyarrow as pa

    return pa.types.is_integer(t)


def shown(values) -> list:
    """Keys as the user wrote them, for messages (text bytes decoded)."""
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in values]


class KeySet:
    """The distinct values of one key column, fed batch by batch: each batch's sorted unique
    values wait, and are merged into one sorted array once they hold as many as it (or
    :data:`MERGE_ROWS`), so memory stays within about twice the distinct keys."""

    def __init__(self):
        self._keys: np.ndarray | None = None
        self._pending: list = []
        self._held = 0

    def add(self, values: np.ndarray) -> None:
        if len(values) == 0:
            return
        part = sorted_unique(values)
        self._pending.append(part)
        self._held += len(part)
        if self._held >= max(MERGE_ROWS, 0 if self._keys is None else len(self._keys)):
            self._merge()

    def _merge(self) -> None:
        parts = ([] if self._keys is None else [self._keys]) + self._pending
        self._keys = sorted_unique(np.concatenate(parts)) if parts else None
        self._pending, self._held = [], 0

    def keys(self) -> np.ndarray:
        """The sorted unique values."""
        if self._pending:
            self._merge()
        return self._keys if self._keys is not None else np.zeros(0, np.int64)
