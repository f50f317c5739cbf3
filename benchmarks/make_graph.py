"""Write a node-classification graph to a ``.npz`` file, independently of gnnbridge.

Why a separate generator: the benchmark compares gnnbridge with hand-written scripts, so the
data must not come from gnnbridge itself (a bug shared by its generator and its trainer could
otherwise hide). This file uses numpy only and writes the plain ``.npz`` layout every runner
reads: ``edge_index`` int64 [2, E], ``x`` float32 [N, F], ``y`` int64 [N] and a seeded
60/20/20 ``train_idx`` / ``val_idx`` / ``test_idx``.

The graph is a degree-corrected planted partition (stochastic block model):

* every node gets a class and a Pareto-distributed "activity" weight, so degrees are heavy
  tailed like real graphs (many nodes of degree ~10, a few hubs of degree in the hundreds);
* each edge starts at a node drawn in proportion to its weight and ends, with probability
  ``homophily``, at a node of the same class (else at any node), again drawn by weight;
* edges are made symmetric, self loops removed, duplicates merged.

Features are a class centroid plus much stronger Gaussian noise: one node's own features
identify its class only about half the time, while the mean over its neighbours (mostly of the
same class) averages the noise away. So a plain MLP lands near 50% and a GNN far higher: an
implementation that stops passing messages correctly shows up as lost accuracy.

Sizes up to Reddit's (233k nodes, ~110M directed edges, 602 features) fit in a few GB: edges are
drawn in chunks and deduplicated as one int64 key each, features written row block by row
block into the float32 result (Reddit scale: 45 s, 2.6 GB peak on a 2-core machine).

    python benchmarks/make_graph.py OUT.npz [--nodes 20000 --features 64 --avg-degree 16 --classes 16 --seed 0]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

DEFAULTS = dict(
    nodes=20_000, classes=16, features=64, avg_degree=16.0, homophily=0.45, signal=0.22, pareto_shape=2.5, seed=0
)


def degree_weights(rng: np.random.Generator, n: int, shape: float) -> np.ndarray:
    """Heavy-tailed per-node activity (Pareto, minimum 1), capped so no node dominates."""
    weights = 1.0 + rng.pareto(shape, n)
    return np.minimum(weights, np.sqrt(n))


CHUNK = 1 << 22  # edges (or feature values) per pass: bounds the temporaries at Reddit scale


def chunks(total: int, size: int | None = None):
    """Consecutive slices covering ``range(total)``.

    Why chunks: at Reddit scale (56M candidate edges) each whole-array temporary of the picks
    costs 450 MB and there are about ten of them. numpy's generator draws the same stream in
    pieces as in one call, so chunking changes no number in the file.
    """
    size = size or CHUNK
    return (slice(a, min(a + size, total)) for a in range(0, total, size))


def weighted_picks(rng: np.random.Generator, cum: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each i, a position j with probability proportional to its weight, among [lo_i, hi_i).

    ``cum`` is the inclusive cumulative sum of the weights; drawing a uniform point in the
    covered stretch of it and locating it with a binary search does all picks at once.
    """
    start = np.where(lo > 0, cum[np.maximum(lo - 1, 0)], 0.0)
    point = start + rng.random(lo.size) * (cum[hi - 1] - start)
    return np.minimum(np.searchsorted(cum, point, side="right"), hi - 1)


def edge_ends(
    rng: np.random.Generator, y: np.ndarray, weights: np.ndarray, m: int, homophily: float
) -> tuple[np.ndarray, np.ndarray]:
    """``m`` candidate edges (src, dst): src by weight; dst of src's class with probability
    ``homophily`` (else any node), by weight. Drawn chunk by chunk, in the order of one draw."""
    n, classes = y.size, int(y.max()) + 1
    order = np.argsort(y, kind="stable")  # nodes grouped by class, so each class is a slice
    cum = np.cumsum(weights[order])
    bounds = np.concatenate([[0], np.cumsum(np.bincount(y, minlength=classes))])
    src, dst = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64)
    for part in chunks(m):
        size = part.stop - part.start
        src[part] = order[weighted_picks(rng, cum, np.zeros(size, dtype=np.int64), np.full(size, n))]
    same = rng.random(m) < homophily
    for part in chunks(m):
        cls = y[src[part]]
        lo = np.where(same[part], bounds[cls], 0)
        hi = np.where(same[part], bounds[cls + 1], n)
        dst[part] = order[weighted_picks(rng, cum, lo, hi)]
    return src, dst


def planted_edges(
    rng: np.random.Generator, y: np.ndarray, weights: np.ndarray, avg_degree: float, homophily: float
) -> np.ndarray:
    """Symmetric, loop-free, deduplicated edges of a degree-corrected planted partition,
    sorted by (src, dst).

    Each edge is one int64 key ``src * n + dst``: sorting and deduplicating those in place
    gives the same result as ``np.unique(pairs, axis=1)`` at a fraction of its memory and time
    (that one sorts 16-byte records through copies: ~10 GB and minutes at Reddit scale).
    """
    n = y.size
    src, dst = edge_ends(rng, y, weights, int(n * avg_degree / 2), homophily)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    del keep
    keys = np.empty(2 * src.size, dtype=np.int64)
    np.multiply(src, n, out=keys[: src.size])
    keys[: src.size] += dst
    np.multiply(dst, n, out=keys[src.size :])
    keys[src.size :] += src
    del src, dst
    keys.sort()
    fresh = np.empty(keys.size, dtype=bool)
    fresh[:1] = True
    np.not_equal(keys[1:], keys[:-1], out=fresh[1:])
    keys = keys[fresh]
    del fresh
    edge_index = np.empty((2, keys.size), dtype=np.int64)
    np.floor_divide(keys, n, out=edge_index[0])
    np.remainder(keys, n, out=edge_index[1])
    return edge_index


def noisy_features(rng: np.random.Generator, y: np.ndarray, features: int, signal: float) -> np.ndarray:
    """Class centroid scaled by ``signal`` plus unit Gaussian noise: weakly informative alone.

    Written row block by row block into the float32 result (the same numbers as one float64
    draw), so no full-size float64 copy exists: 1.1 GB each at Reddit scale.
    """
    centroids = rng.standard_normal((int(y.max()) + 1, features))
    x = np.empty((y.size, features), dtype=np.float32)
    for rows in chunks(y.size, max(1, CHUNK // features)):
        noise = rng.standard_normal((rows.stop - rows.start, features))
        noise += signal * centroids[y[rows]]
        x[rows] = noise
    return x


def split(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A seeded 60/20/20 train/val/test split (sorted ids, pairwise disjoint)."""
    perm = rng.permutation(n)
    a, b = int(0.6 * n), int(0.8 * n)
    return tuple(np.sort(part).astype(np.int64) for part in (perm[:a], perm[a:b], perm[b:]))


def make_graph(
    nodes: int,
    classes: int,
    features: int,
    avg_degree: float,
    homophily: float,
    signal: float,
    pareto_shape: float,
    seed: int,
) -> dict[str, np.ndarray]:
    """All arrays of the ``.npz``; deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, nodes).astype(np.int64)
    weights = degree_weights(rng, nodes, pareto_shape)
    edge_index = planted_edges(rng, y, weights, avg_degree, homophily)
    x = noisy_features(rng, y, features, signal)
    train_idx, val_idx, test_idx = split(rng, nodes)
    return dict(edge_index=edge_index, x=x, y=y, train_idx=train_idx, val_idx=val_idx, test_idx=test_idx)


def describe(arrays: dict[str, np.ndarray]) -> str:
    """One line of statistics, to check that the graph looks as intended."""
    n, e = arrays["x"].shape[0], arrays["edge_index"].shape[1]
    src, dst = arrays["edge_index"]
    deg = np.bincount(dst, minlength=n)
    y = arrays["y"]
    same = sum(int(np.count_nonzero(y[src[p]] == y[dst[p]])) for p in chunks(e)) / max(1, e)
    return (
        f"{n} nodes, {e} directed edges (avg degree {e / n:.1f}, max {deg.max()}, "
        f"isolated {int((deg == 0).sum())}), edge homophily {same:.2f}, "
        f"{int(arrays['y'].max()) + 1} classes, {arrays['x'].shape[1]} features"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the .npz file to write")
    parser.add_argument("--nodes", type=int, default=DEFAULTS["nodes"])
    parser.add_argument("--classes", type=int, default=DEFAULTS["classes"])
    parser.add_argument("--features", type=int, default=DEFAULTS["features"])
    parser.add_argument("--avg-degree", type=float, default=DEFAULTS["avg_degree"])
    parser.add_argument("--homophily", type=float, default=DEFAULTS["homophily"])
    parser.add_argument("--signal", type=float, default=DEFAULTS["signal"])
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    args = parser.parse_args(argv)
    arrays = make_graph(
        args.nodes,
        args.classes,
        args.features,
        args.avg_degree,
        args.homophily,
        args.signal,
        DEFAULTS["pareto_shape"],
        args.seed,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.out, **arrays)
    print(f"wrote {args.out}: {describe(arrays)}")


if __name__ == "__main__":
    main()
