"""The rules both backends' graph readers (``pyg/objects.py``, ``dgl/objects.py``) apply once a
library's object is taken apart: labels are read in the run's form (one integer class per item,
or a row of targets: :mod:`gnnbridge.core.records.labels`), as the
:class:`~gnnbridge.core.records.reading.Reading` core hands each reader says, the three splits
come together or not at all, a type's name cannot hold the format's ``__`` separator, and a
collection's graphs are stacked with ``node_ptr`` (one feature width and one label shape for
all). Every array the user's object holds is read through :func:`field`: a numpy array is taken
as the tensor it would be, and a tensor without values (the meta device) or a value that is no
array is one line naming the object's field, never an error from deep inside numpy or torch.
Written once so a PyG user and a DGL user get the same refusals in the same words; each reader
keeps only its library's conventions.
"""

from __future__ import annotations

import numpy as np
import torch

from gnnbridge.core.errors import DataError
from gnnbridge.core.records.labels import check_form, checked_width
from gnnbridge.core.records.reading import Reading

SPLITS = ("train", "val", "test")


def field(value, where: str) -> torch.Tensor:
    """``value``, an array the user's object holds (``where`` names the object and its field), as
    a tensor whose values can be read: a tensor (detached; on any device but meta), or a numpy
    array (of numbers or bools) as a tensor."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise DataError(f"{where} is a numpy array of dtype {value.dtype}; give numbers (or bools for a mask).")
        return torch.from_numpy(np.require(value, requirements=("C", "W")))
    if not isinstance(value, torch.Tensor):
        raise DataError(f"{where} is a {type(value).__name__}; give a tensor (torch.as_tensor(...)).")
    if value.is_meta:
        raise DataError(
            f"{where} is on the meta device (a shape without values); give a tensor that holds its values "
            "(built on the CPU or a GPU, not under torch.device('meta'))."
        )
    return value.detach()


def item_labels(y: torch.Tensor, where: str, form: str) -> np.ndarray:
    """``y`` (``where`` names it) in the run's label ``form``: int64 classes, one per item (``[N, 1]``
    read as ``[N]``), or float32 targets ``[N]`` / ``[N, T]`` (regression, multi-label)."""
    y = field(y, where)
    if form != "class":
        check_form(y, form, where)
        return y.cpu().to(torch.float32).numpy()
    if y.dim() == 2 and y.shape[1] == 1:
        y = y.view(-1)
    if y.dim() != 1:
        raise DataError(
            f"{where} has shape {list(y.shape)} (several targets per item); classification takes one class "
            "per item (a 0/1 column per label is target=multilabel, several values target=regression)."
        )
    if y.is_floating_point() or y.dtype == torch.bool:
        raise DataError(
            f"{where} is {str(y.dtype).removeprefix('torch.')}; classification takes integer classes "
            "(.long() if these are classes; for values set target=regression, for 0/1 labels target=multilabel)."
        )
    return y.cpu().to(torch.int64).numpy()


def edge_item_labels(y: torch.Tensor, where: str, form: str) -> np.ndarray:
    """An edge task's labels (``where`` names them as the user gave them), as :func:`item_labels`
    reads them, their values checked here too (classes ``0 .. C-1``, each present; finite
    targets): the reader's words name the library's own array, which core's would not."""
    labels = item_labels(y, where, form)
    checked_width(torch.from_numpy(labels), form, where, "edge")
    return labels


def graph_labels(y, where: str, form: str) -> np.ndarray:
    """One graph's label: a class (shape ``[]``) or its row of targets ``[T]`` (from ``[T]`` or
    ``[1, T]``, as PyG's molecule datasets hold them; a number or a list of them as a tensor)."""
    y = field(y if isinstance(y, (torch.Tensor, np.ndarray)) else np.asarray(y), where)
    if form == "class":
        if y.numel() != 1:
            raise DataError(
                f"{where} has y of shape {list(y.shape)}; graph classification takes one class per graph "
                "(several targets per graph: target=regression or target=multilabel)."
            )
        return item_labels(y.view(1), where, form)[0]
    return item_labels(y.reshape(1, -1), where, form)[0]


def all_or_no_splits(
    found: dict[str, np.ndarray], where: str, reading: Reading, prefix: str = ""
) -> dict[str, np.ndarray]:
    """``found`` (``train_idx`` ... read from masks; an edge task's ``edge_train_idx`` ... with
    ``prefix`` ``edge_``) when it holds all three splits or none; none read with
    ``dataset.splits: drawn`` (a library's class whose masks cannot be completed)."""
    if not reading.splits:
        return {}
    if 0 < len(found) < len(SPLITS):
        given = ", ".join(f"{k.split('__')[0][:-4]}_mask" for k in found)
        masks = ", ".join(f"{prefix}{s}_mask" for s in SPLITS)
        raise DataError(
            f"{where} has {given} but not all of {masks}; give all three, or none (gnnbridge then draws a "
            "seeded 60/20/20 split; --set dataset.splits=drawn draws it, leaving these out)."
        )
    return found


def type_name(name: str, where: str) -> str:
    if "__" in name:
        raise DataError(
            f"{where}: type '{name}' contains '__', which the dataset format uses to separate a type from "
            "its array's name; rename it."
        )
    return name


def stacked(graphs, where: str) -> dict[str, np.ndarray]:
    """A collection from ``(x, edge_index, label[, edge_attr])`` per graph: nodes stacked, each
    graph's edges shifted to its nodes, ``node_ptr`` the first node of each graph; edge features
    stacked where every graph has them (some but not all: one line). Every graph's features have
    graph 0's width and its label graph 0's shape (``where[i]`` names one that differs)."""
    xs, edge_parts, ys, ptr, features = [], [], [], [0], []
    for i, (x, edge_index, label, *edge_attr) in enumerate(graphs):
        if xs and x.shape[1] != xs[0].shape[1]:
            raise DataError(
                f"{where}[{i}] has x of {x.shape[1]} feature columns but graph 0 has {xs[0].shape[1]}; give every "
                "graph features of one width."
            )
        if ys and np.shape(label) != np.shape(ys[0]):
            raise DataError(
                f"{where}[{i}] has a label of shape {list(np.shape(label))} but graph 0 has {list(np.shape(ys[0]))}; "
                "give every graph a label of one shape."
            )
        xs.append(x)
        edge_parts.append(edge_index + ptr[-1])
        ys.append(label)
        ptr.append(ptr[-1] + x.shape[0])
        features.append(edge_attr[0] if edge_attr else None)
    out = {
        "x": np.concatenate(xs),
        "edge_index": np.concatenate(edge_parts, axis=1),
        "y": np.stack(ys) if ys and np.ndim(ys[0]) else np.array(ys, dtype=np.int64),
        "node_ptr": np.array(ptr, dtype=np.int64),
    }
    given = [f is not None for f in features]
    if any(given) and not all(given):
        raise DataError(
            f"{where}[{given.index(not given[0])}] has {'no ' if given[0] else ''}edge features but graph 0 "
            f"{'has' if given[0] else 'has none'}; give every graph edge features of one width, or none."
        )
    if all(given) and features:
        widths = {f.shape[1] for f in features}
        if len(widths) > 1:
            raise DataError(
                f"{where}: the graphs' edge features have widths {sorted(widths)}; give every graph one width."
            )
        out["edge_attr"] = np.concatenate(features)
    return out


def edge_features(value, where: str) -> np.ndarray:
    """A library's edge features as float32 ``[E, D]`` (one value per edge read as ``[E, 1]``)."""
    value = field(value, where)
    if value.dim() == 1:
        value = value.view(-1, 1)
    if value.dim() != 2 or value.dtype == torch.bool or not (value.is_floating_point() or value.dtype.is_signed):
        raise DataError(f"{where} has shape {list(value.shape)} and dtype {value.dtype}; expected numbers [E, D].")
    return value.cpu().to(torch.float32).numpy()
