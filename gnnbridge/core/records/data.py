"""Neutral graph records: what a dataset plugin produces and every backend consumes.

A :class:`GraphData` holds one homogeneous graph for node-level tasks. Topology is kept sorted
by destination node, once, in two views that share storage: ``edge_index`` (PyG's [2, E]
layout) and ``indptr`` (CSC offsets, so ``edge_index[0]`` is the CSC ``indices``). That lets
PyG and DGL both build their native view without copying, and lets the core sampler read
in-neighbours of any node in O(1).

The record is built once in the launching process, validated, moved to shared memory
(:meth:`GraphData.share_memory_`), and handed to every rank, which attaches to the same pages.
Invariants are checked in ``__post_init__``: a bad id here would become heap corruption inside
DGL later (it does not bounds-check), so nothing unchecked crosses this boundary.

Heterogeneous graphs and edge-level tasks (seed edges) will be sibling records; samplers take
seeds as a tensor and do not assume they are node ids of a homogeneous graph.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from gnnbridge.core.errors import DataError
from gnnbridge.core.records.csc import csc_from_coo
from gnnbridge.core.records.labels import (
    check_form,
    check_values,
    classes_under,
    inferred,
    placeholder,
    stored,
    width,
)
from gnnbridge.core.records.mapped import Mapped


class LabelledRecord(Mapped):
    """What the node and graph records share: ``x`` (one row per node), ``edge_index``, labels
    ``y`` (one per ``item_name``: node or graph), ``train_idx`` / ``val_idx`` / ``test_idx`` over
    those items, ``num_classes``; and moving all of it to shared memory."""

    item_name = "item"
    # Set on a record opened from a prepared folder (gnnbridge.core.storage.folder); how it
    # opens again in another process is ``mapped_from`` (see core/records/mapped.py).
    folder = None
    # False: a graph without labels (:meth:`GraphData.unlabelled`): handed to ``predict``, or read
    # by a task that reads no node labels (link prediction); its ``y`` is a placeholder and it has
    # no splits; nothing may train or evaluate on its labels.
    labelled = True

    @classmethod
    def unchecked(cls, **values):
        """The record without :meth:`validate`: for arrays ``gnnbridge prepare`` has checked (its
        manifest says what), memory-mapped from a folder, which validating would read whole."""
        record = object.__new__(cls)
        for f in fields(cls):
            setattr(record, f.name, values[f.name] if f.name in values else f.default)
        record.labels = record.labels or inferred(record.y)
        return record

    def _take_labels(self) -> None:
        """The labels' form: as given, else what ``y`` shows (:func:`~.labels.inferred`); ``y`` as
        that form stores it (multilabel and regression targets as float32)."""
        self.labels = self.labels or inferred(self.y)
        if not isinstance(self.y, torch.Tensor):
            return
        if self.labels != "class" and self.y.dtype == torch.int64 and self.y.dim() == 1 and self.num_classes > 1:
            raise classes_under(self.labels, self.item_name, self.num_classes)
        self.y = stored(self.y, self.labels)

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])

    def split(self, name: str) -> torch.Tensor:
        return {"train": self.train_idx, "val": self.val_idx, "test": self.test_idx}[name]

    def share_memory_(self):
        """Move every tensor to shared memory in place, so spawned ranks attach without a copy.
        A memory-mapped record (``mapped_from``) stays as it is: its pages are shared through its
        files, and its ranks reopen them (see :mod:`gnnbridge.core.records.mapped`)."""
        if self.is_mapped:
            return self
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor):
                value.share_memory_()
        return self

    def _check_labels_features_splits(self, num_items: int) -> None:
        if self.labelled:  # (placeholders: nothing to check, and no classes where no task reads them)
            check_values(self.y, self.labels, self.num_classes, num_items, self.item_name)
        if not all_finite(self.x):
            bad = int((~torch.isfinite(self.x)).any(dim=1).nonzero()[0])
            raise DataError(f"x holds NaN or inf values (first at node {bad}); clean the features first.")
        for name in ("train", "val", "test"):
            check_tensor(f"{name}_idx", self.split(name), torch.int64, ndim=1)
        if self.labelled:
            check_disjoint_splits(self, num_items)

    def _split_sizes(self) -> dict[str, int]:
        return {name: int(self.split(name).numel()) for name in ("train", "val", "test")}


@dataclass
class GraphData(LabelledRecord):
    """One graph for node classification, with its splits.

    Fields:
        indptr: int64 [N + 1]; the in-edges of node v are positions ``indptr[v]:indptr[v+1]``.
        indices: int64 [E] source of each edge, edges sorted by destination (CSC). A position
            in ``indices`` is the edge's id everywhere (samplers, backends).
        x: float32 [N, F] node features, finite (float16 or bfloat16 too: gathers upcast them).
        y: int64 [N] class labels in ``[0, num_classes)``.
        train_idx, val_idx, test_idx: int64 node ids, non-empty, pairwise disjoint.
        num_classes: number of classes (>= 2); for other targets, the columns of ``y``.
        name: a label for logs and results.
        labels: the form of ``y`` (:mod:`.labels`: class, multilabel, regression); multilabel
            and regression targets are float32 [N] or [N, T] with NaN for a missing label.

    The record holds the CSC arrays only, not the COO edge list: at Reddit scale the
    destination row alone is 0.9 GB, and nothing on the training path reads it
    (:attr:`edge_index` rebuilds it for whoever asks).
    """

    indptr: torch.Tensor
    indices: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    train_idx: torch.Tensor
    val_idx: torch.Tensor
    test_idx: torch.Tensor
    num_classes: int
    name: str = "graph"
    labels: str = ""  # y's form (core/records/labels.py); "": what y shows (labels.inferred)
    edge_attr: torch.Tensor | None = None  # float32 [E, D] per edge, in the CSC order of ``indices``

    item_name = "node"  # what a split counts, for messages

    def __post_init__(self) -> None:
        self._take_labels()
        self.validate()

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    @property
    def edge_index(self) -> torch.Tensor:
        """int64 [2, E] (source, destination) in CSC order, built on each call (2 x E int64)."""
        dst = torch.repeat_interleave(
            torch.arange(self.num_nodes, device=self.indptr.device), self.indptr.diff(), output_size=self.num_edges
        )
        return torch.stack([self.indices, dst])

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_edges(
        cls,
        edge_index: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        train_idx: torch.Tensor,
        val_idx: torch.Tensor,
        test_idx: torch.Tensor,
        num_classes: int | None = None,
        name: str = "graph",
        edge_attr: torch.Tensor | None = None,
        labels: str | None = None,
    ) -> GraphData:
        """Build from an unsorted edge list: checks ids, sorts by destination (stable), builds
        ``indptr``; ``edge_attr`` (a row per column of ``edge_index``) follows its edges; ``y`` is
        read in the form ``labels`` (a loader's ``config.label_form``; None: what ``y`` shows)."""
        check_edge_index(edge_index)
        check_features("x", x)
        n = int(x.shape[0])
        check_ids("edge_index", edge_index, n)
        indptr, indices = csc_from_coo(edge_index[0], edge_index[1], n)
        form = labels or inferred(y)
        if num_classes is None:
            num_classes = width(y, form)
        edge_attr = in_edge_order(edge_attr, edge_index)
        return cls(indptr, indices, x, y, train_idx, val_idx, test_idx, int(num_classes), name, form, edge_attr)

    @classmethod
    def unlabelled(
        cls, edge_index: torch.Tensor, x: torch.Tensor, num_classes: int, name: str = "graph", labels: str | None = None
    ) -> GraphData:
        """A graph without labels: placeholder labels (all 0) of ``num_classes`` (the model's, for
        ``predict``; 0 for a task that reads no node labels, such as link prediction) in the form
        ``labels`` (None: classes), no splits, ``labelled`` False; checked as any graph is
        but for those."""
        form = labels or "class"
        empty = torch.empty(0, dtype=torch.int64)
        check_edge_index(edge_index)
        check_features("x", x)
        n = int(x.shape[0])
        check_ids("edge_index", edge_index, n)
        indptr, indices = csc_from_coo(edge_index[0], edge_index[1], n)
        y = placeholder(n, int(num_classes), form)
        data = cls.unchecked(indptr=indptr, indices=indices, x=x, y=y, train_idx=empty, val_idx=empty, labels=form)
        data.test_idx, data.num_classes, data.name, data.labelled = empty, int(num_classes), name, False
        data.validate()
        return data

    # ------------------------------------------------------------------ invariants

    def validate(self) -> None:
        check_tensor("indptr", self.indptr, torch.int64, ndim=1)
        check_tensor("indices", self.indices, torch.int64, ndim=1)
        check_features("x", self.x)
        check_form(self.y, self.labels)
        n = self.num_nodes
        if n == 0:
            raise DataError("The graph has no nodes (x has 0 rows).")
        if self.num_features == 0:
            raise DataError("x has 0 feature columns; give every node at least one feature (e.g. a constant 1).")
        if self.y.shape[0] != n:
            raise DataError(f"y has {self.y.shape[0]} labels but x has {n} rows; give one label per node.")
        if self.indptr.shape[0] != n + 1 or int(self.indptr[-1]) != self.num_edges:
            raise DataError(f"indptr must have N+1={n + 1} entries ending at E={self.num_edges}.")
        if int(self.indptr[0]) != 0 or bool((self.indptr.diff() < 0).any()):
            raise DataError("indptr must start at 0 and never decrease (CSC offsets by destination).")
        check_ids("indices", self.indices, n)
        check_edge_features(self.edge_attr, self.num_edges)
        self._check_labels_features_splits(n)

    def summary(self) -> dict:
        return {
            "name": self.name,
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "num_features": self.num_features,
            "num_classes": self.num_classes,
            "edge_features": 0 if self.edge_attr is None else int(self.edge_attr.shape[1]),
            **self._split_sizes(),
        }


def all_finite(x: torch.Tensor, rows_per_block: int = 1 << 16) -> bool:
    """``torch.isfinite(x).all()`` a block of rows at a time: on the whole of Reddit's features
    isfinite's temporaries took 0.9 GB, more than loading needed anywhere else."""
    return all(bool(torch.isfinite(block).all()) for block in x.split(rows_per_block))


def check_tensor(name: str, t: object, dtype: torch.dtype | tuple[torch.dtype, ...], ndim: int) -> None:
    """``t`` is a tensor of ``dtype`` (or one of them) with ``ndim`` dimensions."""
    if not isinstance(t, torch.Tensor):
        raise DataError(f"{name} must be a tensor, got {type(t).__name__}.")
    allowed = dtype if isinstance(dtype, tuple) else (dtype,)
    if t.dtype not in allowed:
        names = [str(d).replace("torch.", "") for d in allowed]
        expected = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
        raise DataError(f"{name} has dtype {str(t.dtype).replace('torch.', '')}; expected {expected}.")
    if t.dim() != ndim:
        raise DataError(f"{name} has {t.dim()} dimensions (shape {list(t.shape)}); expected {ndim}.")


# Feature dtypes a record holds: float32, or half-width storage for a graph whose features would
# not fit otherwise (``gnnbridge prepare --dtype``); every gather returns float32.
FEATURE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_features(name: str, x: object) -> None:
    """``x`` is a 2-d feature tensor of one of :data:`FEATURE_DTYPES`."""
    if isinstance(x, torch.Tensor) and x.dtype in FEATURE_DTYPES:
        check_tensor(name, x, x.dtype, ndim=2)
    else:
        check_tensor(name, x, torch.float32, ndim=2)


def in_edge_order(edge_attr: torch.Tensor | None, edge_index: torch.Tensor) -> torch.Tensor | None:
    """``edge_attr`` (a row per column of ``edge_index``) in the records' destination-sorted (stable)
    edge order; its row count is checked first, naming the array."""
    if edge_attr is None:
        return None
    check_features("edge_attr", edge_attr)
    if edge_attr.shape[0] != edge_index.shape[1]:
        raise DataError(
            f"edge_attr has {edge_attr.shape[0]} rows for {edge_index.shape[1]} edges; give one row per column "
            "of edge_index."
        )
    return edge_attr[torch.argsort(edge_index[1], stable=True)].contiguous()


def check_edge_features(edge_attr: torch.Tensor | None, num_edges: int) -> None:
    """Edge features, where a record has them: 2-D floats, a row per edge, finite."""
    if edge_attr is None:
        return
    check_features("edge_attr", edge_attr)
    if edge_attr.shape[0] != num_edges or edge_attr.shape[1] == 0:
        raise DataError(f"edge_attr has shape {list(edge_attr.shape)}; expected [{num_edges}, D] with D >= 1.")
    if not all_finite(edge_attr):
        bad = int((~torch.isfinite(edge_attr)).any(dim=1).nonzero()[0])
        raise DataError(f"edge_attr holds NaN or inf values (first at edge {bad}); clean the edge features first.")


def check_edge_index(edge_index: torch.Tensor) -> None:
    check_tensor("edge_index", edge_index, torch.int64, ndim=2)
    if edge_index.shape[0] != 2:
        raise DataError(f"edge_index must have shape [2, E], got {list(edge_index.shape)}.")


def check_ids(name: str, ids: torch.Tensor, n: int, unit: str = "node") -> None:
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n):
        bad = int(ids.max()) if int(ids.max()) >= n else int(ids.min())
        raise DataError(f"{name} holds {unit} id {bad}, outside [0, {n}) for {n} {unit}s.")


def check_disjoint_splits(data, n: int) -> None:
    """Every split of ``data`` non-empty, in ``[0, n)``, without repeats, disjoint from the others."""
    seen = torch.zeros(n, dtype=torch.bool)
    unit = data.item_name
    for name in ("train", "val", "test"):
        idx = data.split(name)
        if idx.numel() == 0:
            raise DataError(f"The {name} split is empty; every split needs at least one {unit}.")
        check_ids(f"{name}_idx", idx, n, unit=unit)
        if bool(seen[idx].any()):
            raise DataError(f"The {name} split overlaps an earlier split; splits must be disjoint.")
        if torch.unique(idx).numel() != idx.numel():
            raise DataError(f"The {name} split lists a {unit} twice.")
        seen[idx] = True


def random_split(
    n: int, seed: int, fractions: tuple[float, float] = (0.6, 0.2), unit: str = "node"
) -> tuple[torch.Tensor, ...]:
    """A seeded random train/val/test split (60/20/20 by default) of ``n`` nodes (or graphs)."""
    perm, n_train, n_val = _permutation(n, seed, fractions, unit)
    return (
        perm[:n_train].sort().values,
        perm[n_train : n_train + n_val].sort().values,
        perm[n_train + n_val :].sort().values,
    )


def held_out_split(n: int, seed: int, fractions: tuple[float, float], unit: str = "node") -> tuple[torch.Tensor, ...]:
    """The (val, test) of :func:`random_split` alone: the train part, most of ``n``, is never
    sorted or kept (what a caller that finds train as "the rest" needs)."""
    perm, n_train, n_val = _permutation(n, seed, fractions, unit)
    return perm[n_train : n_train + n_val].sort().values, perm[n_train + n_val :].sort().values


def _permutation(n: int, seed: int, fractions: tuple[float, float], unit: str) -> tuple[torch.Tensor, int, int]:
    if n < 3:
        raise DataError(f"{n} {unit}(s) are too few to split into train/val/test; at least 3 are needed.")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_train = max(1, int(fractions[0] * n))
    n_val = max(1, int(fractions[1] * n))
    n_train = min(n_train, n - 2)
    n_val = min(n_val, n - n_train - 1)
    return perm, n_train, n_val
