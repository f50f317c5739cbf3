"""DGL's graph objects read into the dataset format (``gnnbridge.run(dataset=g)``; core's
``app/objects.py`` says what happens to the arrays): a ``DGLGraph``, homogeneous or
heterogeneous, and a ``dgl.data`` dataset (one graph, such as ``CoraGraphDataset``'s, or many
``(graph, label)`` pairs for graph classification).

DGL's conventions, as its examples read them: node features in ``ndata["feat"]``, classes in
``ndata["label"]``, the splits as boolean ``train_mask`` / ``val_mask`` / ``test_mask``; a
heterogeneous graph keeps them per node type (``g.nodes["paper"].data``). Edges are taken in
edge-id order; an edge task (``task: edge``) reads ``edata["label"]`` and ``edata["train_mask"]``
..., as DGL's edge-classification examples hold them. Edge features (``edata["feat"]``, or
``"x"``, ``"features"``) become the format's ``edge_attr``; other ``edata`` keys, which nothing
reads, are left out with a warning line.
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

FEATURES = ("feat", "x", "features")  # the first present is the node features
LABELS = ("label", "y", "labels")


def read(obj, reading: Reading) -> dict[str, np.ndarray] | None:
    """The arrays of a DGL object, read as ``reading`` says; None for another library's object."""
    dgl = sys.modules.get("dgl")
    if dgl is None:  # nobody holding a DGL object lacks it
        return None
    if isinstance(obj, dgl.DGLGraph):
        if obj.is_homogeneous:
            return graph_arrays(obj, "dataset (a DGLGraph)", reading)
        return hetero_arrays(obj, "dataset (a heterogeneous DGLGraph)", reading)
    data = sys.modules.get("dgl.data")
    if data is None or not isinstance(obj, data.DGLDataset):
        return None
    if len(obj) == 1 and isinstance(obj[0], dgl.DGLGraph):  # one graph (CoraGraphDataset): that graph
        return read(obj[0], reading)
    return collection_arrays(obj, f"dataset (a {type(obj).__name__} of {len(obj)} graphs)", reading.form)


def graph_arrays(g, where: str, reading: Reading) -> dict[str, np.ndarray]:
    frame = g.ndata
    arrays = {"x": features(frame, where, g.num_nodes()), "edge_index": edge_index(g)}
    if label_key(frame) is not None or reading.node_labels_needed:  # (none: predict, a link or an edge task)
        arrays["y"] = labels(frame, where, reading.form)
    arrays.update(splits(frame, where, reading))
    arrays.update(edge_labels(g.edata, where, "", reading))
    key = feature_key(g.edata)
    if key is not None:
        arrays["edge_attr"] = edge_features(g.edata[key], f"{where}: edata['{key}']")
    warn_edge_features(g.edata, where, read=(key,))
    return arrays


def hetero_arrays(g, where: str, reading: Reading) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    for ntype in g.ntypes:
        frame, at = g.nodes[ntype].data, f"{where}.nodes['{type_name(ntype, where)}']"
        if feature_key(frame) is not None:
            arrays[f"x__{ntype}"] = features(frame, at, g.num_nodes(ntype))
        else:
            arrays[f"num_nodes__{ntype}"] = np.array([g.num_nodes(ntype)], dtype=np.int64)
        if label_key(frame) is not None:
            arrays[f"y__{ntype}"] = labels(frame, at, reading.form)
            arrays.update({f"{key}__{ntype}": ids for key, ids in splits(frame, at, reading).items()})
    for etype in g.canonical_etypes:
        for part in etype:
            type_name(part, where)
        arrays["edge_index__" + "__".join(etype)] = edge_index(g, etype)
        frame, at = g.edges[etype].data, f"{where}.edges[{etype}]"
        arrays.update(edge_labels(frame, at, "__" + "__".join(etype), reading))
        key = feature_key(frame)
        if key is not None:
            arrays["edge_attr__" + "__".join(etype)] = edge_features(frame[key], f"{at}: data['{key}']")
        warn_edge_features(frame, at, read=(key,))
    return arrays


def collection_arrays(dataset, where: str, form: str) -> dict[str, np.ndarray]:
    """Many ``(graph, label)`` pairs, one class each: nodes stacked, ``node_ptr`` the first node
    of each graph."""
    return stacked((_graph_and_label(dataset[i], f"{where}[{i}]", form) for i in range(len(dataset))), where)


def _graph_and_label(item, at: str, form: str) -> tuple:
    if not (isinstance(item, tuple) and len(item) == 2):
        raise DataError(f"{at} is a {type(item).__name__}; a graph classification dataset yields (graph, label).")
    g, label = item
    out = (features(g.ndata, at, g.num_nodes()), edge_index(g), graph_labels(label, at, form))
    key = feature_key(g.edata)
    return out if key is None else (*out, edge_features(g.edata[key], f"{at}: edata['{key}']"))


def feature_key(frame) -> str | None:
    return next((key for key in FEATURES if key in frame), None)


def label_key(frame) -> str | None:
    return next((key for key in LABELS if key in frame), None)


def features(frame, where: str, num_nodes: int) -> np.ndarray:
    key = feature_key(frame)
    if key is None:
        raise DataError(
            f"{where} has no node features (ndata['feat']); give some, e.g. g.ndata['feat'] = "
            f"torch.ones({num_nodes}, 1) (ndata holds: {', '.join(frame.keys()) or 'nothing'})."
        )
    x = field(frame[key], f"{where}: ndata['{key}']")
    if x.dim() != 2:
        raise DataError(f"{where}: ndata['{key}'] has shape {list(x.shape)}; expected [nodes, features].")
    return x.cpu().to(torch.float32).numpy()


def labels(frame, where: str, form: str) -> np.ndarray:
    key = label_key(frame)
    if key is None:
        raise DataError(
            f"{where} has no ndata['label'] (a class per node); training and evaluation need labels (predict does not)."
        )
    return item_labels(frame[key], f"{where}: ndata['{key}']", form)


def edge_index(g, etype=None) -> np.ndarray:
    src, dst = g.edges(order="eid", etype=etype)
    return torch.stack([src, dst]).cpu().to(torch.int64).numpy()


def splits(
    frame, where: str, reading: Reading, unit: str = "node", prefix: str = "", suffix: str = ""
) -> dict[str, np.ndarray]:
    """``{prefix}train_idx{suffix}`` ... from a frame's boolean ``train_mask`` ... (``ndata``, or
    an edge task's ``edata`` with ``prefix`` ``edge_``)."""
    found = {}
    data = "ndata" if unit == "node" else "edata"
    for split in SPLITS:
        if f"{split}_mask" not in frame:
            continue
        mask = field(frame[f"{split}_mask"], f"{where}: {data}['{split}_mask']")
        if mask.dim() != 1:
            raise DataError(
                f"{where}: {split}_mask has shape {list(mask.shape)}; a mask is one value per {unit} (several "
                f"splits: pick one, e.g. g.{data}['{split}_mask'] = g.{data}['{split}_mask'][:, 0])."
            )
        found[f"{prefix}{split}_idx{suffix}"] = mask.bool().nonzero().view(-1).cpu().numpy()
    return all_or_no_splits(found, where, reading)


def edge_labels(frame, where: str, suffix: str, reading: Reading) -> dict[str, np.ndarray]:
    """An edge task's labels from ``edata['label']`` (one per edge, in edge-id order, in the run's
    label form) and its splits from ``edata['train_mask']`` ..., as DGL's edge-classification
    examples hold them; none when the edges have no labels."""
    key = label_key(frame)
    if key is None or not reading.edge_labels:  # (read for another task: the edges' labels are not its)
        return {}
    y = edge_item_labels(frame[key], f"{where}: edata['{key}']", reading.form)
    return {f"edge_label{suffix}": y, **splits(frame, where, reading, "edge", "edge_", suffix)}


def warn_edge_features(frame, where: str, read: tuple = ()) -> None:
    """One warning line for edge data nothing will read: every ``edata`` key but labels, masks
    and the features ``read``."""
    keys = [k for k in frame.keys() if k not in (*LABELS, *(f"{s}_mask" for s in SPLITS), *read)]
    if keys:
        warn(f"{where} has edge data ({', '.join(keys)}) that gnnbridge does not read (yet); trained without.")
