"""Write a graph-classification collection to a ``.npz`` file, independently of gnnbridge.

Why a separate generator: the GIN benchmark compares gnnbridge with a hand-written DGL script,
so the data must come neither from gnnbridge nor from the families its built-in
``gin-synthetic`` uses (Watts-Strogatz, Barabasi-Albert, G(n,m)); a bug shared by gnnbridge's
generator and its trainer could otherwise hide. Numpy only.

Every graph's label is the structural family that made it; every node's feature is the constant
1, so only structure can tell the classes apart. All three families have the same sizes (an even
number of nodes from 16 to 34, since a 3-regular graph needs an even count) and exactly 3n/2
edges, so mean degree 3: neither the node count nor the edge count gives the label away (a
classifier on both scores chance); a model has to look at how degrees and cycles are arranged:

* 0, ``regular``: a random 3-regular graph (every degree exactly 3, locally tree-like);
* 1, ``tree+``: a random recursive tree (node i hangs off a uniformly chosen earlier node) plus
  n/2 + 1 random extra edges: connected, degrees from 1 up to small hubs;
* 2, ``sbm``: two equal communities, 5/6 of the edges inside them and 1/6 across, drawn
  uniformly: degrees spread like tree+'s, but some isolated nodes and two dense halves.

Layout (what ``gnnbridge --dataset`` and ``handwritten_dgl_gin.py`` read): ``x`` float32 [N, 1],
``edge_index`` int64 [2, E] (global node ids, both directions, no self loops or duplicates),
``node_ptr`` int64 [G + 1], ``y`` int64 [G], and a seeded 80/10/10 split over graphs in
``train_idx`` / ``val_idx`` / ``test_idx`` so every runner scores the same test graphs.

    python benchmarks/make_graphs.py --out graphs.npz [--num-graphs 600 --seed 0]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

FAMILIES = ("regular", "tree+", "sbm")
MIN_NODES, MAX_NODES = 16, 34


def regular3(rng: np.random.Generator, n: int) -> np.ndarray:
    """A uniform random 3-regular simple graph: the configuration model, retried until it pairs
    the 3n half-edges without loops or repeated edges (about 1 try in 7 succeeds at this size)."""
    while True:
        stubs = rng.permutation(np.repeat(np.arange(n), 3)).reshape(-1, 2)
        a, b = stubs.min(1), stubs.max(1)
        if (a != b).all() and len(np.unique(a * n + b)) == len(a):
            return np.stack([a, b])


def tree_plus(rng: np.random.Generator, n: int) -> np.ndarray:
    """A random recursive tree plus n/2 + 1 distinct extra edges: 3n/2 edges in all."""
    edges = {(int(rng.integers(c)), c) for c in range(1, n)}
    while len(edges) < 3 * n // 2:
        a, b = sorted(int(v) for v in rng.choice(n, 2, replace=False))
        edges.add((a, b))
    return np.array(sorted(edges)).T


def sbm2(rng: np.random.Generator, n: int) -> np.ndarray:
    """Two equal communities with 3n/2 edges: a sixth of them, drawn uniformly, run across
    the communities, the rest inside (a fixed-count stochastic block model)."""
    a, b = np.triu_indices(n, k=1)
    inside = (a < n // 2) == (b < n // 2)
    m = 3 * n // 2
    m_across = round(m / 6)
    pick = np.concatenate(
        [
            rng.choice(np.flatnonzero(inside), m - m_across, replace=False),
            rng.choice(np.flatnonzero(~inside), m_across, replace=False),
        ]
    )
    return np.stack([a[pick], b[pick]])


def make(num_graphs: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    makers = (regular3, tree_plus, sbm2)
    labels = rng.permutation(np.arange(num_graphs) % len(FAMILIES))  # balanced classes
    sizes = 2 * rng.integers(MIN_NODES // 2, MAX_NODES // 2 + 1, size=num_graphs)
    parts, offset = [], 0
    for label, n in zip(labels, sizes):
        pairs = makers[label](rng, int(n)) + offset
        parts.append(np.concatenate([pairs, pairs[::-1]], axis=1))  # both directions
        offset += int(n)
    node_ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    order = rng.permutation(num_graphs)
    n_train, n_val = int(0.8 * num_graphs), int(0.1 * num_graphs)
    return {
        "x": np.ones((offset, 1), dtype=np.float32),
        "edge_index": np.concatenate(parts, axis=1).astype(np.int64),
        "node_ptr": node_ptr,
        "y": labels.astype(np.int64),
        "train_idx": np.sort(order[:n_train]).astype(np.int64),
        "val_idx": np.sort(order[n_train : n_train + n_val]).astype(np.int64),
        "test_idx": np.sort(order[n_train + n_val :]).astype(np.int64),
    }


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description="Write a 3-family graph-classification .npz (constant features).")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--num-graphs", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    arrays = make(args.num_graphs, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.out, **arrays)
    degree = arrays["edge_index"].shape[1] / arrays["x"].shape[0]
    print(
        f"wrote {args.out}: {args.num_graphs} graphs, {arrays['x'].shape[0]} nodes, "
        f"{arrays['edge_index'].shape[1]} directed edges (mean degree {degree:.2f})"
    )
    return args.out


if __name__ == "__main__":
    main()
