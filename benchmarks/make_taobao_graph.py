"""A Taobao-shaped recommendation graph, written as a folder of ``.npy`` files for
``gnnbridge prepare`` (issue 29, part 6): users and items without features, items in categories,
and user-clicks-item interactions whose item popularity follows a power law, as on Taobao's
click log (a few items take most clicks).

Why a generator: the real Taobao set (PyG's ``Taobao``) has 988k users, 4.2M items and 100M
interactions but needs a download and torch_geometric's reader; this one has the same shape and
scale, is written a chunk at a time (memory: one chunk, never the 1.6 GB edge array) and needs
numpy alone. Users carry a hidden taste (one of ``--tastes``) and click mostly items of
categories that taste favours, so links are learnable.

    python benchmarks/make_taobao_graph.py OUT_DIR [--users 1000000 --items 4000000
        --interactions 100000000 --categories 10000 --seed 0]

Then ``gnnbridge prepare OUT_DIR`` and ``gnnbridge train --dataset OUT_DIR --set task=link ...``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

CHUNK = 5_000_000  # interactions drawn and written at a time


def write_graph(out: Path, users: int, items: int, interactions: int, categories: int, tastes: int, seed: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    np.save(out / "num_nodes__user.npy", np.array([users], dtype=np.int64))
    np.save(out / "num_nodes__item.npy", np.array([items], dtype=np.int64))
    np.save(out / "num_nodes__category.npy", np.array([categories], dtype=np.int64))
    category = _power_law(rng, categories, items, 1.1)  # big categories and a long tail
    np.save(out / "edge_index__item__in__category.npy", np.stack([np.arange(items), category]).astype(np.int64))
    by_category = _items_by_category(category, categories)
    favourite = rng.integers(0, categories, (tastes, 8))  # each taste's 8 favourite categories
    taste = rng.integers(0, tastes, users)
    edges = np.lib.format.open_memmap(out / "edge_index__user__clicks__item.npy", "w+", np.int64, (2, interactions))
    for start in range(0, interactions, CHUNK):
        count = min(CHUNK, interactions - start)
        src = _power_law(rng, users, count, 0.8)  # active users click more
        edges[0, start : start + count] = src
        edges[1, start : start + count] = _clicks(rng, src, taste, favourite, by_category, items)
    edges.flush()


def _power_law(rng: np.random.Generator, n: int, size: int, exponent: float) -> np.ndarray:
    """``size`` ids in ``[0, n)``, id ``i`` drawn with weight ``(i + 1) ** -exponent``, shuffled
    so popularity is not the id order."""
    weights = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    order = rng.permutation(n)
    return order[np.searchsorted(np.cumsum(weights) / weights.sum(), rng.random(size))].clip(0, n - 1)


def _items_by_category(category: np.ndarray, categories: int) -> tuple[np.ndarray, np.ndarray]:
    """(items sorted by category, offsets into them per category)."""
    order = np.argsort(category, kind="stable")
    offsets = np.zeros(categories + 1, dtype=np.int64)
    np.cumsum(np.bincount(category, minlength=categories), out=offsets[1:])
    return order, offsets


def _clicks(rng, src, taste, favourite, by_category, items: int) -> np.ndarray:
    """Each click: 80% an item of one of the user's taste's favourite categories, else any item."""
    order, offsets = by_category
    cat = favourite[taste[src], rng.integers(0, favourite.shape[1], src.size)]
    size = offsets[cat + 1] - offsets[cat]
    inside = order[
        offsets[cat] + (rng.random(src.size) * np.maximum(size, 1)).astype(np.int64).clip(max=np.maximum(size - 1, 0))
    ]
    anywhere = rng.integers(0, items, src.size)
    return np.where((rng.random(src.size) < 0.8) & (size > 0), inside, anywhere)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--items", type=int, default=4_000_000)
    parser.add_argument("--interactions", type=int, default=100_000_000)
    parser.add_argument("--categories", type=int, default=10_000)
    parser.add_argument("--tastes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write_graph(args.out, args.users, args.items, args.interactions, args.categories, args.tastes, args.seed)
    print(f"{args.out}: {args.users:,} users, {args.items:,} items, {args.interactions:,} clicks")


if __name__ == "__main__":
    main()
