"""Write a node-classification graph as a folder of ``.npy`` files, chunk by chunk, never
holding the features (or the edges) in memory.

Why a generator of its own: ``make_graph.py`` builds its arrays in memory and writes one
``.npz``, which is exactly what a graph larger than memory cannot do. This one writes
``x.npy`` and ``edge_index.npy`` through ``np.lib.format.open_memmap`` a block at a time (what
the README tells users to do), so 10M nodes x 768 float32 features (31 GB) and 100M edges are
written on a machine with 24 GB of RAM. Its memory is a few arrays of ``[nodes]`` (labels, the
class-sorted node order: 160 MB at 10M nodes) plus one block. numpy only (not gnnbridge): the
data must not come from the code it measures.

The graph is learnable, so accuracy above chance means the run trained on the right rows:

* every node has a class (uniform); its features are ``signal x centroid(class) + N(0, 1)``
  with ``signal = 1.76 / sqrt(features)`` by default, so one node's own features identify its
  class about half the time at any width (``make_graph.py``'s 0.22 at 64 features);
* ``edges`` directed edges, written as ``edges / 2`` pairs in both directions (so in-degree =
  out-degree and ``placement.feature_cache``'s highest-in-degree rows are the most sampled);
  one end of a pair is any node, the other with probability ``homophily`` (default 0.8) a node
  of the same class, else any node; within a class a node is drawn with a heavy-tailed
  popularity (position ``size * u ** 2.5`` in a random order: the top 1% of nodes get ~16% of
  the ends, the top 10% ~40%), so a cache of the most popular rows has something to hit.
  Duplicate edges and self loops are left in (rare; a sampler handles both);
* ``train_idx``/``val_idx``/``test_idx`` are disjoint random nodes, ``--train-nodes`` and
  ``--eval-nodes`` (each of val and test) of them, at most 60/20/20% of the nodes: an epoch's
  length is set by the training nodes, not by the graph.

    python benchmarks/make_big_graph.py OUT_DIR [--nodes 200000 --features 64 --edges 2000000
        --classes 16 --dtype float32 --train-nodes 20480 --eval-nodes 10240 --seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

POPULARITY = 2.5  # exponent of u in a within-class pick: larger = more skewed degrees
BLOCK_BYTES = 64 << 20  # what one block of features or edges occupies while it is written


def class_order(rng: np.random.Generator, y: np.ndarray, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes sorted by class, in random order within a class (their popularity rank), and the
    class boundaries in that order. Random within a class: popular rows are spread over the
    file, not packed at its start, so the disk sees random reads."""
    order = np.lexsort((rng.random(y.size), y))
    bounds = np.concatenate([[0], np.cumsum(np.bincount(y, minlength=classes))])
    return order, bounds


def popular_picks(rng: np.random.Generator, order: np.ndarray, bounds: np.ndarray, cls: np.ndarray) -> np.ndarray:
    """One node of each given class, drawn by popularity (low positions in ``order`` are likely)."""
    size = bounds[cls + 1] - bounds[cls]
    pos = (size * rng.random(cls.size) ** POPULARITY).astype(np.int64)
    return order[bounds[cls] + np.minimum(pos, size - 1)]


def write_edges(path: Path, rng: np.random.Generator, y: np.ndarray, edges: int, homophily: float) -> None:
    """``edge_index.npy`` int64 [2, edges]: ``edges // 2`` pairs, each written both ways, one
    block of pairs at a time (the first half of the columns holds (a, b), the second (b, a))."""
    classes = int(y.max()) + 1
    order, bounds = class_order(rng, y, classes)
    share = np.bincount(y, minlength=classes) / y.size
    pairs = edges // 2
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.int64, shape=(2, 2 * pairs))
    step = max(1, BLOCK_BYTES // 32)
    for lo in range(0, pairs, step):
        hi = min(lo + step, pairs)
        a = popular_picks(rng, order, bounds, rng.choice(classes, hi - lo, p=share))
        other = rng.choice(classes, hi - lo, p=share)
        b = popular_picks(rng, order, bounds, np.where(rng.random(hi - lo) < homophily, y[a], other))
        out[0, lo:hi], out[1, lo:hi] = a, b
        out[0, pairs + lo : pairs + hi], out[1, pairs + lo : pairs + hi] = b, a
    out.flush()
    del out


def write_features(
    path: Path, rng: np.random.Generator, y: np.ndarray, features: int, signal: float, dtype: str
) -> None:
    """``x.npy`` [nodes, features] in ``dtype``, a block of rows at a time, flushed per block so
    the dirty pages of a file larger than RAM never pile up."""
    centroids = rng.standard_normal((int(y.max()) + 1, features), dtype=np.float32) * np.float32(signal)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.dtype(dtype), shape=(y.size, features))
    step = max(1, BLOCK_BYTES // (4 * features))
    for lo in range(0, y.size, step):
        hi = min(lo + step, y.size)
        block = rng.standard_normal((hi - lo, features), dtype=np.float32)
        block += centroids[y[lo:hi]]
        out[lo:hi] = block
        out.flush()
    del out


def write_splits(folder: Path, rng: np.random.Generator, nodes: int, train: int, evaluate: int) -> None:
    """Disjoint sorted ``train_idx``/``val_idx``/``test_idx`` of the requested sizes (capped at
    60/20/20% of the nodes); a permutation of [nodes] int64 is the largest temporary."""
    train, evaluate = min(train, int(0.6 * nodes)), min(evaluate, int(0.2 * nodes))
    perm = rng.permutation(nodes)
    cuts = {
        "train_idx": perm[:train],
        "val_idx": perm[train : train + evaluate],
        "test_idx": perm[train + evaluate : train + 2 * evaluate],
    }
    for name, ids in cuts.items():
        np.save(folder / f"{name}.npy", np.sort(ids).astype(np.int64))


def make_folder(
    folder: Path,
    nodes: int,
    features: int,
    edges: int,
    classes: int,
    dtype: str = "float32",
    train_nodes: int = 20480,
    eval_nodes: int = 10240,
    homophily: float = 0.8,
    signal: float | None = None,
    seed: int = 0,
) -> dict:
    """Every file of the folder, then ``made.json`` (last: a folder without it is incomplete).
    Returns what was made. Every data file is fsynced, so its pages are clean and a benchmark
    can drop them from the page cache (``POSIX_FADV_DONTNEED`` leaves dirty pages)."""
    t0 = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, nodes).astype(np.int64)
    np.save(folder / "y.npy", y)
    write_splits(folder, rng, nodes, train_nodes, eval_nodes)
    write_edges(folder / "edge_index.npy", rng, y, edges, homophily)
    signal = 1.76 / np.sqrt(features) if signal is None else signal
    write_features(folder / "x.npy", rng, y, features, signal, dtype)
    for file in folder.glob("*.npy"):
        with open(file, "rb+") as f:
            os.fsync(f.fileno())
    made = {
        "nodes": nodes,
        "features": features,
        "edges": 2 * (edges // 2),
        "classes": classes,
        "dtype": dtype,
        "train_nodes": int(np.load(folder / "train_idx.npy", mmap_mode="r").size),
        "eval_nodes": int(np.load(folder / "test_idx.npy", mmap_mode="r").size),
        "homophily": homophily,
        "signal": float(signal),
        "seed": seed,
        "seconds": time.perf_counter() - t0,
        "bytes": sum(f.stat().st_size for f in folder.glob("*.npy")),
    }
    (folder / "made.json").write_text(json.dumps(made, indent=1) + "\n")
    return made


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder to write")
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--edges", type=int, default=2_000_000, help="directed edges (pairs x 2)")
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--dtype", choices=("float32", "float16"), default="float32", help="x.npy's dtype")
    parser.add_argument("--train-nodes", type=int, default=20480)
    parser.add_argument("--eval-nodes", type=int, default=10240, help="of val and of test each")
    parser.add_argument("--homophily", type=float, default=0.8)
    parser.add_argument("--signal", type=float, help="default 1.76 / sqrt(features)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    made = make_folder(
        args.out,
        args.nodes,
        args.features,
        args.edges,
        args.classes,
        args.dtype,
        args.train_nodes,
        args.eval_nodes,
        args.homophily,
        args.signal,
        args.seed,
    )
    print(f"wrote {args.out}: {json.dumps(made)}")


if __name__ == "__main__":
    main()
