"""PyG's graph objects read into the dataset format (``gnnbridge.run(dataset=data)``; core's
``app/objects.py`` says what happens to the arrays): a ``Data`` (node classification), a
``HeteroData``, and a ``torch_geometric`` dataset (one graph, such as Planetoid's, or many for
graph classification).

PyG's conventions, as its own loaders read them: ``x`` and ``y`` per node, ``edge_index``
``[2, E]``, the splits as boolean ``train_mask`` / ``val_mask`` / ``test_mask`` (Planetoid) or as
index tensors ``train_idx`` / ``val_idx`` / ``test_idx``; a ``HeteroData`` keeps the same names
per node and edge type. Edge features (``edge_attr``, ``edge_weight``) are not used by
gnnbridge's models yet: a graph that has them trains without them, and a warning line says so.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from gnnbridge.core.errors import DataError
from gnnbridge.core.plugins import warn

SPLITS = ("train", "val", "test")
EDGE_FEATURES = ("edge_attr", "edge_weight")


def read(obj) -> dict[str, np.ndarray] | None:
    if "torch_geometric.data" not in sys.modules:  # nobody holding a PyG object lacks it
        return None
    from torch_geometric.data import Data, Dataset, HeteroData

    if isinstance(obj, HeteroData):
        return hetero_arrays(obj)
    if isinstance(obj, Data):
        return graph_arrays(obj, "dataset (a torch_geometric Data)")
    graphs = obj if isinstance(obj, Dataset) else None
    if isinstance(obj, (list, tuple)) and obj and all(isinstance(g, Data) for g in obj):
        graphs = obj
    if graphs is None:
        return None
    if len(graphs) == 1:  # a dataset of one graph (Planetoid, Reddit): that graph
        return read(graphs[0])
    return collection_arrays(graphs)


def graph_arrays(data, where: str) -> dict[str, np.ndarray]:
    """One homogeneous graph for node classification."""
    arrays = {"x": features(data, where), "edge_index": edges(data.edge_index, where), "y": node_labels(data, where)}
    arrays.update(splits(data, where, data.num_nodes))
    warn_edge_features(data, where)
    return arrays


def hetero_arrays(data) -> dict[str, np.ndarray]:
    where = "dataset (a torch_geometric HeteroData)"
    arrays: dict[str, np.ndarray] = {}
    for node_type in data.node_types:
        store, at = data[node_type], f"{where}['{type_name(node_type, where)}']"
        if store.get("x") is not None:
            arrays[f"x__{node_type}"] = features(store, at)
        elif store.num_nodes is None:
            raise DataError(f"{at} has neither x nor num_nodes; give one (data['{node_type}'].num_nodes = N).")
        else:
            arrays[f"num_nodes__{node_type}"] = np.array([store.num_nodes], dtype=np.int64)
        if store.get("y") is not None:
            arrays[f"y__{node_type}"] = node_labels(store, at)
            arrays.update({f"{key}__{node_type}": v for key, v in splits(store, at, store.num_nodes).items()})
    for edge_type in data.edge_types:
        at = f"{where}[{edge_type}]"
        if any("__" in part for part in edge_type):
            type_name("__".join(edge_type), where)
        arrays["edge_index__" + "__".join(edge_type)] = edges(data[edge_type].edge_index, at)
        warn_edge_features(data[edge_type], at)
    return arrays


def collection_arrays(graphs) -> dict[str, np.ndarray]:
    """Many graphs, one label each (graph classification): nodes stacked, ``node_ptr`` the
    first node of each graph."""
    where = f"dataset (a {type(graphs).__name__} of {len(graphs)} graphs)"
    xs, edge_parts, labels, ptr = [], [], [], [0]
    for i, g in enumerate(graphs):
        at = f"{where}[{i}]"
        xs.append(features(g, at))
        edge_parts.append(edges(g.edge_index, at) + ptr[-1])
        labels.append(graph_label(g, at))
        ptr.append(ptr[-1] + xs[-1].shape[0])
    warn_edge_features(graphs[0], where)
    return {
        "x": np.concatenate(xs),
        "edge_index": np.concatenate(edge_parts, axis=1),
        "y": np.array(labels, dtype=np.int64),
        "node_ptr": np.array(ptr, dtype=np.int64),
    }


def features(store, where: str) -> np.ndarray:
    x = store.get("x")
    if x is None:
        raise DataError(
            f"{where} has no x (node features); give some, e.g. data.x = torch.ones(data.num_nodes, 1) "
            "(or a transform such as torch_geometric.transforms.OneHotDegree)."
        )
    if x.dim() != 2:
        raise DataError(f"{where}: x has shape {list(x.shape)}; expected [nodes, features] (x.view(-1, 1) for one).")
    if x.is_sparse:
        x = x.to_dense()
    return x.detach().cpu().to(torch.float32).numpy()


def node_labels(store, where: str) -> np.ndarray:
    y = store.get("y")
    if y is None:
        raise DataError(f"{where} has no y (a class per node); node classification needs labels.")
    return class_labels(y, where)


def graph_label(g, where: str) -> int:
    y = g.get("y")
    if y is None or y.numel() != 1:
        shape = "no y" if y is None else f"y of shape {list(y.shape)}"
        raise DataError(f"{where} has {shape}; graph classification takes one class per graph.")
    return int(class_labels(y.view(1), where)[0])


def class_labels(y: torch.Tensor, where: str) -> np.ndarray:
    if y.dim() == 2 and y.shape[1] == 1:
        y = y.view(-1)
    if y.dim() != 1:
        raise DataError(
            f"{where}: y has shape {list(y.shape)} (several targets per item, multi-label?); gnnbridge's "
            "classification takes one class per item."
        )
    if y.is_floating_point() or y.dtype == torch.bool:
        raise DataError(
            f"{where}: y is {str(y.dtype).removeprefix('torch.')}; classification takes integer classes "
            "(y.long() if these are classes; regression targets are not supported yet)."
        )
    return y.detach().cpu().to(torch.int64).numpy()


def edges(edge_index, where: str) -> np.ndarray:
    if edge_index is None:
        raise DataError(f"{where} has no edge_index; give the edges as a [2, E] tensor.")
    if not isinstance(edge_index, torch.Tensor):  # a SparseTensor (torch_sparse) as adj_t
        raise DataError(f"{where}: edge_index is a {type(edge_index).__name__}; give a [2, E] tensor.")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise DataError(f"{where}: edge_index has shape {list(edge_index.shape)}; expected [2, E].")
    if edge_index.is_floating_point():
        raise DataError(f"{where}: edge_index is {edge_index.dtype}; node ids are integers (edge_index.long()).")
    return edge_index.detach().cpu().to(torch.int64).numpy()


def splits(store, where: str, num_nodes: int) -> dict[str, np.ndarray]:
    """``train_idx``/``val_idx``/``test_idx`` from masks or index tensors; none when none given
    (a seeded split is drawn then)."""
    found = {}
    for split in SPLITS:
        mask, idx = store.get(f"{split}_mask"), store.get(f"{split}_idx")
        if mask is not None:
            found[f"{split}_idx"] = mask_ids(mask, f"{where}: {split}_mask", num_nodes)
        elif idx is not None:
            found[f"{split}_idx"] = torch.as_tensor(idx).detach().cpu().to(torch.int64).view(-1).numpy()
    if 0 < len(found) < len(SPLITS):
        given = ", ".join(f"{k[:-4]}_mask" for k in found)
        raise DataError(
            f"{where} has {given} but not all of train_mask, val_mask, test_mask; give all three, or none "
            "(gnnbridge then draws a seeded 60/20/20 split)."
        )
    return found


def mask_ids(mask: torch.Tensor, where: str, num_nodes: int) -> np.ndarray:
    if mask.dtype != torch.bool or mask.dim() != 1:
        several = " (one column per split: pick one, e.g. data.train_mask = data.train_mask[:, 0])"
        raise DataError(
            f"{where} is {str(mask.dtype).removeprefix('torch.')} of shape {list(mask.shape)}; a mask is one "
            f"bool per node{several if mask.dim() == 2 else ''}."
        )
    if mask.shape[0] != num_nodes:
        raise DataError(f"{where} has {mask.shape[0]} entries for {num_nodes} nodes.")
    return mask.nonzero().view(-1).cpu().numpy()


def type_name(name: str, where: str) -> str:
    if "__" in name:
        raise DataError(
            f"{where}: type '{name}' contains '__', which the dataset format uses to separate a type from "
            "its array's name; rename it."
        )
    return name


def warn_edge_features(store, where: str) -> None:
    present = [key for key in EDGE_FEATURES if store.get(key) is not None]
    if present:
        warn(f"{where} has {', '.join(present)}: gnnbridge's models do not read edge features yet; trained without.")
