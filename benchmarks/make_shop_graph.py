"""A heterogeneous recommendation graph that gnnbridge's own generators did not make, written in
the documented ``.npz`` layout (``docs/datasets.md``), for measuring heterogeneous link prediction.

Why a separate generator: the built-in ``rec-synthetic`` graph has one relation between users and
items, and on it every sampler agrees. A shop has several relations between the same two node
types (a customer *views* many products and *buys* a few of those), a featureless node type
(brands) and a relation around the target (``product-of-brand``); that is the shape on which
core's typed sampler once trailed DGL's by 0.05-0.075 AUC (issue 29).

Shape: customers and products have hidden taste vectors; a customer views products it likes
(softmax over affinity, ``views_per_customer`` each) and buys a fraction of what it viewed, the
best-liked first, plus a few purchases it never viewed. Customers' and products' features are
noisy views of their taste; a brand groups products of similar taste and has no features.

    python benchmarks/make_shop_graph.py [--customers 6000 --products 3000 --brands 60 --out shop.npz]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def shop_graph(
    customers: int = 6000,
    products: int = 3000,
    brands: int = 60,
    dim: int = 16,
    features: int = 32,
    views_per_customer: int = 12,
    buy_fraction: float = 0.3,
    unseen_buys: int = 1,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` (every key as ``docs/datasets.md`` names it)."""
    rng = np.random.default_rng(seed)
    brand_taste = rng.normal(size=(brands, dim))
    brand_of = rng.integers(0, brands, products)
    product_taste = brand_taste[brand_of] + 0.7 * rng.normal(size=(products, dim))
    customer_taste = rng.normal(size=(customers, dim))
    affinity = customer_taste @ product_taste.T / np.sqrt(dim)
    views = _draw_views(rng, affinity, views_per_customer)
    viewed_affinity = np.take_along_axis(affinity, views, axis=1)
    bought = max(1, int(round(buy_fraction * views_per_customer)))
    best_viewed = np.take_along_axis(views, np.argsort(-viewed_affinity, axis=1)[:, :bought], axis=1)
    unseen = rng.integers(0, products, (customers, unseen_buys))
    project_c = rng.normal(size=(dim, features)) / np.sqrt(dim)
    project_p = rng.normal(size=(dim, features)) / np.sqrt(dim)
    return {
        "x__customer": (customer_taste @ project_c + 0.8 * rng.normal(size=(customers, features))).astype(np.float32),
        "x__product": (product_taste @ project_p + 0.8 * rng.normal(size=(products, features))).astype(np.float32),
        "num_nodes__brand": np.array([brands], dtype=np.int64),
        "edge_index__customer__buys__product": _pairs(np.concatenate([best_viewed, unseen], axis=1)),
        "edge_index__customer__views__product": _pairs(views),
        "edge_index__product__of__brand": np.stack([np.arange(products), brand_of]).astype(np.int64),
    }


def _draw_views(rng: np.random.Generator, affinity: np.ndarray, k: int) -> np.ndarray:
    """``k`` distinct products per customer, drawn without replacement by affinity (Gumbel top-k)."""
    gumbel = -np.log(-np.log(rng.uniform(1e-12, 1.0, affinity.shape)))
    return np.argpartition(-(2.0 * affinity + gumbel), k, axis=1)[:, :k]


def _pairs(per_customer: np.ndarray) -> np.ndarray:
    """``[customers, k]`` product ids as distinct ``[2, E]`` (customer, product) pairs."""
    src = np.repeat(np.arange(per_customer.shape[0]), per_customer.shape[1])
    keys = np.unique(src * (per_customer.max() + 1) + per_customer.ravel())
    return np.stack([keys // (per_customer.max() + 1), keys % (per_customer.max() + 1)]).astype(np.int64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--customers", type=int, default=6000)
    parser.add_argument("--products", type=int, default=3000)
    parser.add_argument("--brands", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("shop.npz"))
    args = parser.parse_args()
    arrays = shop_graph(args.customers, args.products, args.brands, seed=args.seed)
    np.savez(args.out, **arrays)
    print(f"{args.out}: " + ", ".join(f"{k} {list(v.shape)}" for k, v in arrays.items()))


if __name__ == "__main__":
    main()
