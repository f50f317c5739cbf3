"""Column encodings whose fitted state is kept: each is fitted in one streamed pass over a
table's record batches and applied in a second, and its state (means, ranges, vocabularies) is
plain JSON, saved in ``DIR/tables.json`` so that new rows can be encoded exactly as training's.

What each kind becomes (float32 columns of a node type's ``x`` or an edge type's ``edge_attr``):
numbers standardised (or min-max, or ``log1p`` then standardised); a missing number is filled
with the mean and flagged in a 0/1 column, never silently zero; categories one-hot over the
``max_categories`` most frequent values plus an ``other`` slot (unseen, missing and rarer values);
booleans 0/1 (missing: filled and flagged); dates as standardised time plus month and weekday as
points on a circle (sin, cos). Ids are left out, and text unless the schema asks for ``hashed``.

Beyond those: ``rank-gauss`` (a number's rank among the training values mapped through the
inverse normal CDF; the state is quantiles and their normal scores, so applying it is one
``np.interp``, exact at ``--like``), ``buckets`` (one-hot of the quantile bucket; the state is the
edges), ``node`` for a categorical column too wide to one-hot (each value becomes a node of its
own featureless type, which every model gives a learnt embedding: the embedding id; the state
is the vocabulary, unseen values go to an ``<other>`` node) and ``hashed`` text (lowercase word
tokens hashed by CRC-32, not Python's salted ``hash()``, into a fixed number of buckets, the
counts scaled to unit length).
"""

from __future__ import annotations

import math
import re
import statistics
import zlib

import numpy as np

from gnnbridge.core.errors import DataError

KINDS = ("numeric", "categorical", "boolean", "datetime", "text", "id")
TRANSFORMS = {
    "numeric": ("standardize", "minmax", "log", "rank-gauss", "buckets", "drop"),
    "categorical": ("onehot", "node", "drop"),
    "boolean": ("binary", "drop"),
    "datetime": ("datetime", "drop"),
    "text": ("drop", "hashed"),
    "id": ("drop",),
}
DEFAULT_TRANSFORM = {kind: choices[0] for kind, choices in TRANSFORMS.items()}
MAX_CATEGORIES = 32
BUCKETS = {"buckets": 10, "hashed": 64}  # default ``buckets`` of the transforms that take it
SAMPLE = 100_000  # training values kept (every k-th) to fit rank-gauss and buckets
QUANTILES = 1001  # quantiles rank-gauss keeps
CLIP = 1e-3  # rank-gauss clips ranks to [CLIP, 1 - CLIP]: scores within about +-3.09
OTHER = "<other>"
TOKEN = re.compile(r"\w+")


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


def category_text(array):
    """A categorical column's values as an arrow string array (booleans as 0/1), so a category
    reads alike from every source."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_boolean(array.type):
        array = pc.cast(array, pa.int8())
    return pc.cast(array, pa.string())


class Encoder:
    """Fits one column (``observe`` each batch, then ``finish``) and encodes batches of it."""

    def __init__(
        self,
        column: str,
        kind: str,
        transform: str,
        max_categories: int = MAX_CATEGORIES,
        buckets: int | None = None,
    ):
        self.column, self.kind, self.transform, self.max_categories = column, kind, transform, max_categories
        self.buckets = buckets or BUCKETS.get(transform, 0)
        self.count = self.total = self.squares = 0.0
        self.low, self.high, self.missing = math.inf, -math.inf, 0
        self.counts: dict = {}
        self.sample = Sample()
        self.state: dict = {}

    # fitting ---------------------------------------------------------------
    def observe(self, array) -> None:
        if self.transform in ("onehot", "node"):
            import pyarrow.compute as pc

            counted = pc.value_counts(category_text(array))  # per distinct value, missing ones as None
            for value, count in zip(counted.field(0).to_pylist(), counted.field(1).to_pylist()):
                self.counts[value] = self.counts.get(value, 0) + count
            return
        if self.transform == "hashed":
            self.count += len(array) - array.null_count
            self.missing += array.null_count
            return
        v = self._numbers(array)
        ok = v[~np.isnan(v)]
        self.missing += int(v.size - ok.size)
        self.count += ok.size
        self.total += float(ok.sum())
        self.squares += float((ok * ok).sum())
        if ok.size:
            self.low, self.high = min(self.low, float(ok.min())), max(self.high, float(ok.max()))
        if self.transform in ("rank-gauss", "buckets"):
            self.sample.add(ok)

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
        if self.transform in ("onehot", "node"):
            known = sorted(((k, c) for k, c in self.counts.items() if k is not None), key=lambda kc: (-kc[1], kc[0]))
            cap = self.max_categories if self.transform == "onehot" else len(known)
            kept = sorted(k for k, _ in known[:cap])
            self.state = {"vocabulary": kept, "distinct": len(known), "missing": self.counts.get(None, 0)}
            return self.describe()
        if self.transform == "hashed":
            self.state = {"buckets": self.buckets, "hash": "crc32", "tokens": TOKEN.pattern}
        else:
            mean = self.total / self.count if self.count else 0.0
            var = max(self.squares / self.count - mean * mean, 0.0) if self.count else 0.0
            std = math.sqrt(var) if var > 1e-24 else 1.0
            self.state = {"mean": mean, "std": std, "min": _finite(self.low), "max": _finite(self.high)}
            values = self.sample.values()
            if self.transform == "rank-gauss":
                self.state.update(_rank_gauss(values))
            elif self.transform == "buckets":
                self.state.update(_bucket_edges(values, self.buckets))
        self.state["flag_missing"] = self.missing > 0
        self.state["missing"] = self.missing
        return self.describe()

    def describe(self) -> dict:
        return {"column": self.column, "kind": self.kind, "transform": self.transform, **self.state}

    # encoding --------------------------------------------------------------
    def names(self) -> list[str]:
        c = self.column
        if self.transform == "node":
            return []  # a relation to the value's node, not columns
        if self.transform == "onehot":
            return [f"{c}={v}" for v in self.state["vocabulary"]] + [f"{c}={OTHER}"]
        if self.transform == "buckets":
            base = [f"{c}.bucket{i}" for i in range(len(self.state["edges"]) + 1)]
        elif self.transform == "hashed":
            base = [f"{c}.hash{i}" for i in range(self.state["buckets"])]
        else:
            base = [c] + (
                [f"{c}.month_sin", f"{c}.month_cos", f"{c}.weekday_sin", f"{c}.weekday_cos"]
                if self.kind == "datetime"
                else []
            )
        return base + ([f"{c}.missing"] if self.state["flag_missing"] else [])

    def encode(self, array) -> np.ndarray:
        """``[rows, len(names())]`` float32."""
        if self.transform == "node":
            return np.zeros((len(array), 0), dtype=np.float32)
        if self.transform == "onehot":
            return self._onehot(array)
        if self.transform == "hashed":
            return self._hashed(array)
        raw = to_float(array, self.kind)
        v = self._numbers(array)
        missing = np.isnan(v)
        s = self.state
        if self.transform == "rank-gauss":
            out = [np.interp(np.where(missing, s["fill"], v), s["quantiles"], s["scores"])]
        elif self.transform == "buckets":
            out = list(self._buckets(np.where(missing, s["fill"], v)).T)
        else:
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

    def node_ids(self, array) -> np.ndarray:
        """``node``: each row's value node (the vocabulary's index, ``<other>`` last for unseen
        values), -1 where the value is missing (no edge)."""
        text = category_text(array)
        missing = text.is_null().to_numpy(zero_copy_only=False)
        return np.where(missing, -1, self._slots(text))

    def _buckets(self, v: np.ndarray) -> np.ndarray:
        edges = np.asarray(self.state["edges"], dtype=np.float64)
        index = np.searchsorted(edges, v, side="right")
        out = np.zeros((v.size, edges.size + 1), dtype=np.float64)
        out[np.arange(v.size), index] = 1.0
        return out

    def _hashed(self, array) -> np.ndarray:
        n = self.state["buckets"]
        values = array.to_pylist()
        out = np.zeros((len(values), n + (1 if self.state["flag_missing"] else 0)), dtype=np.float64)
        for i, text in enumerate(values):
            if text is None:
                if self.state["flag_missing"]:
                    out[i, n] = 1.0
                continue
            for token in TOKEN.findall(str(text).lower()):
                out[i, zlib.crc32(token.encode("utf-8")) % n] += 1.0
        norm = np.linalg.norm(out[:, :n], axis=1, keepdims=True)
        out[:, :n] /= np.where(norm > 0, norm, 1.0)
        return out.astype(np.float32)

    def _slots(self, text) -> np.ndarray:
        """Each value's index in the vocabulary (arrow's hash lookup, no Python per row); ``<other>``
        (the vocabulary's length) for values not in it and missing ones."""
        import pyarrow as pa
        import pyarrow.compute as pc

        vocab = self.state["vocabulary"]
        index = pc.index_in(text, value_set=pa.array(vocab, pa.string())).fill_null(len(vocab))
        return index.to_numpy(zero_copy_only=False).astype(np.int64)

    def _onehot(self, array) -> np.ndarray:
        index = self._slots(category_text(array))
        out = np.zeros((index.size, len(self.state["vocabulary"]) + 1), dtype=np.float32)
        out[np.arange(index.size), index] = 1.0
        return out


class Sample:
    """A bounded, deterministic sample of a column's values: every ``stride``-th value in row
    order, the stride doubling whenever more than :data:`SAMPLE` are held."""

    def __init__(self):
        self.parts: list = []
        self.seen = 0
        self.stride = 1
        self.held = 0

    def add(self, values: np.ndarray) -> None:
        index = self.seen + np.arange(values.size)
        self.seen += values.size
        kept = values[index % self.stride == 0]
        self.parts.append((index[index % self.stride == 0], kept))
        self.held += kept.size
        while self.held > SAMPLE:
            self.stride *= 2
            self.parts = [(i[i % self.stride == 0], v[i % self.stride == 0]) for i, v in self.parts]
            self.held = sum(v.size for _, v in self.parts)

    def values(self) -> np.ndarray:
        return np.sort(np.concatenate([v for _, v in self.parts])) if self.parts else np.zeros(0)


def _rank_gauss(values: np.ndarray) -> dict:
    """Quantiles of the training values and the normal score of each (ties share their mean rank)."""
    if values.size == 0:
        return {"quantiles": [0.0], "scores": [0.0], "fill": 0.0}
    probs = np.linspace(0.0, 1.0, min(QUANTILES, values.size))
    quantiles = np.quantile(values, probs)
    unique, inverse = np.unique(quantiles, return_inverse=True)
    ranks = np.bincount(inverse, weights=probs) / np.bincount(inverse)
    if unique.size == 1:
        ranks = np.array([0.5])
    normal = statistics.NormalDist()
    scores = [normal.inv_cdf(float(r)) for r in np.clip(ranks, CLIP, 1 - CLIP)]
    return {"quantiles": unique.tolist(), "scores": scores, "fill": float(np.median(values))}


def _bucket_edges(values: np.ndarray, count: int) -> dict:
    """The inner quantile edges splitting the training values into ``count`` buckets (repeated edges merged)."""
    if values.size == 0:
        return {"edges": [], "fill": 0.0}
    edges = np.unique(np.quantile(values, np.linspace(0.0, 1.0, count + 1)[1:-1]))
    return {"edges": edges.tolist(), "fill": float(np.median(values))}


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
    e = Encoder(state["column"], state["kind"], state["transform"], buckets=state.get("buckets"))
    e.state = {k: v for k, v in state.items() if k not in ("column", "kind", "transform")}
    return e
