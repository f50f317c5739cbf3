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

import math
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
import torch

from gnnbridge import hookimpl
from gnnbridge.core.errors import ConfigError, DataError, DataFileNotFoundError, ResourceError, did_you_mean
from gnnbridge.core.interfaces import (
    DatasetConfig,
    GraphCollection,
    GraphData,
    HeteroSource,
    available_memory,
    format_bytes,
    random_split,
)
from gnnbridge.core.records.formats import (  # noqa: F401 - the format's tables, used here and by plugins
    HETERO_EDGE_KEYS,
    HETERO_MARKERS,
    HETERO_NODE_KEYS,
    NODE_PTR,
    NPZ_ARRAYS,
    NPZ_REQUIRED,
    NPZ_SPLITS,
    check_header,
)


@hookimpl
def register_datasets(register):
    register(
        "synthetic", load_synthetic, "Learnable synthetic homophilous graph (size and difficulty in dataset.options)"
    )
    register("karate", load_karate, "Zachary's karate club: 34 nodes, 2 classes (from networkx)")
    register(
        "gin-synthetic",
        load_gin_synthetic,
        "Graph classification: 3 structural families, constant node features (options in dataset.options)",
    )
    register(
        "npz",
        load_npz,
        "Your own graph (edge_index, x, y) or graph collection (+ node_ptr) in a .npz: --dataset PATH.npz",
    )


def options(config: DatasetConfig, defaults: dict) -> dict:
    """``config.options`` over ``defaults``, with unknown keys and wrong types refused."""
    out = dict(defaults)
    for key, value in config.options.items():
        if key not in defaults:
            valid = (
                f"Valid options: {', '.join(sorted(defaults))}."
                if defaults
                else f"Dataset '{config.name}' takes no options; remove dataset.options."
            )
            raise ConfigError(
                f"Unknown option {_show(f'dataset.options.{key}')} for dataset '{config.name}'"
                f"{did_you_mean(str(key)[:100], defaults)}. {valid}"
            )
        expected = type(defaults[key])
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            try:
                value = float(value)
            except OverflowError:
                raise ConfigError(f"dataset.options.{key}={_show(value)} is too large for a number.") from None
        if type(value) is not expected:
            raise ConfigError(f"dataset.options.{key}={_show(value)} has the wrong type: expected {expected.__name__}.")
        if expected is float and not math.isfinite(value):
            raise ConfigError(f"dataset.options.{key}={value} is not a finite number; give a real number.")
        out[key] = value
    return out


def _show(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def check_fits(what: str, nbytes: int, fix: str) -> None:
    """Refuse to build something of ``nbytes`` that this machine cannot hold (before building it)."""
    free = available_memory()
    if nbytes > free:
        raise ResourceError(
            f"{what} would need about {format_bytes(nbytes)} of memory but {format_bytes(free)} is free; {fix}."
        )


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
    _at_least("num_classes", c, 2, "classification needs two classes")
    _at_least("num_features", f, 1, "every node needs a feature")
    _at_least("num_nodes", n, 3 * c, f"every class needs a node in each split (3 x num_classes={c})")
    if not opts["avg_degree"] > 0:
        raise ConfigError(
            f"dataset.options.avg_degree={opts['avg_degree']} must be > 0 (the mean number of edges per node, e.g. 12)."
        )
    if not 0.0 <= opts["homophily"] <= 1.0:
        raise ConfigError(
            f"dataset.options.homophily={opts['homophily']} must be in [0, 1] (the share of edges "
            "that stay inside a class, e.g. 0.65)."
        )
    edges = n * opts["avg_degree"]
    check_fits(
        f"The synthetic graph (num_nodes={n}, num_features={f}, avg_degree={opts['avg_degree']})",
        int(n * f * 4 * 3 + edges * 8 * 12 + n * 8 * 8),
        "use smaller dataset.options",
    )
    return synthetic_graph(n, c, f, opts["avg_degree"], opts["homophily"], opts["feature_signal"], seed)


def _at_least(key: str, value: int, low: int, why: str) -> None:
    if value < low:
        raise ConfigError(f"dataset.options.{key}={value} is too small: it must be at least {low} ({why}).")


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
GIN_SYNTHETIC_MAX_NODES = 2_000_000  # nodes in all: about a minute of networkx
FAMILIES = ("small-world", "preferential-attachment", "uniform-random")


def load_gin_synthetic(config: DatasetConfig, seed: int) -> GraphCollection:
    opts = options(config, GIN_SYNTHETIC_DEFAULTS)
    g, lo, hi = opts["num_graphs"], opts["min_nodes"], opts["max_nodes"]
    _at_least("num_graphs", g, 3 * len(FAMILIES), "each family needs a graph in each split")
    _at_least("min_nodes", lo, 6, "the generators need six nodes")
    _at_least("max_nodes", hi, lo, f"the largest graph cannot be smaller than min_nodes={lo}")
    if g * (lo + hi) // 2 > GIN_SYNTHETIC_MAX_NODES:  # networkx builds each graph in Python: a time bound too
        raise ConfigError(
            f"dataset.options: num_graphs={g} graphs of {lo} to {hi} nodes make about {g * (lo + hi) // 2:,} nodes, "
            f"more than gin-synthetic generates ({GIN_SYNTHETIC_MAX_NODES:,}); lower num_graphs or max_nodes, or "
            "bring a large collection as a .npz file (--dataset PATH.npz)."
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
        torch.ones(offset, 1),
        torch.from_numpy(np.concatenate(edges, axis=1)),
        node_ptr,
        torch.from_numpy(labels.astype(np.int64)),
        num_classes=len(FAMILIES),
        seed=seed,
        name="gin-synthetic",
    )


# --------------------------------------------------------------------------- npz


def load_npz(config: DatasetConfig, seed: int) -> GraphData | GraphCollection | HeteroSource:
    options(config, {})
    if not config.path:
        raise ConfigError("Dataset 'npz' needs a file: --dataset PATH.npz (or dataset.path in the config).")
    path = Path(config.path)
    if is_hetero_npz(path):
        from gnnbridge.plugins.hetero_datasets import load_hetero_npz

        return load_hetero_npz(path)
    arrays = read_npz(path)
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}
    splits = _npz_splits(path, tensors)
    if NODE_PTR in tensors:
        try:
            return GraphCollection.from_edges(
                tensors["x"], tensors["edge_index"], tensors[NODE_PTR], tensors["y"], splits, seed=seed, name=path.stem
            )
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
        raise DataError(
            f"{path}: has {', '.join(present)} but not {', '.join(missing)}; give all three splits or none."
        )
    return [tensors[k] for k in NPZ_SPLITS] if present else None


# NPZ_ARRAYS (core.records.formats): what each array of the format is; nothing else in a file is
# read (an unused member is never decompressed, whatever its header claims).
HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
DEFLATE_MAX_RATIO = 1100  # deflate cannot expand data more than ~1032x: a header claiming more lies
ZIP_ERRORS = (
    OSError,
    ValueError,
    EOFError,
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    NotImplementedError,
    RuntimeError,
    zlib.error,
    struct.error,
    KeyError,
    OverflowError,
    SyntaxError,
    TypeError,
)


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """Read the format's arrays from ``path``, checking each header (dtype, shape, size) before
    any data is read: object arrays (pickles) are refused, and so is a header that claims more
    data than the member holds or than this machine could hold.

    Why not ``numpy.load``: it trusts each header and allocates what it claims before reading."""

    def select(members: dict) -> dict:
        missing = [k for k in NPZ_REQUIRED if k not in members]
        if missing:
            raise DataError(
                f"{path}: missing array(s) {', '.join(missing)}; a graph .npz needs edge_index int64 [2,E], "
                "x float32 [N,F], y int64 [N] (and optionally train_idx, val_idx, test_idx); a collection of "
                f"graphs also has {NODE_PTR} int64 [G+1] and y int64 [G]; a heterogeneous graph has typed keys "
                "such as x__paper and edge_index__author__writes__paper."
            )
        return {key: spec for key, spec in NPZ_ARRAYS.items() if key in members}

    arrays = read_members(path, select)
    if arrays["edge_index"].shape[0] != 2:
        raise DataError(f"{path}: edge_index has shape {list(arrays['edge_index'].shape)}; expected [2, E].")
    return arrays


def is_hetero_npz(path: Path) -> bool:
    """Whether the file uses the heterogeneous format's typed keys (``kind__type``)."""
    return bool(read_members(path, lambda members: {}, names_only=True) & set(HETERO_MARKERS))


def read_members(path: Path, select, names_only: bool = False):
    """``{key: array}`` for the members ``select(members)`` returns as ``{key: (dtype, ndim)}``,
    each checked before it is read; ``names_only``: the set of array-kind prefixes present."""
    _check_file(path)
    try:
        with zipfile.ZipFile(path) as archive:
            members = {info.filename[:-4]: info for info in archive.infolist() if info.filename.endswith(".npy")}
            if names_only:
                return {name.split("__", 1)[0] for name in members if "__" in name}
            return {key: _read_member(path, archive, members[key], key, *spec) for key, spec in select(members).items()}
    except (DataError, ResourceError):
        raise
    except ZIP_ERRORS as exc:
        detail = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
        raise DataError(
            f"{path}: cannot be read as a numpy .npz file ({detail}); write it with "
            "numpy.savez(path, edge_index=..., x=..., y=...)."
        ) from None


def _check_file(path: Path) -> None:
    if path.is_dir():
        raise DataFileNotFoundError(f"Dataset file '{path}' is a folder, not a file; give the .npz file itself.")
    if path.exists() and not path.is_file():
        raise DataFileNotFoundError(
            f"Dataset file '{path}' is not a regular file (a device, pipe or socket); give the .npz file itself."
        )
    if not path.is_file():
        raise DataFileNotFoundError(
            f"Dataset file '{path}' does not exist; give an existing .npz (a run or checkpoint "
            "whose data moved: --set dataset.path=NEW)."
        )


def _read_member(path: Path, archive: zipfile.ZipFile, info: zipfile.ZipInfo, key: str, dtype, ndim: int) -> np.ndarray:
    with archive.open(info) as f:
        try:
            version = np.lib.format.read_magic(f)
            if version not in HEADER_READERS:  # 3.0 exists only for structured dtypes: never one of ours
                raise ValueError(f"npy format version {version}")
            shape, fortran, found = HEADER_READERS[version](f)
        except ValueError as exc:
            raise DataError(
                f"{path}: {key} is not a numpy array ({str(exc)[:100]}); save arrays with numpy.savez."
            ) from None
        _check_header(path, key, found, shape, dtype, ndim)
        nbytes = math.prod(shape) * found.itemsize
        if nbytes > info.file_size - f.tell() or nbytes > info.compress_size * DEFLATE_MAX_RATIO + 4096:
            raise DataError(
                f"{path}: {key} claims shape {list(shape)} ({format_bytes(nbytes)}) but the file holds "
                "less: it is truncated or corrupt; write it again."
            )
        check_fits(f"{path}: {key} {list(shape)}", nbytes, "use a machine with more memory, or a smaller graph")
        buffer = bytearray(nbytes)
        if _read_into(f, buffer) != nbytes:
            raise DataError(f"{path}: {key} ends early: the file is truncated or corrupt; write it again.")
    array = np.frombuffer(buffer, dtype=found)
    return array.reshape(shape, order="F" if fortran else "C")


READ_CHUNK = 64 << 20


def _read_into(f, buffer: bytearray) -> int:
    """Fill ``buffer`` from ``f`` chunk by chunk; returns the bytes read. A zip member's
    ``readinto`` reads the whole member into a temporary ``bytes`` first, which doubled the peak
    memory of loading a Reddit-scale edge list (1.75 GB more)."""
    view, pos = memoryview(buffer), 0
    while pos < len(buffer):
        chunk = f.read(min(READ_CHUNK, len(buffer) - pos))
        if not chunk:
            break
        view[pos : pos + len(chunk)] = chunk
        pos += len(chunk)
    return pos


_check_header = check_header  # the format's header check, shared with folder datasets (core)
