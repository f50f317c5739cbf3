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

:func:`molecule_graphs` makes the arrays of a collection shaped like small molecules (atoms,
bonds with their types as edge features), the standard shape on which the graph tasks'
defaults are tested (``tests/integration/test_defaults.py``).

Every loader validates fully and raises one-line errors: nothing unchecked reaches a backend.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from gnnbridge.core.contracts.hookspecs import hookimpl
from gnnbridge.core.contracts.loading import reading_of
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.interfaces import (
    DatasetConfig,
    GraphCollection,
    GraphData,
    HeteroSource,
    LoaderConfig,
    random_split,
)
from gnnbridge.core.storage.formats import (  # noqa: F401 - the format's tables, used here and by plugins
    HETERO_EDGE_KEYS,
    HETERO_MARKERS,
    HETERO_NODE_KEYS,
    NODE_PTR,
    NPZ_ARRAYS,
    NPZ_REQUIRED,
    NPZ_SPLITS,
    check_header,
    graph_from_arrays,
)
from gnnbridge.plugins.npz import is_hetero_npz, read_hetero_npz, read_npz
from gnnbridge.plugins.options import at_least, check_fits, options


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
    at_least("num_classes", c, 2, "classification needs two classes")
    at_least("num_features", f, 1, "every node needs a feature")
    at_least("num_nodes", n, 3 * c, f"every class needs a node in each split (3 x num_classes={c})")
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
    at_least("num_graphs", g, 3 * len(FAMILIES), "each family needs a graph in each split")
    at_least("min_nodes", lo, 6, "the generators need six nodes")
    at_least("max_nodes", hi, lo, f"the largest graph cannot be smaller than min_nodes={lo}")
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


# --------------------------------------------------------------------------- molecules

ATOM_TYPES = ("C", "N", "O", "S", "Cl")
ATOM_SHARES = (0.7, 0.12, 0.12, 0.03, 0.03)  # the mean composition; each molecule draws its own
BOND_TYPES = ("single", "double", "triple", "aromatic")


def molecule_graphs(
    num_graphs: int, seed: int, min_nodes: int = 10, max_nodes: int = 30
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """A collection shaped like small molecules, as the ``.npz`` format's arrays (``x``: one-hot
    atom types [N, 5]; ``edge_index``: every bond both ways; ``edge_attr``: one-hot bond types
    [E, 4]; ``node_ptr``), and each molecule's share of each bond type ``[num_graphs, 4]``, from
    which its targets are made. A molecule has ``min_nodes`` to ``max_nodes`` atoms of its own
    composition, bonded as a random tree plus a ring closure per six atoms; a bond is double
    more often at an N or O end and in molecules that lean that way, else aromatic, triple or
    single. So the atoms say something of the bonds (a linear fit of the double-bond share on
    the atom shares reaches R² about 0.5) and the bonds say all of it."""
    rng = np.random.default_rng(seed)
    xs, edges, attrs, shares, ptr = [], [], [], [], [0]
    for n in rng.integers(min_nodes, max_nodes + 1, size=num_graphs):
        n = int(n)
        atom = rng.choice(len(ATOM_TYPES), n, p=rng.dirichlet(8 * np.asarray(ATOM_SHARES)))
        parent = (rng.random(n - 1) * np.arange(1, n)).astype(np.int64)  # each atom bonds to an earlier one
        src = np.r_[np.arange(1, n), rng.integers(0, n, n // 6)]
        dst = np.r_[parent, rng.integers(0, n, n // 6)]
        src, dst = src[src != dst], dst[src != dst]
        polar = np.isin(atom[src], (1, 2)) | np.isin(atom[dst], (1, 2))
        double = rng.random(src.size) < np.clip(0.35 * rng.beta(2, 5) + 0.5 * polar, 0, 0.95)
        other = np.where(rng.random(src.size) < 0.15, 3, np.where(rng.random(src.size) < 0.05, 2, 0))
        bond = np.eye(len(BOND_TYPES), dtype=np.float32)[np.where(double, 1, other)]
        xs.append(np.eye(len(ATOM_TYPES), dtype=np.float32)[atom])
        edges.append(np.stack([np.r_[src, dst], np.r_[dst, src]]) + ptr[-1])
        attrs.append(np.r_[bond, bond])
        shares.append(bond.mean(0))
        ptr.append(ptr[-1] + n)
    arrays = {
        "x": np.concatenate(xs),
        "edge_index": np.concatenate(edges, axis=1).astype(np.int64),
        "edge_attr": np.concatenate(attrs),
        "node_ptr": np.asarray(ptr, dtype=np.int64),
    }
    return arrays, np.stack(shares)


# --------------------------------------------------------------------------- npz


def load_npz(config: LoaderConfig, seed: int) -> GraphData | GraphCollection | HeteroSource:
    options(config, {})
    if not config.path:
        raise ConfigError("Dataset 'npz' needs a file: --dataset PATH.npz (or dataset.path in the config).")
    path = Path(config.path)
    reading = reading_of(config)
    arrays = read_hetero_npz(path, reading.form) if is_hetero_npz(path) else read_npz(path, reading)
    return graph_from_arrays(path, arrays, seed, path.stem, reading)
