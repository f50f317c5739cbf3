"""Edge tasks: a label per given edge of one type (a class, several 0/1 labels, or values), the
shape of fraud on transactions or ratings (GraphStorm's ``edge_classification`` and
``edge_regression``).

Unlike link prediction nothing is held out of the graph: every edge passes messages, only the
labels are split. While training, a batch's own edges, their opposite direction between nodes of
one type and their mirrors in the reverse type are left out of the batch's sampled
neighbourhood (the exclusion link prediction uses, :mod:`gnnbridge.core.sampling.hetero`), so
no edge is a path to its own label. Evaluation scores each edge from its endpoints' states over
the whole graph, as GraphStorm's full-graph inference does: a node's state then does not depend
on which edges share its batch, so layer-wise inference is exact and every world size and batch
size gives the same numbers.

The target type's edges are stored sorted by destination (what the sampler reads), so the record
keeps each sorted edge's column in the given ``edge_index`` (``edge_column``): labels and splits
are moved into that order here, and ``predict`` writes its rows back in the given order.
"""

from __future__ import annotations

import torch

from gnnbridge.core.errors import DataError
from gnnbridge.core.records.data import check_ids, random_split
from gnnbridge.core.records.hetero import (
    HOMOGENEOUS_EDGE,
    EdgeType,
    HeteroGraphData,
    HeteroSource,
    edge_name,
    message_passing_features,
    reverse_types,
)
from gnnbridge.core.records.labels import checked_width
from gnnbridge.core.records.reading import Reading, as_reading
from gnnbridge.core.tasks.link import message_passing
from gnnbridge.core.tasks.pairs import find_pairs, mirror_ids


def for_edge_task(
    source: HeteroSource, reverse: bool, seed: int, reading: Reading | str | None = None
) -> HeteroGraphData:
    """The edge-task record of ``source`` (its ``edge_y`` on ``target_edge``, read as ``reading``
    says, or in a form alone; None: classes; placeholders of its ``unlabelled_classes`` where
    predict reads edges without labels); ``reverse`` adds ``rev_`` types (a type the dataset
    brought that mirrors the target is rebuilt instead)."""
    reading = as_reading(reading)
    form = reading.form
    if source.edge_y is None or source.target_edge is None:
        raise no_edge_labels(f"Dataset '{source.name}'")
    target = tuple(source.target_edge)
    edges = source.edges[target]
    count = int(edges.shape[1])
    where, unit = labels_name(target), "edge" if target == HOMOGENEOUS_EDGE else f"({edge_name(target)}) edge"
    if source.edge_y.shape[0] != count:
        raise DataError(f"{where} has {source.edge_y.shape[0]} labels for {count} edges of edge_index.")
    num_classes = reading.unlabelled_classes
    if source.labelled:  # checked in the given order, so that a message names the user's column
        num_classes = checked_width(source.edge_y, form, where, unit)
        splits = _splits(source.edge_splits, count, seed, target)
    else:  # predict on edges without labels: nothing to split (any count of edges is scored)
        splits = (torch.empty(0, dtype=torch.int64),) * 3
    order = torch.argsort(edges[1], stable=True)  # the record's order (by destination, as it sorts)
    position = torch.empty_like(order)
    position[order] = torch.arange(count)
    mp, rev = message_passing(source.num_nodes, source.edges, target, edges[:, order], reverse)
    features = dict(source.edge_attr or {})
    if target in features:  # in the target's sorted order, as its edges now are
        features[target] = features[target][order]
    built_from = reverse_types(source.edges)  # a rev_ type's rows are its original's
    if rev is not None and rev in source.edges:  # a mirror the dataset brought, rebuilt from the target
        built_from[rev] = target
        features.pop(rev, None)
    train, val, test = (position[s].sort().values for s in splits)
    data = HeteroGraphData(
        dict(source.num_nodes),
        dict(source.x),
        mp,
        target_edge=target,
        y=source.edge_y[order],
        train_idx=train,
        val_idx=val,
        test_idx=test,
        num_classes=num_classes,
        name=source.name,
        edge_column=order,
        edge_attr=message_passing_features(features, mp, built_from),
        labels=form,
    )
    data.labelled = source.labelled  # (predict on edges without labels: placeholders, nothing to score)
    _exclusions(data, target, rev if rev in data.edge_index else None)
    return data


def labels_name(target: EdgeType) -> str:
    """The labels of ``target`` as the dataset format names them: ``edge_label`` of a homogeneous
    graph, ``edge_label__SRC__REL__DST`` of a typed one (a graph object's reader names its own)."""
    return "edge_label" if target == HOMOGENEOUS_EDGE else f"edge_label__{'__'.join(target)}"


def no_edge_labels(given: str) -> DataError:
    """The one line for task=edge on a graph whose edges carry no labels (``given``: the graph, as
    the line names it: ``Dataset 'name'``, a file, the object the user handed over)."""
    return DataError(
        f"{given} has no edge labels; task=edge reads edge_label (one label per column of edge_index, "
        "with optional edge_train_idx, edge_val_idx, edge_test_idx), edge_label__SRC__RELATION__DST, PyG's "
        "edge_label or DGL's edata['label']."
    )


def _splits(given: tuple | None, count: int, seed: int, target: EdgeType) -> tuple[torch.Tensor, ...]:
    """The (train, val, test) edge columns: as given (checked here, in the user's columns), else a
    seeded 60/20/20 split as node tasks draw."""
    if given is None:
        return random_split(count, seed, unit="edge")
    unit = "edge" if target == HOMOGENEOUS_EDGE else f"({edge_name(target)}) edge"
    for name, ids in zip(("train", "val", "test"), given):
        check_ids(f"edge_{name}_idx", ids, count, unit=unit)
    return tuple(given)


def _exclusions(data: HeteroGraphData, target: EdgeType, rev: EdgeType | None) -> None:
    """What a training batch of target edges leaves out besides itself: each edge's mirror in
    ``rev`` and, between nodes of one type, its opposite direction (if the graph has it)."""
    target_edges = data.edge_index[target]
    if rev is not None:
        data.reverse_edge = rev
        data.reverse_eid = mirror_ids(target_edges, data.edge_index[rev], data.num_nodes[target[0]])
    if target[0] == target[2]:
        data.twin_eid = find_pairs(target_edges, target_edges.flip(0), data.num_nodes[target[2]])
