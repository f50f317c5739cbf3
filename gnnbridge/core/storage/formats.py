"""The dataset file format, in one place: which arrays a graph is made of, with their dtypes and
dimensions, for a ``.npz`` file and for a folder of ``.npy`` files alike (one file per member,
same names). Core reads folders (:mod:`.folder`, :mod:`gnnbridge.core.storage.prepare`) and the ``npz`` plugin reads
files; both check arrays against these tables and say what is wrong in the same words.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from gnnbridge.core.errors import DataError
from gnnbridge.core.records.collection import GraphCollection
from gnnbridge.core.records.data import GraphData, random_split
from gnnbridge.core.records.hetero import HOMOGENEOUS_EDGE, HeteroSource, edge_source
from gnnbridge.core.records.labels import check_form, placeholder
from gnnbridge.core.records.reading import CLASSES, Reading, as_reading
from gnnbridge.core.tasks.edge import no_edge_labels

NPZ_REQUIRED = {"edge_index": (np.int64, 2), "x": (np.float32, 2), "y": (np.int64, 1)}
NPZ_SPLITS = ("train_idx", "val_idx", "test_idx")
NODE_PTR = "node_ptr"  # present: the file is a collection of graphs (graph classification)
# An edge task's labels (one per column of edge_index; checked by the target's form like y) and
# its splits (columns of edge_index).
EDGE_LABEL = "edge_label"
EDGE_SPLITS = ("edge_train_idx", "edge_val_idx", "edge_test_idx")
EDGE_ARRAYS = {EDGE_LABEL: (np.int64, 1), **{k: (np.int64, 1) for k in EDGE_SPLITS}}
# What each array of the format is; nothing else in a file is read.
EDGE_ATTR = "edge_attr"  # float32 [E, D]: a row of features per column of edge_index
NPZ_ARRAYS = {
    **NPZ_REQUIRED,
    NODE_PTR: (np.int64, 1),
    **{k: (np.int64, 1) for k in NPZ_SPLITS},
    **EDGE_ARRAYS,
    EDGE_ATTR: (np.float32, 2),
}

# The heterogeneous format: every key is KIND__TYPE (node arrays) or KIND__SRC__RELATION__DST
# (edge arrays); see docs/datasets.md (the heterogeneous `.npz`).
HETERO_NODE_KEYS = {
    "x": (np.float32, 2),
    "num_nodes": (np.int64, 1),
    "y": (np.int64, 1),
    "train_idx": (np.int64, 1),
    "val_idx": (np.int64, 1),
    "test_idx": (np.int64, 1),
}
HETERO_EDGE_KEYS = {
    "edge_index": (np.int64, 2),
    "val_edges": (np.int64, 2),
    "test_edges": (np.int64, 2),
    **EDGE_ARRAYS,
    "edge_attr": (np.float32, 2),
}
HETERO_MARKERS = (*HETERO_NODE_KEYS, *HETERO_EDGE_KEYS)


def digest(arrays: dict[str, np.ndarray]) -> str:
    """A name for a dataset's content: every array's name, dtype, shape and bytes, in key order
    (an empty array, ``edge_index`` of a graph without edges, is its header alone)."""
    h = hashlib.blake2b(digest_size=10)
    for key in sorted(arrays):
        value = np.ascontiguousarray(arrays[key])
        h.update(f"{key}:{value.dtype.str}:{value.shape};".encode())
        h.update(value)
    return h.hexdigest()


def check_header(path, key: str, found: np.dtype, shape: tuple, dtype, ndim: int) -> None:
    """Refuse an array whose header (read before any data) has the wrong dtype or dimensions."""
    expected = np.dtype(dtype)
    if found != expected:
        if found.hasobject:
            raise DataError(
                f"{path}: {key} holds Python objects (dtype object), which are never unpickled; save "
                f"it as a numeric array: {key}.astype(numpy.{expected.name})."
            )
        if found.newbyteorder("=") == expected or found.newbyteorder("<") == expected:
            raise DataError(
                f"{path}: {key} has dtype {found.str} ({'big' if found.byteorder == '>' else 'other'}-endian "
                f"{expected.name}); convert it to this machine's order with {key}.astype(numpy.{expected.name})."
            )
        raise DataError(
            f"{path}: {key} has dtype {found}; expected {expected.name} (cast it with "
            f"{key}.astype(numpy.{expected.name}))."
        )
    if len(shape) != ndim or any(d < 0 for d in shape):
        raise DataError(f"{path}: {key} has shape {list(shape)}; expected {ndim} dimension(s).")


def check_member_header(path, key: str, found: np.dtype, shape: tuple, dtype, ndim: int, form: str) -> None:
    """:func:`check_header`, except for a homogeneous graph's ``y`` in a form it does not take
    (float values or a row of labels where classes are read, or any ``y`` outside target=class),
    which is checked as the label form ``form`` says (:mod:`.labels`), naming the target that reads it."""
    other_form = found.kind in "fb" or len(shape) != 1
    as_torch = _torch_dtype(found)
    if not is_label_key(key) or (form == "class" and not other_form) or as_torch is None:
        return check_header(path, key, found, shape, dtype, ndim)
    try:
        check_form(torch.empty(shape, dtype=as_torch, device="meta"), form, key)  # the header alone: nothing read
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None
    return None


def is_split_key(key: str) -> bool:
    """Whether a member is a split (``train_idx``, an edge task's ``edge_train_idx`` ..., or a
    typed one of either), which ``dataset.splits: drawn`` leaves out."""
    return key.split("__", 1)[0] in (*NPZ_SPLITS, *EDGE_SPLITS)


def is_label_key(key: str) -> bool:
    """Whether a member holds labels (node or graph ``y``, an edge task's ``edge_label``, or a
    typed one of either), whose dtype and dimensions the target's form decides."""
    return key.split("__", 1)[0] in ("y", EDGE_LABEL)


def _torch_dtype(found: np.dtype) -> torch.dtype | None:
    """torch's dtype of a native numeric numpy ``found`` (None: objects, another byte order, or a
    dtype torch has not)."""
    if found.hasobject or not found.isnative:
        return None
    try:
        return torch.from_numpy(np.empty(0, dtype=found)).dtype
    except TypeError:
        return None


def missing_members(members, reading: Reading = CLASSES) -> list[str]:
    """The required arrays a homogeneous graph's ``members`` lack; ``y`` may be missing where no
    node labels are needed (``reading.node_labels_needed`` False: a link or edge task's graph,
    predict's) or the edges carry the labels, never for a collection of graphs."""
    missing = [k for k in NPZ_REQUIRED if k not in members]
    if missing == ["y"] and NODE_PTR not in members and (not reading.node_labels_needed or EDGE_LABEL in members):
        return []
    return missing


def missing_arrays(where, missing: list[str], reading: Reading = CLASSES) -> DataError:
    """The one line for a homogeneous graph without one of its required arrays."""
    if missing == ["y"] and reading.edge_labels:  # (an edge task's graph must label its edges, not its nodes)
        return no_edge_labels(str(where))
    if missing == ["y"]:
        return DataError(
            f"{where}: no y (int64, a class per node, or per graph of a collection); training and evaluation "
            "need labels (predict takes a graph without them)."
        )
    return DataError(
        f"{where}: missing array(s) {', '.join(missing)}; a graph .npz needs edge_index int64 [2,E], "
        "x float32 [N,F], y int64 [N] (and optionally train_idx, val_idx, test_idx); a collection of "
        f"graphs also has {NODE_PTR} int64 [G+1] and y int64 [G]; a heterogeneous graph has typed keys "
        "such as x__paper and edge_index__author__writes__paper."
    )


def unlabelled_graph(where, tensors: dict[str, torch.Tensor], name: str, reading: Reading) -> GraphData:
    """The record of a graph without node labels: for predict (placeholders of the model's width,
    ``reading.unlabelled_classes``, in its form), or for a task that reads none (link
    prediction's: width 0)."""
    width = reading.unlabelled_classes or 0
    try:
        return GraphData.unlabelled(tensors["edge_index"], tensors["x"], width, name, reading.form)
    except DataError as exc:
        raise DataError(f"{where}: {exc}") from None


def unlabelled_edges(source: HeteroSource, reading: Reading) -> HeteroSource:
    """``source`` (read for an edge task while labels are optional) as predict scores it when its
    edges carry no labels: placeholder labels (of the reading's form) of the model's width on the
    type the model scores, no splits, ``labelled`` False. A source that labels its edges is
    returned as it is."""
    if source.edge_y is not None or not (reading.edge_labels and reading.labels_optional):
        return source
    wanted = reading.unlabelled_edge
    target = HOMOGENEOUS_EDGE if list(source.edges) == [HOMOGENEOUS_EDGE] else None
    if target is None and wanted is not None:
        target = next((et for et in source.edges if ",".join(et) == wanted), None)
    if target is None:
        raise DataError(
            f"no ({wanted or 'labelled'}) edges, the edge type this run's model scores; give a graph that has them."
        )
    count = int(source.edges[target].shape[1])
    source.edge_y, source.target_edge = placeholder(count, reading.unlabelled_classes, reading.form), target
    source.labelled = False
    return source


def graph_from_arrays(
    where, arrays: dict, seed: int, name: str, reading: Reading | str | None = None
) -> GraphData | GraphCollection | HeteroSource:
    """The record a dataset's arrays (``{member: numpy array}``, the format's names) make: a graph,
    a collection of graphs (``node_ptr``), or a heterogeneous graph (typed keys); every array is
    checked against the tables above. ``where`` starts each error line (a file, or what the
    arrays came from). The ``.npz`` reader and graphs handed over in memory both end here, so the
    same arrays make the same record whichever way they came. They are read as ``reading`` (a
    :class:`~gnnbridge.core.records.reading.Reading`, or its form alone; None: classes) says: the
    labels' form, the arrays' own splits left out where ``dataset.splits: drawn``."""
    reading = as_reading(reading)
    form = reading.form
    if not reading.splits:
        arrays = {key: value for key, value in arrays.items() if not is_split_key(key)}
    if is_hetero(arrays):
        tensors = {
            key: _checked(where, key, arrays[key], *spec, form) for key, spec in typed_keys(where, arrays).items()
        }
        return hetero_source(where, tensors, name, reading)
    missing = missing_members(arrays, reading)
    if missing:
        raise missing_arrays(where, missing, reading)
    tensors = {key: _checked(where, key, arrays[key], *spec, form) for key, spec in NPZ_ARRAYS.items() if key in arrays}
    if tensors["edge_index"].shape[0] != 2:
        raise DataError(f"{where}: edge_index has shape {list(tensors['edge_index'].shape)}; expected [2, E].")
    if as_edge_source(tensors, reading) or (
        reading.edge_labels and reading.labels_optional and NODE_PTR not in tensors
    ):
        return edge_labelled(where, tensors, name, reading)
    if "y" not in tensors:
        return unlabelled_graph(where, tensors, name, reading)
    splits = _splits(where, tensors)
    try:
        edge_attr = tensors.get(EDGE_ATTR)
        if NODE_PTR in tensors:
            return GraphCollection.from_edges(
                tensors["x"], tensors["edge_index"], tensors[NODE_PTR], tensors["y"], splits, seed=seed, name=name,
                edge_attr=edge_attr, labels=form,
            )  # fmt: skip
        n = tensors["x"].shape[0]
        if tensors["y"].shape[0] != n:
            raise DataError(
                f"y has {tensors['y'].shape[0]} labels but x has {n} rows; give one label per node "
                f"(or add {NODE_PTR} for a collection of graphs with one label each)."
            )
        splits = splits or list(random_split(n, seed))
        return GraphData.from_edges(
            tensors["edge_index"], tensors["x"], tensors["y"], *splits, name=name, edge_attr=edge_attr, labels=form
        )
    except DataError as exc:
        raise DataError(f"{where}: {exc}") from None


def as_edge_source(members, reading: Reading) -> bool:
    """Whether a homogeneous graph with these members (an ``.npz``'s, a folder's) opens as the
    one-relation source of its edge labels: when an edge task reads it, or when its nodes have
    no labels (link prediction may train on it); a node task reads it as a graph."""
    return EDGE_LABEL in members and (reading.edge_labels or "y" not in members)


def edge_labelled(where, tensors: dict[str, torch.Tensor], name: str, reading: Reading) -> HeteroSource:
    """A homogeneous graph whose edges carry labels, as the one-relation source an edge task reads
    (node labels it also has stay those of its one node type, for task=node); placeholders where
    predict reads it without labels are of the reading's form."""
    if NODE_PTR in tensors:
        raise DataError(f"{where}: edge_label on a collection of graphs ({NODE_PTR}); edge tasks read one graph.")
    edge_y, edges = tensors.get(EDGE_LABEL), tensors["edge_index"]  # (none: predict's placeholders)
    if edge_y is not None and edge_y.shape[0] != edges.shape[1]:
        raise DataError(
            f"{where}: edge_label has {edge_y.shape[0]} labels for {edges.shape[1]} edges (columns of edge_index)."
        )
    splits = _splits(where, tensors, EDGE_SPLITS)
    source = edge_source(int(tensors["x"].shape[0]), tensors["x"], edges, edge_y, splits, name)
    source = unlabelled_edges(source, reading)
    if EDGE_ATTR in tensors:
        if tensors[EDGE_ATTR].shape[0] != edges.shape[1]:
            raise DataError(f"{where}: edge_attr has {tensors[EDGE_ATTR].shape[0]} rows for {edges.shape[1]} edges.")
        source.edge_attr = {HOMOGENEOUS_EDGE: tensors[EDGE_ATTR]}
    if "y" in tensors:
        source.target_node, source.y, source.splits = "node", tensors["y"], _splits(where, tensors)
    return source


def _checked(where, key: str, array: np.ndarray, dtype, ndim: int, form: str) -> torch.Tensor:
    check_member_header(where, key, array.dtype, array.shape, dtype, ndim, form)
    return torch.from_numpy(np.ascontiguousarray(array))


def _splits(where, tensors: dict[str, torch.Tensor], names: tuple[str, ...] = NPZ_SPLITS) -> list[torch.Tensor] | None:
    present = [k for k in names if k in tensors]
    if present and len(present) != 3:
        missing = sorted(set(names) - set(present))
        raise DataError(
            f"{where}: has {', '.join(present)} but not {', '.join(missing)}; give all three splits or none."
        )
    return [tensors[k] for k in names] if present else None


def is_member_name(name: str) -> bool:
    """Whether ``name`` (a file's stem, an archive member's key) is one the format reads: a
    homogeneous array's, or one of the heterogeneous format's ``KIND__...`` names."""
    return name in NPZ_ARRAYS or ("__" in name and name.split("__", 1)[0] in HETERO_MARKERS)


def is_hetero(names) -> bool:
    """Whether member names use the heterogeneous format's typed keys (``kind__type``)."""
    return bool({name.split("__", 1)[0] for name in names if "__" in name} & set(HETERO_MARKERS))


def typed_keys(path, members) -> dict:
    """``{member: (dtype, ndim)}`` of a heterogeneous file's members; an unknown member is refused,
    and so is a homogeneous array beside typed ones (``x.npy`` beside ``x__paper.npy``, or a stray
    ``x__weird`` in a homogeneous graph): which kind was meant cannot be guessed."""
    plain = sorted(name for name in members if name in NPZ_ARRAYS)
    if plain:
        typed = sorted(name for name in members if name not in NPZ_ARRAYS and "__" in name)
        raise DataError(
            f"{path}: mixes the homogeneous format's {', '.join(plain)} with heterogeneous arrays "
            f"({', '.join(typed[:3])}{', ...' if len(typed) > 3 else ''}); a graph is one kind: remove the arrays "
            "of the other (a heterogeneous graph names every array KIND__TYPE, e.g. x__paper)."
        )
    wanted, unknown = {}, []
    for name in members:
        kind, _, rest = name.partition("__")
        parts = rest.split("__") if rest else []
        if kind in HETERO_NODE_KEYS and len(parts) == 1 and parts[0]:
            wanted[name] = HETERO_NODE_KEYS[kind]
        elif kind in HETERO_EDGE_KEYS and len(parts) == 3 and all(parts):
            wanted[name] = HETERO_EDGE_KEYS[kind]
        else:
            unknown.append(name)
    if unknown:
        raise DataError(
            f"{path}: array '{unknown[0]}' is not a key of the heterogeneous format; node arrays are "
            f"{'/'.join(HETERO_NODE_KEYS)}__TYPE, edge arrays {'/'.join(HETERO_EDGE_KEYS)}__SRC__RELATION__DST."
        )
    if not any(k.startswith("edge_index__") for k in wanted):
        raise DataError(f"{path}: no edge_index__SRC__RELATION__DST array; a heterogeneous graph needs edges.")
    return wanted


def hetero_source(path, tensors: dict, name: str, reading: Reading = CLASSES) -> HeteroSource:
    """A :class:`HeteroSource` from typed arrays ``{key: tensor}`` (not yet checked for ids or values:
    the task record is, and ``gnnbridge prepare`` is), read as ``reading`` says."""
    node, edge = {}, {}  # kind -> {type: tensor}, kind -> {(src, rel, dst): tensor}
    for key, value in tensors.items():
        kind, *parts = key.split("__")
        if len(parts) == 1:
            node.setdefault(kind, {})[parts[0]] = value
        else:
            edge.setdefault(kind, {})[tuple(parts)] = value
    num_nodes = node_counts(path, node)
    for kind, typed in edge.items():
        for et in typed:
            for end, t in (("source", et[0]), ("destination", et[2])):
                if t not in num_nodes:
                    raise DataError(
                        f"{path}: {kind}__{'__'.join(et)} has {end} type '{t}', which is not declared; node types: "
                        f"{', '.join(sorted(num_nodes))} (declare it with x__{t} or num_nodes__{t})."
                    )
    try:
        return unlabelled_edges(_source(num_nodes, node, edge, name), reading)
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None


def node_counts(path, node: dict) -> dict[str, int]:
    counts = {t: int(x.shape[0]) for t, x in node.get("x", {}).items()}
    for t, n in node.get("num_nodes", {}).items():
        if n.numel() != 1 or int(n[0]) <= 0:
            raise DataError(f"{path}: num_nodes__{t} must hold one positive count, e.g. numpy.array([1000]).")
        if t in counts and counts[t] != int(n[0]):
            raise DataError(f"{path}: num_nodes__{t}={int(n[0])} but x__{t} has {counts[t]} rows.")
        counts[t] = int(n[0])
    if not counts:
        raise DataError(f"{path}: declares no node type; give x__TYPE (features) or num_nodes__TYPE for each type.")
    return counts


def _source(num_nodes: dict, node: dict, edge: dict, name: str) -> HeteroSource:
    labels = node.get("y", {})
    if len(labels) > 1:
        raise DataError(f"labels are given for {len(labels)} node types ({', '.join(labels)}); label one type.")
    target_node, y = next(iter(labels.items()), (None, None))
    splits = [node.get(f"{s}_idx", {}).get(target_node) for s in ("train", "val", "test")] if target_node else []
    if any(s is not None for s in splits) and not all(s is not None for s in splits):
        raise DataError(
            f"give all of train_idx__{target_node}, val_idx__{target_node}, test_idx__{target_node} or none."
        )
    held = {kind: edge.get(kind, {}) for kind in ("val_edges", "test_edges")}
    held_types = set(held["val_edges"]) | set(held["test_edges"])
    if len(held_types) > 1 or (held_types and set(held["val_edges"]) != set(held["test_edges"])):
        raise DataError("val_edges and test_edges must name the same single edge type.")
    target_edge = next(iter(held_types), None)
    edges = edge["edge_index"]
    if target_edge is not None and target_edge not in edges:
        raise DataError(f"val_edges name ({','.join(target_edge)}), which has no edge_index array.")
    held_out = (held["val_edges"][target_edge], held["test_edges"][target_edge]) if target_edge else None
    labelled, edge_y, edge_splits = _edge_labels(edge, edges)
    if labelled is not None:
        if target_edge is not None and target_edge != labelled:
            raise DataError(
                f"val_edges name ({','.join(target_edge)}) but edge labels are given for ({','.join(labelled)}); "
                "a graph has one target edge type."
            )
        target_edge = labelled
    return HeteroSource(
        num_nodes,
        node.get("x", {}),
        edges,
        target_node=target_node,
        y=y,
        splits=tuple(splits) if splits and splits[0] is not None else None,
        target_edge=target_edge,
        held_out=held_out,
        name=name,
        edge_y=edge_y,
        edge_splits=edge_splits,
        edge_attr=_edge_features(edge.get(EDGE_ATTR, {}), edges),
    )


def _edge_features(features: dict, edges: dict) -> dict | None:
    """``{edge type: [E, D]}`` of the types whose edges carry features, each a row per edge."""
    for et, rows in features.items():
        name = f"edge_attr__{'__'.join(et)}"
        if et not in edges:
            raise DataError(f"{name} names an edge type that has no edge_index array.")
        if rows.shape[0] != edges[et].shape[1]:
            raise DataError(f"{name} has {rows.shape[0]} rows for {edges[et].shape[1]} edges of that type.")
    return dict(features) or None


def _edge_labels(edge: dict, edges: dict) -> tuple:
    """``(edge type, labels, splits or None)`` of the one labelled edge type (``edge_label__S__R__D``,
    an edge task's), or ``(None, None, None)``."""
    labels = edge.get(EDGE_LABEL, {})
    if len(labels) > 1:
        names = ", ".join(f"({','.join(et)})" for et in labels)
        raise DataError(f"edge labels are given for {len(labels)} edge types ({names}); label one type.")
    split_types = {et for kind in EDGE_SPLITS for et in edge.get(kind, {})}
    if not labels:
        if split_types:
            raise DataError("edge_train_idx/edge_val_idx/edge_test_idx are given without edge_label; label the edges.")
        return None, None, None
    ((et, y),) = labels.items()
    if et not in edges:
        raise DataError(f"edge_label__{'__'.join(et)} names an edge type that has no edge_index array.")
    if y.shape[0] != edges[et].shape[1]:
        raise DataError(
            f"edge_label__{'__'.join(et)} has {y.shape[0]} labels for {edges[et].shape[1]} edges of that type."
        )
    if split_types - {et}:
        raise DataError(
            f"edge splits name another edge type than edge_label__{'__'.join(et)}; split the labelled type."
        )
    given = [edge.get(kind, {}).get(et) for kind in EDGE_SPLITS]
    if any(s is not None for s in given) and not all(s is not None for s in given):
        suffix = "__".join(et)
        raise DataError(
            f"give all of edge_train_idx__{suffix}, edge_val_idx__{suffix}, edge_test_idx__{suffix} or none."
        )
    return et, y, tuple(given) if given[0] is not None else None
