"""Column encodings whose fitted state is kept: each is fitted in one streamed pass over a
table's record batches and applied in a second, and its state (means, ranges, vocabularies) is
plain JSON, saved in ``DIR/tables.json`` so that new rows can be encoded exactly as training's.

What each kind becomes (float32 columns of a node type's ``x`` or an edge type's ``edge_attr``):
numbers standardised (or min-max, or ``log1p`` then standardised); a missing number is filled
with the mean and flagged in a 0/1 column, never silently zero; categories one-hot over the
``max_categories`` most frequent values plus an ``other`` slot (unseen, missing and rarer values);
booleans 0/1 (missing: filled and flagged); dates as standardised time plus month and weekday as
points on a circle (sin, cos). Text and ids are left out.
"""

from __future__ import annotations

import math

import numpy as np

from gnnbridge.core.errors import DataError

KINDS = ("numeric", "categorical", "boolean", "datetime", "text", "id")
TRANSFORMS = {
    "numeric": ("standardize", "minmax", "log", "drop"),
    "categorical": ("onehot", "drop"),
    "boolean": ("binary", "drop"),
    "datetime": ("datetime", "drop"),
    "text": ("drop",),
    "id": ("drop",),
}
DEFAULT_TRANSFORM = {kind: choices[0] for kind, choices in TRANSFORMS.items()}
MAX_CATEGORIES = 32


def to_float(array, kind: str) -> np.ndarray:
    """A column's values as float64 with NaN for missing: numbers, 0/1 booleans, and dates as
    seconds since 1970 (ISO strings parsed by arrow)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if kind == "datetime":
        if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
            array = pc.strptime(array, format="%Y-%m-%d", unit="s", error_is_null=True) if _dates(array) else array
        array = pc.cast(array, pa.timestamp("s"), safe=False)
        array = pc.cast(array, pa.int64())
    elif pa.types.is_boolean(array.type):
        array = pc.cast(array, pa.int8())
    values = array.to_numpy(zero_copy_only=False)
    return np.where(pc.is_null(array).to_numpy(zero_copy_only=False), np.nan, values.astype(np.float64))


def _dates(array) -> bool:
    """Plain dates (``2024-03-05``) need strptime; timestamps cast from ISO text directly."""
    import pyarrow.compute as pc

    valid = array.drop_null()
    return len(valid) > 0 and bool(pc.all(pc.match_substring_regex(valid, r"^\d{4}-\d{2}-\d{2}$")).as_py())


def category_strings(array) -> list:
    """A categorical column's values as text (missing: None), so a category reads alike from every source."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_boolean(array.type):
        array = pc.cast(array, pa.int8())
    return pc.cast(array, pa.string()).to_pylist()


class Encoder:
    """Fits one column (``observe`` each batch, then ``finish``) and encodes batches of it."""

    def __init__(self, column: str, kind: str, transform: str, max_categories: int = MAX_CATEGORIES):
        self.column, self.kind, self.transform, self.max_categories = column, kind, transform, max_categories
        self.count = self.total = self.squares = 0.0
        self.low, self.high, self.missing = math.inf, -math.inf, 0
        self.counts: dict = {}
        self.state: dict = {}

    # fitting ---------------------------------------------------------------
    def observe(self, array) -> None:
        if self.transform == "onehot":
            for value in category_strings(array):
                self.counts[value] = self.counts.get(value, 0) + 1
            return
        v = self._numbers(array)
        ok = v[~np.isnan(v)]
        self.missing += int(v.size - ok.size)
        self.count += ok.size
        self.total += float(ok.sum())
        self.squares += float((ok * ok).sum())
        if ok.size:
            self.low, self.high = min(self.low, float(ok.min())), max(self.high, float(ok.max()))

    def _numbers(self, array) -> np.ndarray:
        v = to_float(array, self.kind)
        if self.transform == "log":
            if np.any(v < 0):
                raise DataError(
                    f"Column '{self.column}': transform log needs values >= 0; {int((v < 0).sum())} are "
                    "negative (use standardize or minmax)."
                )
            v = np.log1p(v)
        return v

    def finish(self) -> dict:
        if self.transform == "onehot":
            known = sorted(((k, c) for k, c in self.counts.items() if k is not None), key=lambda kc: (-kc[1], kc[0]))
            kept = sorted(k for k, _ in known[: self.max_categories])
            self.state = {"vocabulary": kept, "distinct": len(known), "missing": self.counts.get(None, 0)}
        else:
            mean = self.total / self.count if self.count else 0.0
            var = max(self.squares / self.count - mean * mean, 0.0) if self.count else 0.0
            std = math.sqrt(var) if var > 1e-24 else 1.0
            self.state = {"mean": mean, "std": std, "min": _finite(self.low), "max": _finite(self.high)}
            self.state["flag_missing"] = self.missing > 0
            self.state["missing"] = self.missing
        return self.describe()

    def describe(self) -> dict:
        return {"column": self.column, "kind": self.kind, "transform": self.transform, **self.state}

    # encoding --------------------------------------------------------------
    def names(self) -> list[str]:
        c = self.column
        if self.transform == "onehot":
            return [f"{c}={v}" for v in self.state["vocabulary"]] + [f"{c}=<other>"]
        base = [c] + (
            [f"{c}.month_sin", f"{c}.month_cos", f"{c}.weekday_sin", f"{c}.weekday_cos"]
            if self.kind == "datetime"
            else []
        )
        return base + ([f"{c}.missing"] if self.state["flag_missing"] else [])

    def encode(self, array) -> np.ndarray:
        """``[rows, len(names())]`` float32."""
        if self.transform == "onehot":
            return self._onehot(array)
        raw = to_float(array, self.kind)
        v = self._numbers(array)
        missing = np.isnan(v)
        s = self.state
        v = np.where(missing, s["mean"], v)
        if self.transform == "minmax":
            span = s["max"] - s["min"]
            out = [(v - s["min"]) / (span if span > 0 else 1.0)]
        else:
            out = [(v - s["mean"]) / s["std"]]
        if self.kind == "datetime":
            out += _calendar(raw)
        if s["flag_missing"]:
            out.append(missing.astype(np.float64))
        return np.stack(out, axis=1).astype(np.float32)

    def _onehot(self, array) -> np.ndarray:
        vocab = self.state["vocabulary"]
        slot = {v: i for i, v in enumerate(vocab)}
        index = np.fromiter((slot.get(v, len(vocab)) for v in category_strings(array)), dtype=np.int64)
        out = np.zeros((index.size, len(vocab) + 1), dtype=np.float32)
        out[np.arange(index.size), index] = 1.0
        return out


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def _calendar(seconds: np.ndarray) -> list[np.ndarray]:
    """Month and weekday of each time as points on a circle (0 where the time is missing)."""
    ok = ~np.isnan(seconds)
    stamps = np.where(ok, seconds, 0).astype("int64").astype("datetime64[s]")
    month = (stamps.astype("datetime64[M]").astype(np.int64) % 12).astype(np.float64)
    weekday = ((stamps.astype("datetime64[D]").astype(np.int64) + 3) % 7).astype(np.float64)  # 1970-01-01: Thursday
    parts = []
    for value, period in ((month, 12.0), (weekday, 7.0)):
        angle = 2 * np.pi * value / period
        parts += [np.where(ok, np.sin(angle), 0.0), np.where(ok, np.cos(angle), 0.0)]
    return parts


def encoder_from_state(state: dict) -> Encoder:
    """An encoder with a saved ``state`` (``tables.json``), ready to encode new rows."""
    e = Encoder(state["column"], state["kind"], state["transform"])
    e.state = {k: v for k, v in state.items() if k not in ("column", "kind", "transform")}
    return e
