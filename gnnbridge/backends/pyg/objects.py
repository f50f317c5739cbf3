"""PyG's graph objects read into the dataset format (``gnnbridge.run(dataset=data)``; core's
``app/objects.py`` says what happens to the arrays): a ``Data`` (node classification), a
``HeteroData``, and a ``torch_geometric`` dataset (one graph, such as Planetoid's, or many for
graph classification).

PyG's conventions, as its own loaders read them: ``x`` and ``y`` per node, ``edge_index``
``[2, E]``, the splits as boolean ``train_mask`` / ``val_mask`` / ``test_mask`` (Planetoid) or as
index tensors ``train_idx`` / ``val_idx`` / ``test_idx``; a ``HeteroData`` keeps the same names
per node and edge type. An edge task (``task: edge``) reads ``edge_label`` (one per column of
``edge_index``) with ``edge_train_mask`` ... or ``edge_train_idx`` .... Edge features
(``edge_attr``) become the format's ``edge_attr``; an ``edge_weight``, which nothing reads, is
left out with a warning line.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from gnnbridge.backends.graph_arrays import (
    SPLITS,
    all_or_no_splits,
    edge_features,
    edge_item_labels,
    field,
    graph_labels,
    item_labels,
    stacked,
    type_name,
)
from gnnbridge.core.errors import DataError
from gnnbridge.core.plugins import warn
from gnnbridge.core.records.reading import Reading


def read(obj, reading: Reading) -> dict[str, np.ndarray] | None:
    """The arrays of a PyG object, read as ``reading`` says; None for another library's object."""
    if "torch_geometric.data" not in sys.modules:  # nobody holding a PyG object lacks it
        return None
    from torch_geometric.data import Data, Dataset, HeteroData

    if isinstance(obj, HeteroData):
        return hetero_arrays(obj, reading)
    if isinstance(obj, Data):
        return graph_arrays(obj, "dataset (a torch_geometric Data)", reading)
    graphs = obj if isinstance(obj, Dataset) else None
    if isinstance(obj, (list, tuple)) and obj and all(isinstance(g, Data) for g in obj):
        graphs = obj
    if graphs is None:
        return None
    if len(graphs) == 1:  # a dataset of one graph (Planetoid, Reddit): that graph
        return read(graphs[0], reading)
    return collection_arrays(graphs, reading.form)


def graph_arrays(data, where: str, reading: Reading) -> dict[str, np.ndarray]:
    """One homogeneous graph: its features, edges and splits, its labels where it has them or the
    task reads them (a node task's ``y``; an edge task's edge labels)."""
    arrays = {"x": features(data, where), "edge_index": edges(data.edge_index, where)}
    node_count(data, arrays["x"], where)
    if data.get("y") is not None or reading.node_labels_needed:  # (none: predict, a link or an edge task)
        arrays["y"] = node_labels(data, where, reading.form)
    arrays.update(splits(data, where, data.num_nodes, reading))
    arrays.update(edge_labels(data, where, "", reading))
    if data.get("edge_attr") is not None:
        arrays["edge_attr"] = edge_features(data.edge_attr, f"{where}: edge_attr")
    warn_edge_features(data, where)
    return arrays


def hetero_arrays(data, reading: Reading) -> dict[str, np.ndarray]:
    where = "dataset (a torch_geometric HeteroData)"
    arrays: dict[str, np.ndarray] = {}
    for node_type in data.node_types:
        store, at = data[node_type], f"{where}['{type_name(node_type, where)}']"
        if store.get("x") is not None:
            arrays[f"x__{node_type}"] = features(store, at)
            node_count(store, arrays[f"x__{node_type}"], at)
        elif store.num_nodes is None:
            raise DataError(f"{at} has neither x nor num_nodes; give one (data['{node_type}'].num_nodes = N).")
        else:
            arrays[f"num_nodes__{node_type}"] = np.array([store.num_nodes], dtype=np.int64)
        if store.get("y") is not None:
            arrays[f"y__{node_type}"] = node_labels(store, at, reading.form)
            found = splits(store, at, store.num_nodes, reading)
            arrays.update({f"{key}__{node_type}": v for key, v in found.items()})
    for edge_type in data.edge_types:
        at = f"{where}[{edge_type}]"
        if any("__" in part for part in edge_type):
            type_name("__".join(edge_type), where)
        arrays["edge_index__" + "__".join(edge_type)] = edges(data[edge_type].edge_index, at)
        arrays.update(edge_labels(data[edge_type], at, "__" + "__".join(edge_type), reading))
        if data[edge_type].get("edge_attr") is not None:
            arrays["edge_attr__" + "__".join(edge_type)] = edge_features(data[edge_type].edge_attr, f"{at}: edge_attr")
        warn_edge_features(data[edge_type], at)
    return arrays


def collection_arrays(graphs, form: str) -> dict[str, np.ndarray]:
    """Many graphs, one label each (graph classification): nodes stacked, ``node_ptr`` the
    first node of each graph."""
    where = f"dataset (a {type(graphs).__name__} of {len(graphs)} graphs)"
    warn_edge_features(graphs[0], where)

    def parts(i: int, g) -> tuple:
        at = f"{where}[{i}]"
        out = (features(g, at), edges(g.edge_index, at), graph_label(g, at, form))
        attr = g.get("edge_attr")
        return out if attr is None else (*out, edge_features(attr, f"{at}: edge_attr"))

    return stacked((parts(i, g) for i, g in enumerate(graphs)), where)


def features(store, where: str) -> np.ndarray:
    x = store.get("x")
    if x is None:
        raise DataError(
            f"{where} has no x (node features); give some, e.g. data.x = torch.ones(data.num_nodes, 1) "
            "(or a transform such as torch_geometric.transforms.OneHotDegree)."
        )
    x = field(x, f"{where}: x")
    if x.dim() != 2:
        raise DataError(f"{where}: x has shape {list(x.shape)}; expected [nodes, features] (x.view(-1, 1) for one).")
    if x.is_sparse:
        x = x.to_dense()
    return x.cpu().to(torch.float32).numpy()


def node_count(store, x: np.ndarray, where: str) -> None:
    """A ``num_nodes`` set beside ``x`` counts x's rows (more nodes than feature rows would leave
    some without features, which nothing here could make up)."""
    stated = store.num_nodes
    if stated != x.shape[0]:
        raise DataError(
            f"{where} has num_nodes={stated} but x has {x.shape[0]} rows; give x one row per node (or set "
            f"num_nodes = {x.shape[0]})."
        )


def node_labels(store, where: str, form: str) -> np.ndarray:
    y = store.get("y")
    if y is None:
        raise DataError(f"{where} has no y (a class per node); training and evaluation need labels (predict does not).")
    return item_labels(y, f"{where}: y", form)


def graph_label(g, where: str, form: str) -> np.ndarray:
    y = g.get("y")
    if y is None:
        raise DataError(f"{where} has no y; a graph-level task takes a label (or a row of targets) per graph.")
    return graph_labels(y, f"{where}: y", form)


def edges(edge_index, where: str) -> np.ndarray:
    if edge_index is None:
        raise DataError(f"{where} has no edge_index; give the edges as a [2, E] tensor.")
    if not isinstance(edge_index, (torch.Tensor, np.ndarray)):  # a SparseTensor (torch_sparse) as adj_t
        raise DataError(f"{where}: edge_index is a {type(edge_index).__name__}; give a [2, E] tensor.")
    edge_index = field(edge_index, f"{where}: edge_index")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise DataError(f"{where}: edge_index has shape {list(edge_index.shape)}; expected [2, E].")
    if edge_index.is_floating_point():
        raise DataError(f"{where}: edge_index is {edge_index.dtype}; node ids are integers (edge_index.long()).")
    return edge_index.cpu().to(torch.int64).numpy()


def splits(store, where: str, num_nodes: int, reading: Reading) -> dict[str, np.ndarray]:
    """``train_idx``/``val_idx``/``test_idx`` from masks or index tensors; none when none given
    (a seeded split is drawn then)."""
    found = {}
    for split in SPLITS:
        mask, idx = store.get(f"{split}_mask"), store.get(f"{split}_idx")
        if mask is not None:
            found[f"{split}_idx"] = mask_ids(mask, f"{where}: {split}_mask", num_nodes)
        elif idx is not None:
            found[f"{split}_idx"] = index(idx, f"{where}: {split}_idx")
    return all_or_no_splits(found, where, reading)


def edge_labels(store, where: str, suffix: str, reading: Reading) -> dict[str, np.ndarray]:
    """An edge task's ``edge_label`` (one per column of ``edge_index``, in the run's label form)
    and its splits (``edge_train_mask`` ... or ``edge_train_idx`` ...), as ``edge_label{suffix}``
    ...; none when the store has no such labels. An ``edge_label`` beside ``edge_label_index``
    labels other pairs (PyG's ``RandomLinkSplit``): that is link prediction's, not read here."""
    y = store.get("edge_label")
    if y is None or store.get("edge_label_index") is not None or not reading.edge_labels:
        return {}
    count = store.edge_index.shape[1]
    if y.shape[0] != count:
        raise DataError(f"{where}: edge_label has {y.shape[0]} labels for {count} edges (columns of edge_index).")
    found = {}
    for split in SPLITS:
        mask, idx = store.get(f"edge_{split}_mask"), store.get(f"edge_{split}_idx")
        if mask is not None:
            found[f"edge_{split}_idx{suffix}"] = mask_ids(mask, f"{where}: edge_{split}_mask", count, "edge")
        elif idx is not None:
            found[f"edge_{split}_idx{suffix}"] = index(idx, f"{where}: edge_{split}_idx")
    labels = edge_item_labels(y, f"{where}: edge_label", reading.form)
    return {f"edge_label{suffix}": labels, **all_or_no_splits(found, where, reading, "edge_")}


def index(idx, where: str) -> np.ndarray:
    """A split given as ids (``train_idx`` ...: a tensor, an array or a list of ints)."""
    ids = field(np.asarray(idx) if isinstance(idx, (list, tuple, range)) else idx, where)
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise DataError(f"{where} is {str(ids.dtype).removeprefix('torch.')}; give integer ids (a mask: *_mask).")
    return ids.cpu().to(torch.int64).view(-1).numpy()


def mask_ids(mask, where: str, num_nodes: int, unit: str = "node") -> np.ndarray:
    mask = field(mask, where)
    if mask.dtype != torch.bool or mask.dim() != 1:
        several = " (one column per split: pick one, e.g. data.train_mask = data.train_mask[:, 0])"
        raise DataError(
            f"{where} is {str(mask.dtype).removeprefix('torch.')} of shape {list(mask.shape)}; a mask is one "
            f"bool per {unit}{several if mask.dim() == 2 else ''}."
        )
    if mask.shape[0] != num_nodes:
        raise DataError(f"{where} has {mask.shape[0]} entries for {num_nodes} {unit}s.")
    return mask.nonzero().view(-1).cpu().numpy()


def warn_edge_features(store, where: str, keys: tuple[str, ...] = ("edge_weight",)) -> None:
    """One warning line for edge data ``store`` has that nothing will read (``edge_weight``)."""
    present = [key for key in keys if store.get(key) is not None]
    if present:
        warn(f"{where} has {', '.join(present)}, which gnnbridge does not read (yet); trained without.")
