"""Built-in node-classification datasets that need no download.

* ``synthetic``: a learnable homophilous graph (a degree-corrected stochastic block model with
  weakly informative features): neighbourhood aggregation is what lifts accuracy, so a GNN
  that stops passing messages correctly visibly loses accuracy. Size and difficulty are set in
  ``dataset.options``.
* ``karate``: Zachary's karate club (34 nodes, 2 clubs) from networkx.
* ``gin-synthetic``: a graph-classification collection whose label is the family that
  generated the graph's structure; every node has the same constant feature, so a model that
  ignores the edges is at chance.
* ``npz``: bring your own graph in one ``.npz`` file (``--dataset PATH.npz``), or, with a
  ``node_ptr`` array, your own collection of graphs.

Every loader validates fully and raises one-line errors: nothing unchecked reaches a backend.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch

from gnnbridge import hookimpl
from gnnbridge.core.errors import ConfigError, DataError, DataFileNotFoundError, did_you_mean
from gnnbridge.core.interfaces import DatasetConfig, GraphCollection, GraphData, random_split


@hookimpl
def register_datasets(register):
    register("synthetic", load_synthetic, "Learnable synthetic homophilous graph (size and difficulty in dataset.options)")
    register("karate", load_karate, "Zachary's karate club: 34 nodes, 2 classes (from networkx)")
    register("gin-synthetic", load_gin_synthetic,
             "Graph classification: 3 structural families, constant node features (options in dataset.options)")
    register("npz", load_npz, "Your own graph (edge_index, x, y) or graph collection (+ node_ptr) in a .npz: "
             "--dataset PATH.npz")


def options(config: DatasetConfig, defaults: dict) -> dict:
    """``config.options`` over ``defaults``, with unknown keys and wrong types refused."""
    out = dict(defaults)
    for key, value in config.options.items():
        if key not in defaults:
            raise ConfigError(
                f"Unknown option 'dataset.options.{key}' for dataset '{config.name}'{did_you_mean(key, defaults)}. "
                f"Valid options: {', '.join(sorted(defaults))}."
            )
        expected = type(defaults[key])
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not expected:
            raise ConfigError(
                f"dataset.options.{key}={value!r} has the wrong type: expected {expected.__name__}."
            )
        out[key] = value
    return out


# --------------------------------------------------------------------------- synthetic

SYNTHETIC_DEFAULTS = {
    "num_nodes": 4000,
    "num_classes": 8,
    "num_features": 32,
    "avg_degree": 12.0,
    "homophily": 0.65,  # probability that an edge stays inside its class
    "feature_signal": 0.25,  # class-centroid strength relative to unit feature noise
}


def load_synthetic(config: DatasetConfig, seed: int) -> GraphData:
    opts = options(config, SYNTHETIC_DEFAULTS)
    n, c, f = opts["num_nodes"], opts["num_classes"], opts["num_features"]
    if n < 3 * c or c < 2 or f < 1:
        raise ConfigError(
            f"dataset.options: num_nodes={n}, num_classes={c}, num_features={f} is impossible; "
            "need num_classes >= 2, num_features >= 1 and num_nodes >= 3 * num_classes."
        )
    if not 0.0 <= opts["homophily"] <= 1.0 or opts["avg_degree"] <= 0:
        raise ConfigError("dataset.options: homophily must be in [0, 1] and avg_degree > 0.")
    return synthetic_graph(n, c, f, opts["avg_degree"], opts["homophily"], opts["feature_signal"], seed)


def synthetic_graph(n: int, c: int, f: int, avg_degree: float, homophily: float, signal: float, seed: int) -> GraphData:
    """A symmetric SBM-like graph; generated vectorised, deterministic in ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, c, (n,), generator=gen)
    members = torch.argsort(y, stable=True)  # nodes grouped by class
    start = torch.zeros(c + 1, dtype=torch.int64)
    start[1:] = torch.bincount(y, minlength=c).cumsum(0)
    m = int(n * avg_degree / 2)
    src = torch.randint(0, n, (m,), generator=gen)
    same = torch.rand(m, generator=gen) < homophily
    # Same-class partner: a uniform member of src's class; otherwise any node.
    cls = y[src]
    size = start[cls + 1] - start[cls]
    pick = start[cls] + (torch.rand(m, generator=gen) * size).long().clamp(max=n - 1)
    dst = torch.where(same, members[pick.clamp(max=n - 1)], torch.randint(0, n, (m,), generator=gen))
    keep = src != dst
    src, dst = src[keep], dst[keep]
    edges = torch.unique(torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], 1), dim=1)
    centroids = torch.randn(c, f, generator=gen)
    x = (signal * centroids[y] + torch.randn(n, f, generator=gen)).float()
    train, val, test = random_split(n, seed)
    return GraphData.from_edges(edges, x, y, train, val, test, num_classes=c, name="synthetic")


# --------------------------------------------------------------------------- karate


def load_karate(config: DatasetConfig, seed: int) -> GraphData:
    import networkx as nx

    options(config, {})
    g = nx.karate_club_graph()
    n = g.number_of_nodes()
    edges = torch.tensor(list(g.edges()), dtype=torch.int64).t()
    edge_index = torch.cat([edges, edges.flip(0)], dim=1)
    y = torch.tensor([0 if g.nodes[v]["club"] == "Mr. Hi" else 1 for v in range(n)], dtype=torch.int64)
    x = torch.eye(n, dtype=torch.float32)
    train, val, test = random_split(n, seed)
    return GraphData.from_edges(edge_index, x, y, train, val, test, num_classes=2, name="karate")


# --------------------------------------------------------------------------- gin-synthetic

GIN_SYNTHETIC_DEFAULTS = {"num_graphs": 1000, "min_nodes": 12, "max_nodes": 40}
FAMILIES = ("small-world", "preferential-attachment", "uniform-random")


def load_gin_synthetic(config: DatasetConfig, seed: int) -> GraphCollection:
    opts = options(config, GIN_SYNTHETIC_DEFAULTS)
    g, lo, hi = opts["num_graphs"], opts["min_nodes"], opts["max_nodes"]
    if g < 3 * len(FAMILIES) or not 6 <= lo <= hi:
        raise ConfigError(
            f"dataset.options: num_graphs={g}, min_nodes={lo}, max_nodes={hi} is impossible; need "
            f"num_graphs >= {3 * len(FAMILIES)} and 6 <= min_nodes <= max_nodes."
        )
    return family_graphs(g, lo, hi, seed)


def family_graphs(num_graphs: int, min_nodes: int, max_nodes: int, seed: int) -> GraphCollection:
    """Graphs from three generators with the same size range and mean degree (about 4): a
    Watts-Strogatz ring (near-regular, clustered), Barabasi-Albert (hubs), and a uniform random
    graph with 2n edges (Poisson degrees, few triangles). Only structure tells them apart."""
    import networkx as nx

    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(num_graphs) % len(FAMILIES))
    sizes = rng.integers(min_nodes, max_nodes + 1, size=num_graphs)
    edges, offset = [], 0
    for label, n in zip(labels, sizes):
        n, s = int(n), int(rng.integers(2**31))
        if label == 0:
            graph = nx.watts_strogatz_graph(n, 4, 0.1, seed=s)
        elif label == 1:
            graph = nx.barabasi_albert_graph(n, 2, seed=s)
        else:
            graph = nx.gnm_random_graph(n, 2 * n, seed=s)
        pairs = np.asarray(list(graph.edges()), dtype=np.int64).reshape(-1, 2).T + offset
        edges.append(np.concatenate([pairs, pairs[::-1]], axis=1))
        offset += n
    node_ptr = torch.from_numpy(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
    return GraphCollection.from_edges(
        torch.ones(offset, 1), torch.from_numpy(np.concatenate(edges, axis=1)), node_ptr,
        torch.from_numpy(labels.astype(np.int64)), num_classes=len(FAMILIES), seed=seed, name="gin-synthetic",
    )


# --------------------------------------------------------------------------- npz

NPZ_REQUIRED = {"edge_index": (np.int64, 2), "x": (np.float32, 2), "y": (np.int64, 1)}
NPZ_SPLITS = ("train_idx", "val_idx", "test_idx")
NODE_PTR = "node_ptr"  # present: the file is a collection of graphs (graph classification)


def load_npz(config: DatasetConfig, seed: int) -> GraphData | GraphCollection:
    options(config, {})
    if not config.path:
        raise ConfigError("Dataset 'npz' needs a file: --dataset PATH.npz (or dataset.path in the config).")
    path = Path(config.path)
    arrays = read_npz(path)
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}
    splits = _npz_splits(path, tensors)
    if NODE_PTR in tensors:
        try:
            return GraphCollection.from_edges(tensors["x"], tensors["edge_index"], tensors[NODE_PTR], tensors["y"],
                                              splits, seed=seed, name=path.stem)
        except DataError as exc:
            raise DataError(f"{path}: {exc}") from None
    n = tensors["x"].shape[0]
    if tensors["y"].shape[0] != n:
        raise DataError(
            f"{path}: y has {tensors['y'].shape[0]} labels but x has {n} rows; give one label per node "
            f"(or add {NODE_PTR} for a collection of graphs with one label each)."
        )
    splits = splits or list(random_split(n, seed))
    try:
        return GraphData.from_edges(tensors["edge_index"], tensors["x"], tensors["y"], *splits, name=path.stem)
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None


def _npz_splits(path: Path, tensors: dict[str, torch.Tensor]) -> list[torch.Tensor] | None:
    present = [k for k in NPZ_SPLITS if k in tensors]
    if present and len(present) != 3:
        missing = sorted(set(NPZ_SPLITS) - set(present))
        raise DataError(f"{path}: has {', '.join(present)} but not {', '.join(missing)}; give all three splits or none.")
    return [tensors[k] for k in NPZ_SPLITS] if present else None


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """Load and type-check the arrays; pickled objects are refused (``allow_pickle=False``)."""
    if path.is_dir():
        raise DataFileNotFoundError(f"Dataset file '{path}' is a folder, not a file; give the .npz file itself.")
    if not path.is_file():
        raise DataFileNotFoundError(f"Dataset file '{path}' does not exist.")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise DataError(f"{path}: cannot be read as a numpy .npz file ({exc}).") from None
    missing = [k for k in NPZ_REQUIRED if k not in arrays]
    if missing:
        raise DataError(
            f"{path}: missing array(s) {', '.join(missing)}; a graph .npz needs edge_index int64 [2,E], "
            "x float32 [N,F], y int64 [N] (and optionally train_idx, val_idx, test_idx); a collection of "
            f"graphs also has {NODE_PTR} int64 [G+1] and y int64 [G]."
        )
    expected = {**NPZ_REQUIRED, NODE_PTR: (np.int64, 1), **{k: (np.int64, 1) for k in NPZ_SPLITS}}
    for key, array in arrays.items():
        if key not in expected:
            continue
        dtype, ndim = expected[key]
        if array.dtype != dtype:
            raise DataError(f"{path}: {key} has dtype {array.dtype}; expected {np.dtype(dtype).name} (cast it with .astype).")
        if array.ndim != ndim:
            raise DataError(f"{path}: {key} has shape {list(array.shape)}; expected {ndim} dimension(s).")
    if arrays["edge_index"].shape[0] != 2:
        raise DataError(f"{path}: edge_index has shape {list(arrays['edge_index'].shape)}; expected [2, E].")
    return arrays
