"""A shop warehouse of any size as a folder of Parquet files, for ``tables_scale.py``.

Why generated and why streamed: the tables benchmark needs a warehouse larger than what a
pandas script can hold comfortably (10M customers, 100M order items), and writing it must not
need that memory itself. Every table is written chunk by chunk (one row group a chunk) through
``pyarrow.parquet.ParquetWriter``, every column built by numpy (string ids from a fixed-width
byte buffer, not Python strings), so peak memory is one chunk whatever the size.

Tables (``customers`` has string ids, the rest integer keys):

* ``customers``: customer_id ("C000000001"), age and income (float, 8% / 15% missing),
  segment (4 categories), signup_date (date), churned (bool, weakly tied to age and segment);
* ``products``: product_id, category (12 categories), list_price;
* ``orders``: order_id, customer_id, order_date (about 4 items an order);
* ``order_items``: the edge table order -> product: order_id, product_id (power-law popularity),
  quantity, price (2% missing).

``python benchmarks/make_warehouse.py OUT --customers 10000000 --order-items 100000000``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

CHUNK = 1 << 20
SEGMENTS = np.array(["business", "retail", "student", "vip"])
CATEGORIES = np.array([f"cat{i:02d}" for i in range(12)])
TABLES = ("customers", "products", "orders", "order_items")
EPOCH_2020 = 18262  # days from 1970-01-01 to 2020-01-01


def string_ids(prefix: str, numbers: np.ndarray, width: int = 9) -> pa.Array:
    """``prefix`` + zero-padded ``numbers`` as an arrow string array, built from bytes (no Python strings)."""
    n, size = len(numbers), len(prefix) + width
    digits = (numbers[:, None] // 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)) % 10
    buf = np.empty((n, size), dtype=np.uint8)
    buf[:, : len(prefix)] = np.frombuffer(prefix.encode(), dtype=np.uint8)
    buf[:, len(prefix) :] = (digits + ord("0")).astype(np.uint8)
    offsets = np.arange(0, (n + 1) * size, size, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(buf.tobytes()))


def with_gaps(values: np.ndarray, rng, share: float) -> pa.Array:
    return pa.array(values, mask=rng.random(len(values)) < share)


def customers(start: int, n: int, rng) -> pa.Table:
    age = rng.normal(40, 12, n).round(1)
    segment = rng.integers(0, len(SEGMENTS), n)
    score = 0.03 * (age - 40) + 0.5 * (segment == 2) - 0.7 + rng.normal(0, 1, n)
    return pa.table(
        {
            "customer_id": string_ids("C", np.arange(start + 1, start + n + 1)),
            "age": with_gaps(age, rng, 0.08),
            "income": with_gaps(rng.lognormal(10.5, 0.6, n).round(2), rng, 0.15),
            "segment": pa.array(SEGMENTS[segment]),
            "signup_date": pa.array((EPOCH_2020 + rng.integers(0, 1500, n)).astype(np.int32), pa.date32()),
            "churned": pa.array(score > 0),
        }
    )


def products(start: int, n: int, rng) -> pa.Table:
    return pa.table(
        {
            "product_id": np.arange(start + 1, start + n + 1, dtype=np.int64),
            "category": pa.array(CATEGORIES[rng.integers(0, len(CATEGORIES), n)]),
            "list_price": rng.gamma(2.0, 15.0, n).round(2),
        }
    )


def orders(start: int, n: int, rng, n_customers: int) -> pa.Table:
    return pa.table(
        {
            "order_id": np.arange(start + 1, start + n + 1, dtype=np.int64),
            "customer_id": string_ids("C", rng.integers(1, n_customers + 1, n)),
            "order_date": pa.array((EPOCH_2020 + 365 + rng.integers(0, 1000, n)).astype(np.int32), pa.date32()),
        }
    )


def order_items(start: int, n: int, rng, n_orders: int, n_products: int) -> pa.Table:
    # about four items an order, orders in id order as a shop's export would have them
    order = np.minimum(1 + (start + np.arange(n, dtype=np.int64)) // 4, n_orders)
    product = 1 + np.minimum((n_products * rng.random(n) ** 3).astype(np.int64), n_products - 1)
    return pa.table(
        {
            "order_id": order.astype(np.int64),
            "product_id": product,
            "quantity": rng.integers(1, 6, n).astype(np.int64),
            "price": with_gaps(rng.gamma(2.0, 15.0, n).round(2), rng, 0.02),
        }
    )


def write(folder: Path, name: str, rows: int, make, seed: int) -> float:
    t0 = time.perf_counter()
    writer = None
    for i, start in enumerate(range(0, rows, CHUNK)):
        table = make(start, min(CHUNK, rows - start), np.random.default_rng([seed, TABLES.index(name), i]))
        if writer is None:
            writer = pq.ParquetWriter(folder / f"{name}.parquet", table.schema)
        writer.write_table(table)
    writer.close()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--customers", type=int, default=100_000)
    ap.add_argument("--order-items", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.customers < 1 or a.order_items < 4:
        print("--customers must be >= 1 and --order-items >= 4", file=sys.stderr)
        return 2
    sizes = {
        "customers": a.customers,
        "products": max(100, a.customers // 50),
        "orders": -(-a.order_items // 4),
        "order_items": a.order_items,
    }
    makers = {
        "customers": customers,
        "products": products,
        "orders": lambda s, n, rng: orders(s, n, rng, sizes["customers"]),
        "order_items": lambda s, n, rng: order_items(s, n, rng, sizes["orders"], sizes["products"]),
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    seconds = {name: write(out, name, rows, makers[name], a.seed) for name, rows in sizes.items()}
    info = {"rows": sizes, "seconds": seconds, "bytes": {n: (out / f"{n}.parquet").stat().st_size for n in sizes}}
    (out.parent / f"{out.name}.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
