"""Tables to a graph at scale: ``gnnbridge prepare`` on a generated warehouse against the
source's own scan rate and against a hand-written pandas script (issue 62, part 7).

Why these three: the source's scan (pyarrow.dataset and DuckDB decoding every column of every
table) is the limit no converter can beat; the pandas script (read each table whole, factorize
keys, merge foreign keys, standardise, one-hot, ``np.save``) is what a user writes instead. Each
runs in a fresh process whose peak anonymous memory (RssAnon, heap and arrays: what must fit in
RAM) and mapped-file memory (RssFile, pages the kernel can drop) are sampled every 0.2 s over its
process tree by ``peakmem.run_status``; rows/s is all four tables' rows over the process's wall
time (interpreter start and imports included, about a second).

``python benchmarks/tables_scale.py WAREHOUSE [--methods a,b] [--out benchmarks/out/tables]``
(``WAREHOUSE`` from ``make_warehouse.py``); methods: scan-pyarrow, scan-duckdb, gnnbridge
(``prepare --label customers.churned``: schema inferred), gnnbridge-schema (``prepare --schema
--label``: the schema file written once by ``gnnbridge schema`` on a tiny warehouse of the same
shape), gnnbridge-edge-label (``prepare --label order_items.quantity``: schema inferred, the edge
table labelled, so its labels are sorted with its rows), pandas.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

TABLES = ("customers", "products", "orders", "order_items")
METHODS = ("scan-pyarrow", "scan-duckdb", "gnnbridge-schema", "gnnbridge", "gnnbridge-edge-label", "pandas")
LABELS = {"gnnbridge-edge-label": "order_items.quantity"}  # the others: customers.churned


# --------------------------------------------------------------------------- children


def scan_pyarrow(folder: Path) -> dict:
    import pyarrow.dataset as ds

    rows = 0
    for t in TABLES:
        for batch in ds.dataset(str(folder / f"{t}.parquet"), format="parquet").to_batches(batch_size=65536):
            rows += batch.num_rows
    return {"rows": rows}


def scan_duckdb(folder: Path) -> dict:
    import duckdb

    con = duckdb.connect()
    rows = 0
    for t in TABLES:
        reader = con.sql(f"SELECT * FROM read_parquet('{folder / t}.parquet')").to_arrow_reader(65536)
        for batch in reader:
            rows += batch.num_rows
    return {"rows": rows}


def _numeric(df, column: str) -> list:
    v = df[column].astype("float64").to_numpy()
    missing = np.isnan(v)
    mean = np.nanmean(v)
    v = np.where(missing, mean, v)
    out = [(v - mean) / (v.std() or 1.0)]
    return out + ([missing.astype(np.float64)] if missing.any() else [])


def _x(df, numbers: list, categories: list, dates: list):
    import pandas as pd

    cols = [c for n in numbers for c in _numeric(df, n)]
    for d in dates:
        days = df[d].astype("datetime64[s]").astype("int64").to_numpy() / 86400.0
        cols.append((days - days.mean()) / (days.std() or 1.0))
    parts = [np.stack(cols, axis=1).astype(np.float32)] if cols else []
    parts += [pd.get_dummies(df[c], dtype=np.float32).to_numpy() for c in categories]
    return np.concatenate(parts, axis=1)


def pandas_script(folder: Path, out: Path) -> dict:
    """The usual hand-written conversion: every table read whole, keys factorized, foreign keys merged."""
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    c = pd.read_parquet(folder / "customers.parquet")
    p = pd.read_parquet(folder / "products.parquet")
    o = pd.read_parquet(folder / "orders.parquet")
    oi = pd.read_parquet(folder / "order_items.parquet")
    c["cid"] = pd.factorize(c["customer_id"])[0]
    p["pid"] = pd.factorize(p["product_id"])[0]
    o["oid"] = pd.factorize(o["order_id"])[0]
    np.save(out / "x_customers.npy", _x(c, ["age", "income"], ["segment"], ["signup_date"]))
    np.save(out / "y_customers.npy", c["churned"].to_numpy().astype(np.int64))
    np.save(out / "x_products.npy", _x(p, ["list_price"], ["category"], []))
    np.save(out / "x_orders.npy", _x(o, [], [], ["order_date"]))
    placed = o[["oid", "customer_id"]].merge(c[["customer_id", "cid"]], on="customer_id")
    np.save(out / "edge_index_orders_customers.npy", placed[["oid", "cid"]].to_numpy(np.int64).T.copy())
    del placed
    edges = oi.merge(o[["order_id", "oid"]], on="order_id").merge(p[["product_id", "pid"]], on="product_id")
    del oi
    np.save(out / "edge_index_order_items.npy", edges[["oid", "pid"]].to_numpy(np.int64).T.copy())
    np.save(out / "edge_attr_order_items.npy", _x(edges, ["quantity", "price"], [], []))
    return {"rows": len(c) + len(p) + len(o) + len(edges), "order_items_edges": len(edges)}


CHILDREN = {"scan-pyarrow": scan_pyarrow, "scan-duckdb": scan_duckdb, "pandas": pandas_script}


def child(method: str, folder: str, out: str | None) -> None:
    t0 = time.perf_counter()
    fn = CHILDREN[method]
    got = fn(Path(folder), Path(out)) if method == "pandas" else fn(Path(folder))
    print(json.dumps({**got, "inner_s": time.perf_counter() - t0}), flush=True)


# --------------------------------------------------------------------------- runner


def command(method: str, warehouse: Path, work: Path, schema: Path) -> list[str]:
    py = sys.executable
    if method in CHILDREN:
        return [py, __file__, "--child", method, str(warehouse), "--child-out", str(work / method)]
    cmd = [py, "-m", "gnnbridge", "prepare", str(warehouse), "--label", LABELS.get(method, "customers.churned")]
    cmd += ["--out", str(work / method), "--quiet"]
    return cmd + (["--schema", str(schema)] if method == "gnnbridge-schema" else [])


def write_schema(work: Path) -> Path:
    """The schema ``gnnbridge schema`` infers on a tiny warehouse of the same shape (it is the same at every size)."""
    tiny = work / "tiny-warehouse"
    subprocess.run([sys.executable, str(HERE / "make_warehouse.py"), str(tiny), "--customers", "2000",
                    "--order-items", "20000"], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    schema = work / "warehouse.yaml"
    subprocess.run([sys.executable, "-m", "gnnbridge", "schema", str(tiny), "--label", "customers.churned",
                    "--out", str(schema)], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    return schema


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def measure(method: str, warehouse: Path, work: Path, schema: Path, rows: int) -> dict:
    from peakmem import run_status

    target = work / method
    shutil.rmtree(target, ignore_errors=True)
    log = work / f"{method}.stdout"
    with open(log, "w") as f:
        got = run_status(command(method, warehouse, work, schema), stdout=f, env={**os.environ})
    text = log.read_text().strip().splitlines()
    inner = json.loads(text[-1]) if method in CHILDREN and got["returncode"] == 0 else {}
    result = {
        "method": method,
        **got,
        "rows": rows,
        "rows_per_s": rows / got["wall_s"],
        "output_bytes": folder_bytes(target),
        **{f"child_{k}": v for k, v in inner.items()},
    }
    if method.startswith("gnnbridge") and got["returncode"] == 0:
        info = json.loads((target / "tables.json").read_text())
        result["edges"] = {k: v["rows"] for k, v in info["edge_types"].items()}
    shutil.rmtree(target, ignore_errors=True)
    return result


def plot(results: list, title: str, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in results if r["returncode"] == 0]
    names = [r["method"] for r in ok]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = ["#999999" if n.startswith("scan") else "#1f77b4" if n.startswith("gnnbridge") else "#d62728"
              for n in names]  # fmt: skip
    for ax, key, scale, label in (
        (axes[0], "rows_per_s", 1e6, "million rows/s (all four tables, wall time)"),
        (axes[1], "peak_rssanon_bytes", 2**30, "peak anonymous memory (GiB)"),
    ):
        values = [r[key] / scale for r in ok]
        bars = ax.barh(names, values, color=colors)
        ax.bar_label(bars, [f"{v:.2f}" for v in values], padding=3)
        ax.set_xlabel(label)
        ax.invert_yaxis()
        ax.margins(x=0.2)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("warehouse")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--out", default=str(HERE / "out" / "tables"))
    ap.add_argument("--work", help="where outputs are written while measured (default: beside the warehouse)")
    ap.add_argument("--child", choices=sorted(CHILDREN))
    ap.add_argument("--child-out")
    a = ap.parse_args(argv)
    if a.child:
        child(a.child, a.warehouse, a.child_out)
        return 0
    methods = a.methods.split(",")
    bad = [m for m in methods if m not in METHODS]
    if bad:
        print(f"--methods {','.join(bad)}: use some of {','.join(METHODS)}", file=sys.stderr)
        return 2
    warehouse = Path(a.warehouse)
    info = json.loads((warehouse.parent / f"{warehouse.name}.json").read_text())
    rows = sum(info["rows"].values())
    work = Path(a.work or warehouse.parent / f"{warehouse.name}-work")
    work.mkdir(parents=True, exist_ok=True)
    schema = write_schema(work)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"c{info['rows']['customers']}-oi{info['rows']['order_items']}"
    results = []
    for method in methods:
        r = measure(method, warehouse, work, schema, rows)
        results.append(r)
        print(f"{method:18s} rc={r['returncode']} {r['wall_s']:8.1f} s {r['rows_per_s'] / 1e6:7.2f} M rows/s "
              f"peak anon {r['peak_rssanon_bytes'] / 2**30:6.2f} GiB file {r['peak_rssfile_bytes'] / 2**30:6.2f} GiB",
              file=sys.stderr, flush=True)  # fmt: skip
        doc = {"warehouse": str(warehouse), "tables": info, "cpus": os.cpu_count(), "results": results}
        (out / f"tables-{tag}.json").write_text(json.dumps(doc, indent=1) + "\n")
    title = f"{info['rows']['customers']:,} customers, {info['rows']['order_items']:,} order items ({rows:,} rows)"
    plot(results, title, out / f"tables-{tag}.png")
    return 0 if all(r["returncode"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
