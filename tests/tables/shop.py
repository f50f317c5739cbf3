"""A small shop warehouse (customers, products, orders, order_items, reviews) whose churn label
depends on the graph: a customer who buys from the 'faulty' category churns far more often than
one who does not, while the customer's own columns (age with gaps, segment, signup date) carry
only a weak signal. Written as CSV, Parquet, SQLite and DuckDB by the writers below."""

from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

CATEGORIES = ["books", "faulty", "garden", "kitchen", "sports", "toys"]


def make_shop(n_customers: int = 300, seed: int = 0) -> dict[str, pa.Table]:
    rng = np.random.default_rng(seed)
    n_products = 60
    product_ids = 100 + 7 * np.arange(n_products)  # sparse integer keys
    category = rng.choice(CATEGORIES, n_products)
    customer_ids = [f"C{i:04d}" for i in range(1, n_customers + 1)]
    age = rng.normal(40, 12, n_customers).round(1)
    age[rng.random(n_customers) < 0.1] = np.nan
    segment = rng.choice(["retail", "business", "student"], n_customers)
    signup = [dt.date(2023, 1, 1) + dt.timedelta(days=int(d)) for d in rng.integers(0, 700, n_customers)]
    orders, items, reviews = [], [], []
    faulty = np.zeros(n_customers)
    bought = np.zeros(n_customers)
    order_id = 5000
    for c in range(n_customers):
        for _ in range(rng.integers(1, 4)):
            order_id += int(rng.integers(1, 5))
            orders.append(
                (order_id, customer_ids[c], dt.date(2024, 1, 1) + dt.timedelta(days=int(rng.integers(0, 300))))
            )
            for p in rng.choice(n_products, rng.integers(1, 4), replace=False):
                items.append((order_id, int(product_ids[p]), int(rng.integers(1, 4))))
                faulty[c] += category[p] == "faulty"
                bought[c] += 1
                if rng.random() < 0.4:
                    rating = (1 if category[p] == "faulty" else 4) + int(rng.integers(0, 2))
                    reviews.append((customer_ids[c], int(product_ids[p]), rating))
    score = (faulty > 0).astype(float) * 2.0 + 0.02 * (np.nan_to_num(age, nan=40) - 40) - 0.8
    churned = (score + rng.normal(0, 0.5, n_customers)) > 0
    o, i, r = (list(zip(*rows)) for rows in (orders, items, reviews))
    return {
        "customers": pa.table(
            {
                "customer_id": customer_ids,
                "age": pa.array(age, mask=np.isnan(age)),
                "segment": segment.tolist(),
                "signup_date": pa.array(signup, pa.date32()),
                "churned": churned.tolist(),
            }
        ),
        "products": pa.table(
            {
                "product_id": product_ids.tolist(),
                "category": category.tolist(),
                "price": rng.gamma(2, 10, n_products).round(2),
            }
        ),
        "orders": pa.table(
            {"order_id": list(o[0]), "customer_id": list(o[1]), "order_date": pa.array(o[2], pa.date32())}
        ),
        "order_items": pa.table({"order_id": list(i[0]), "product_id": list(i[1]), "quantity": list(i[2])}),
        "reviews": pa.table({"customer_id": list(r[0]), "product_id": list(r[1]), "rating": list(r[2])}),
    }


def write_parquet(tables: dict, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, t in tables.items():
        pq.write_table(t, folder / f"{name}.parquet")
    return folder


def write_csv(tables: dict, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, t in tables.items():
        pcsv.write_csv(t, folder / f"{name}.csv")
    return folder


def _sql_type(t: pa.DataType) -> str:
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return "INTEGER"
    return "REAL" if pa.types.is_floating(t) else "TEXT"


def _sql_value(v):
    return v.isoformat() if isinstance(v, dt.date) else int(v) if isinstance(v, bool) else v


def write_sqlite(tables: dict, path: Path) -> Path:
    con = sqlite3.connect(path)
    for name, t in tables.items():
        cols = ", ".join(f'"{f.name}" {_sql_type(f.type)}' for f in t.schema)
        con.execute(f'CREATE TABLE "{name}" ({cols})')
        rows = [tuple(_sql_value(v) for v in row.values()) for row in t.to_pylist()]
        con.executemany(f'INSERT INTO "{name}" VALUES ({", ".join("?" * t.num_columns)})', rows)
    con.commit()
    con.close()
    return path


def write_duckdb(tables: dict, path: Path) -> Path:
    import duckdb

    con = duckdb.connect(str(path))
    for name, t in tables.items():
        con.register("incoming", t)
        con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM incoming')
        con.unregister("incoming")
    con.close()
    return path


def shuffled(tables: dict, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    return {n: t.take(pa.array(rng.permutation(t.num_rows))) for n, t in tables.items()}
