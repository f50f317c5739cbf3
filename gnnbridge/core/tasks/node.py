"""Node classification on a heterogeneous graph: the labelled node type's splits, and the
message-passing edges (plus ``rev_`` types with ``dataset.reverse_edges``). From a prepared folder
the topology is the folder's mapped CSC files, not built again."""

from __future__ import annotations

import torch

from gnnbridge.core.errors import ConfigError, DataError
from gnnbridge.core.records.data import random_split
from gnnbridge.core.records.hetero import (
    HeteroGraphData,
    HeteroSource,
    message_passing_features,
    reverse_types,
    with_reverse_edges,
)
from gnnbridge.core.records.labels import infer_num_classes, inferred, width


def for_node_task(source: HeteroSource, reverse: bool, seed: int, form: str | None = None) -> HeteroGraphData:
    """The node-classification record, its labels read in ``form`` (None: what ``y`` shows). From a
    prepared folder its topology is the folder's mapped CSC files (read-only, not validated again:
    prepare checked them), the same arrays as the build in memory, which every other source gets."""
    form = form or inferred(source.y)
    if source.target_node is None or source.y is None:
        other = "task=edge (its edges are labelled) or task=link" if source.edge_y is not None else "task=link"
        raise ConfigError(f"Dataset '{source.name}' has no node labels (no labelled node type); use {other}.")
    mapped = source.mapped_topology(reverse)
    if mapped is not None:
        return mapped_node_task(source, mapped, seed, form)
    edges = with_reverse_edges(source.num_nodes, source.edges) if reverse else dict(source.edges)
    features = message_passing_features(source.edge_attr, edges, reverse_types(source.edges) if reverse else {})
    data = node_task(source.num_nodes, source.x, edges, source.target_node, source.y, source.splits, seed, source.name,
                     edge_attr=features, labels=form)  # fmt: skip
    return data


def node_task(
    num_nodes: dict[str, int],
    x: dict,
    edges: dict,
    target: str,
    y: torch.Tensor,
    splits: tuple | None = None,
    seed: int = 0,
    name: str = "hetero",
    num_classes: int | None = None,
    edge_attr: dict | None = None,
    labels: str | None = None,
) -> HeteroGraphData:
    """A node-classification record; without ``splits``, a seeded 60/20/20 split of ``target``;
    ``edge_attr``: edge features of some of ``edges``' types, a row per edge as given; ``y`` read
    in the form ``labels`` (None: what ``y`` shows, :func:`~gnnbridge.core.records.labels.inferred`)."""
    form = labels or inferred(y)
    if target not in num_nodes:
        raise DataError(f"The labelled node type {target!r} is not declared; node types: {', '.join(num_nodes)}.")
    splits = splits or random_split(num_nodes[target], seed)
    classes = width(y, form) if num_classes is None else num_classes
    return HeteroGraphData(
        dict(num_nodes),
        dict(x),
        dict(edges),
        target_node=target,
        y=y,
        train_idx=splits[0],
        val_idx=splits[1],
        test_idx=splits[2],
        num_classes=classes,
        name=name,
        edge_attr=dict(edge_attr or {}),
        labels=form,
    )


def mapped_node_task(source: HeteroSource, topology: dict, seed: int, form: str) -> HeteroGraphData:
    """A node task over ``topology`` (a prepared folder's mapped CSC files), built without
    validation, which would read every file whole: ``gnnbridge prepare`` checked ids, labels
    and splits, and its manifest records that. Splits the folder lacks are drawn from ``seed``
    as :func:`node_task` draws them."""
    t = source.target_node
    if t not in source.num_nodes:
        raise DataError(f"The labelled node type {t!r} is not declared; node types: {', '.join(source.num_nodes)}.")
    if form != "class":
        raise DataError(
            f"Folder '{source.name}': a prepared heterogeneous folder's labels are classes; target={form} "
            "trains a heterogeneous graph from an .npz or a library's object (not from a folder yet)."
        )
    splits = source.splits or random_split(source.num_nodes[t], seed)
    classes = source.num_classes if source.num_classes is not None else infer_num_classes(source.y)
    return source.task_record(
        num_nodes=dict(source.num_nodes),
        x=dict(source.x),
        edge_index={et: e for et, (_, e) in topology.items()},
        indptr={et: p for et, (p, _) in topology.items()},
        target_node=t,
        y=source.y,
        train_idx=splits[0],
        val_idx=splits[1],
        test_idx=splits[2],
        num_classes=classes,
        name=source.name,
        edge_attr={et: f for et, f in source.topology_edge_attr.items() if et in topology},
    )
