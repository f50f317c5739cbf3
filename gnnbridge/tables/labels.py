"""The labelled table's labels and splits, coded batch by batch, so that a labelled edge table is
sorted out of core like any other: its label, time and split columns are carried with its rows
(:mod:`.edgesort`) and its split indices are counted over chunks of the sorted arrays.

Classes are what the kept rows hold, in order (numbers by value, then text): a first pass over
every row finds the classes there are, the second codes each kept row against them and marks the
classes it meets, and the codes are renumbered to the classes met (an order-keeping map, so rows
sorted by the first codes are sorted by the last). A time split ranks rows by (time, position)
without sorting them: the time at each cut is found 16 bits at a time by counting over chunks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from gnnbridge.core.errors import DataError
from gnnbridge.tables.transforms import category_text, to_float

SPLITS = ("train", "val", "test")
SPLIT_WORDS = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val", "test": "test"}
TIME_FRACTIONS = (0.6, 0.2)
CHUNK = 1 << 22  # rows of a sorted array read at once to count its splits


def label_order(v):
    try:
        return (0, float(v), "")
    except ValueError:
        return (1, 0.0, v)


class LabelCoder:
    """One label column (``where``: TABLE.COLUMN) coded for ``target``, or with ``saved`` (``--like``:
    the earlier folder's ``labels`` entry) against that folder's classes."""

    def __init__(self, target: str, where: str, saved: dict | None = None):
        self.target = saved["target"] if saved else target
        self.where, self.saved = where, saved
        self.values: set = set()  # first pass: the classes (or a multilabel's labels) of every row
        self.vocab: list | None = None  # what rows are coded against until finish
        self.rows = self.missing = self.unknown = 0
        self._seen = self._keep = None

    # first pass --------------------------------------------------------------
    def observe(self, column) -> None:
        """Every row of the table (dropped ones too): the classes there are."""
        if self.saved or self.target == "regression":
            return
        import pyarrow.compute as pc

        distinct = pc.unique(category_text(column)).drop_null().to_pylist()
        if self.target == "class":
            self.values.update(distinct)
        else:
            self.values.update(p for v in distinct for p in v.split("|") if p)

    def start(self) -> None:
        """After the first pass: the classes the second codes against."""
        if self.saved:
            self.vocab = self.saved.get("classes", self.saved.get("labels", []))
        elif self.target == "class":
            self.vocab = sorted(self.values, key=label_order)
        else:
            self.vocab = sorted(self.values)
        self._seen = np.zeros(len(self.vocab), bool)

    @property
    def dtype(self) -> str:
        return "int64" if self.target == "class" else "float32"

    @property
    def width(self) -> int:
        """Values a row (0: one); a multilabel row has one per label."""
        return len(self.vocab) if self.target == "multilabel" else 0

    # second pass -------------------------------------------------------------
    def encode(self, column) -> np.ndarray:
        """The kept rows of a batch: class codes (int64), values (float32, NaN missing) or 0/1 rows
        (float32, NaN where missing), until :meth:`finish` tells how to renumber them."""
        if self.target == "regression":
            v = to_float(column, "numeric").astype(np.float32)
            self.missing += int(np.isnan(v).sum())
        elif self.target == "class":
            v = self._classes(column)
        else:
            v = self._multilabel(category_text(column).to_pylist())
        self.rows += len(column)
        return v

    def _classes(self, column) -> np.ndarray:
        import pyarrow as pa
        import pyarrow.compute as pc

        index = pc.index_in(category_text(column), value_set=pa.array(self.vocab, pa.string()))
        known = index.is_valid().to_numpy(zero_copy_only=False)
        codes = index.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        if self.saved:  # placeholders take the classes in turn: the folder check wants two classes
            turn = (self.rows + np.arange(len(codes))) % len(self.vocab)
            self.unknown += int((~known).sum())
            return np.where(known, codes, turn)
        self.missing += int((~known).sum())
        self._seen[codes[known]] = True
        return codes

    def _multilabel(self, values: list) -> np.ndarray:
        slot = {v: i for i, v in enumerate(self.vocab)}
        y = np.zeros((len(values), len(self.vocab)), dtype=np.float32)
        for i, x in enumerate(values):
            if self.saved:
                parts = [slot.get(p) for p in (x or "").split("|") if p]
                y[i] = np.nan if x is None or None in parts else 0.0
                y[i, [p for p in parts if p is not None]] = 1.0
            elif x is None:
                y[i] = np.nan
            else:
                y[i, [slot[p] for p in x.split("|") if p]] = 1.0
        if self.saved:
            self.unknown += int(np.isnan(y).any(axis=1).sum())
        else:
            self._seen |= (y == 1).any(axis=0)
        return y

    # after it ----------------------------------------------------------------
    def finish(self) -> dict:
        """The labels' entry of ``tables.json``; refuses labels training cannot use. From here
        :meth:`final` renumbers coded rows to the classes the kept rows hold."""
        if self.saved:
            if self.target == "regression":
                self.unknown = self.missing
            return self.saved
        where = self.where
        if self.target == "regression":
            if self.missing == self.rows:
                raise DataError(f"Label {where} has no value on any row (target regression).")
            return {"target": "regression", "missing": self.missing}
        if self.target == "class" and self.missing:
            raise DataError(
                f"Label {where} is missing on {self.missing} rows; target class needs a label on every row "
                "(fill them, or --target regression)."
            )
        kept = [v for v, seen in zip(self.vocab, self._seen) if seen]
        self._keep = np.flatnonzero(self._seen) if self.target == "multilabel" else np.cumsum(self._seen) - 1
        self.vocab, self._seen = kept, np.ones(len(kept), bool)
        if self.target == "class":
            return {"target": "class", "classes": kept}
        return {"target": "multilabel", "labels": kept, "separator": "|"}

    def final(self, rows: np.ndarray) -> np.ndarray:
        if self._keep is None:
            return rows
        return self._keep[rows] if self.target == "class" else rows[:, self._keep]

    @staticmethod
    def sort_key(rows: np.ndarray) -> np.ndarray:
        """What an edge's label adds to its sort (last of its keys): the first value, missing lowest."""
        return np.nan_to_num(rows.reshape(len(rows), -1)[:, 0].astype(np.float64), nan=-1e300)


class SplitWords:
    """A split column's words coded 0, 1, 2 (train, val, test), -1 where empty; any other word is
    kept to be named by :meth:`check`."""

    def __init__(self, where: str):
        self.where, self.bad = where, set()

    def encode(self, column) -> np.ndarray:
        import pyarrow.compute as pc

        text = category_text(column)
        words = pc.unique(text).drop_null()
        table = np.array([self._code(v) for v in words.to_pylist()] + [-1], dtype=np.int8)
        return table[pc.index_in(text, value_set=words).fill_null(-1).to_numpy(zero_copy_only=False)]

    def _code(self, v: str) -> int:
        word = SPLIT_WORDS.get(v.lower())
        if word is None:
            self.bad.add(v)
            return -1
        return SPLITS.index(word)

    def check(self) -> None:
        if self.bad:
            raise DataError(f"Split column {self.where} holds {sorted(self.bad)[:3]}; use train, val, test (or empty).")


def write_splits(label, path: Callable[[str], Path], which=None, time=None, time_column: str = "") -> None:
    """``path(split)`` for each split of the rows of ``label`` (an array or a memory-mapped one):
    from the split codes ``which``, else by ``time`` (train before val before test, ties in row
    order), else none (seeded at train). Only labelled rows (a value, or a class) are split."""
    n = len(label)
    if which is not None:
        _write_index(path, n, lambda lo, hi: [(which[lo:hi] == s) & _labelled(label, lo, hi) for s in range(3)])
        return
    if time is None:
        return
    missing = sum(int(np.isnan(time[lo : lo + CHUNK]).sum()) for lo in range(0, n, CHUNK))
    if missing:
        raise DataError(f"Time column {time_column} is missing on {missing} rows; every labelled row needs a time.")
    count = sum(int(_labelled(label, lo, min(lo + CHUNK, n)).sum()) for lo in range(0, n, CHUNK))
    cuts = [_cut(label, time, int(count * f)) for f in (TIME_FRACTIONS[0], sum(TIME_FRACTIONS))]

    def masks(lo: int, hi: int) -> list:
        keys, pos, labelled = _time_keys(time[lo:hi]), np.arange(lo, hi), _labelled(label, lo, hi)
        before = [_before(keys, pos, cut) for cut in cuts]
        return [labelled & before[0], labelled & ~before[0] & before[1], labelled & ~before[1]]

    _write_index(path, n, masks)


def _labelled(label, lo: int, hi: int) -> np.ndarray:
    part = np.asarray(label[lo:hi])
    if part.dtype.kind != "f":
        return np.ones(hi - lo, bool)
    return ~np.isnan(part.reshape(hi - lo, -1)).all(axis=1)


def _write_index(path: Callable[[str], Path], n: int, masks: Callable[[int, int], list]) -> None:
    """Each split's row numbers (ascending) into its file: counted over chunks, then filled."""
    counts = np.zeros(3, np.int64)
    for lo in range(0, n, CHUNK):
        counts += [int(m.sum()) for m in masks(lo, min(lo + CHUNK, n))]
    out = [np.lib.format.open_memmap(path(s), "w+", np.int64, (int(c),)) for s, c in zip(SPLITS, counts)]
    filled = np.zeros(3, np.int64)
    for lo in range(0, n, CHUNK):
        for i, m in enumerate(masks(lo, min(lo + CHUNK, n))):
            rows = np.flatnonzero(m) + lo
            out[i][filled[i] : filled[i] + len(rows)] = rows
            filled[i] += len(rows)
    for m in out:
        m.flush()


def _time_keys(t) -> np.ndarray:
    """Times (float64, no NaN) as uint64 keys in the same order (-0.0 as 0.0, which it equals)."""
    bits = (np.asarray(t, np.float64) + 0.0).view(np.uint64)
    return np.where(bits >> np.uint64(63), ~bits, bits | np.uint64(1 << 63))


def _cut(label, time, k: int) -> tuple[int, int] | None:
    """(time key, row) of the labelled row ranked ``k`` in (time, row) order; None past the last."""
    n, prefix = len(label), 0
    for shift in (48, 32, 16, 0):
        counts = np.zeros(1 << 16, np.int64)
        for keys, _ in _labelled_keys(label, time, n):
            if shift < 48:
                keys = keys[(keys >> np.uint64(shift + 16)) == np.uint64(prefix)]
            counts += np.bincount(((keys >> np.uint64(shift)) & np.uint64(0xFFFF)).astype(np.int64), minlength=1 << 16)
        cum = np.cumsum(counts)
        if k >= cum[-1]:
            return None
        digit = int(np.searchsorted(cum, k, side="right"))
        k -= int(cum[digit - 1]) if digit else 0
        prefix = (prefix << 16) | digit
    for keys, pos in _labelled_keys(label, time, n):
        same = pos[keys == np.uint64(prefix)]
        if k < len(same):
            return prefix, int(same[k])
        k -= len(same)
    return None


def _labelled_keys(label, time, n: int):
    for lo in range(0, n, CHUNK):
        hi = min(lo + CHUNK, n)
        labelled = _labelled(label, lo, hi)
        yield _time_keys(time[lo:hi])[labelled], np.flatnonzero(labelled) + lo


def _before(keys: np.ndarray, pos: np.ndarray, cut) -> np.ndarray:
    if cut is None:
        return np.ones(len(keys), bool)
    key, row = np.uint64(cut[0]), cut[1]
    return (keys < key) | ((keys == key) & (pos < row))
