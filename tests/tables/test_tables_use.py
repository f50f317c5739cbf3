"""A folder prepared from tables is trained with nothing more (its train-defaults.json), and a
model trained on it predicts for new customers, given as tables in the same layout, by their
own ids: ``prepare NEW --like DIR`` reads them with DIR's saved state, ``predict --out FILE.csv``
answers by ``customer_id``."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
import yaml
from helpers import gnnbridge, in_process, ok, one_line
from shop import make_shop, write_parquet

from gnnbridge.core.app.resolve import resolve_config
from gnnbridge.core.errors import DataError
from gnnbridge.tables.build import Settings, prepare_tables

FEW = ("--backend", "pyg", "--set", "train.epochs=3", "--set", "model.layers=1", "--set", "sampler.fanouts=[10]")


def new_customers(tables: dict, count: int = 5) -> dict:
    """The shop plus ``count`` new customers (new ids, an unseen segment, a missing age, no
    label column) with one new order each, of an existing product."""
    ids = [f"N{i:03d}" for i in range(count)]
    customers = tables["customers"].drop_columns(["churned"])
    extra = pa.table(
        {
            "customer_id": ids,
            "age": pa.array([30.0, None, 55.0, 41.0, 22.0][:count], pa.float64()),
            "segment": ["retail", "nonprofit", "student", "retail", "business"][:count],
            "signup_date": pa.array([tables["customers"].column("signup_date")[0].as_py()] * count, pa.date32()),
        }
    ).cast(customers.schema)
    orders = tables["orders"]
    first = orders.column("order_id").to_numpy().max() + 1
    date = orders.column("order_date")[0].as_py()
    new_orders = pa.table(
        {"order_id": np.arange(first, first + count), "customer_id": ids, "order_date": [date] * count}
    ).cast(orders.schema)
    items = tables["order_items"]
    product = items.column("product_id")[0].as_py()
    new_items = pa.table(
        {"order_id": np.arange(first, first + count), "product_id": [product] * count, "quantity": [1] * count}
    ).cast(items.schema)
    return {
        **tables,
        "customers": pa.concat_tables([customers, extra]),
        "orders": pa.concat_tables([orders, new_orders]),
        "order_items": pa.concat_tables([items, new_items]),
    }


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """The shop prepared for churn and for review ratings, a few epochs of each trained."""
    root = tmp_path_factory.mktemp("shopuse")
    tables = make_shop()
    source = write_parquet(tables, root / "src")
    prepare_tables(Settings(str(source), str(root / "churn"), label="customers.churned", progress=False))
    prepare_tables(Settings(str(source), str(root / "rating"), label="reviews.rating", target="regression",
                            progress=False))  # fmt: skip
    for name in ("churn", "rating"):
        ok(in_process("train", "--dataset", str(root / name), *FEW, "--out", f"run-{name}", cwd=root))
    return {"root": root, "tables": tables, "source": source}


def test_train_needs_nothing_more(shop):
    """The folder's own defaults: a node task and an edge regression, each with reverse edges."""
    root = shop["root"]
    for name, task, target in (("churn", "node", "class"), ("rating", "edge", "regression")):
        config = yaml.safe_load((root / f"run-{name}" / "config.yaml").read_text())
        assert (config["task"], config["target"], config["dataset"]["reverse_edges"]) == (task, target, True)
        assert json.loads((root / f"run-{name}" / "results.json").read_text())["metrics"]
    # --set wins over the folder's defaults; the experiment's own value loses to them
    config = resolve_config(overrides=["dataset.reverse_edges=false"], dataset=str(root / "rating"))
    assert (config.task.value if hasattr(config.task, "value") else config.task) == "edge"
    assert config.dataset.reverse_edges is False


def test_bad_train_defaults_are_refused(shop, tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "train-defaults.json").write_text(json.dumps({"model.arch": "gcn"}))
    with pytest.raises(DataError, match="key 'model.arch' is not a training default; the keys are task"):
        resolve_config(dataset=str(folder))


def test_predict_new_customers_by_their_ids(shop):
    root = shop["root"]
    new = write_parquet(new_customers(shop["tables"]), root / "new-src")
    ok(gnnbridge("prepare", str(new), "--like", "churn", "--out", "new", "--quiet", cwd=root))
    info = json.loads((root / "new" / "tables.json").read_text())
    saved = json.loads((root / "churn" / "tables.json").read_text())
    assert info["node_types"]["customers"]["features"] == saved["node_types"]["customers"]["features"]
    x = np.load(root / "new" / "x__customers.npy")
    features = saved["node_types"]["customers"]["features"]
    keys = pq.read_table(root / "new" / "keys" / "customers.parquet").column("customer_id").to_pylist()
    row = x[keys.index("N001")]
    assert row[features.index("segment=<other>")] == 1 and row[features.index("age.missing")] == 1
    ok(in_process("predict", "run-churn", "--dataset", "new", "--out", "new.csv", cwd=root))
    ok(in_process("predict", "run-churn", "--dataset", "churn", "--out", "old.parquet", cwd=root))
    fresh = pcsv.read_csv(root / "new.csv").to_pandas().set_index("customer_id")
    old = pq.read_table(root / "old.parquet").to_pandas().set_index("customer_id")
    assert {"N000", "N004", "C0001"} <= set(fresh.index) and len(old) == shop["tables"]["customers"].num_rows
    assert {"pred", "probs_0", "probs_1"} <= set(fresh.columns)
    # a customer far from the new ones (one layer: its own columns, orders and reviews) scores the same
    assert np.allclose(fresh.loc["C0100", ["probs_0", "probs_1"]], old.loc["C0100", ["probs_0", "probs_1"]], atol=1e-5)
    # the new customers' churn is unknown: their placeholder labels are never learnt from or scored
    needle = "rows have no customers.churned (placeholders written for predict)"
    one_line(in_process("evaluate", "run-churn", "--set", f"dataset.path={root / 'new'}", cwd=root), needle)
    one_line(in_process("train", "--dataset", "new", *FEW, "--out", "refused", cwd=root), needle)
    assert not (root / "refused").exists()


def test_node_embeddings_by_keys(shop):
    """A node run's ``--embeddings --out FILE.parquet``: the predictions table as without it, and
    every node type's final states by its keys (``FILE.embedding__TYPE.parquet``), each row the
    .npz's states of the node that key names."""
    root = shop["root"]
    ok(in_process("predict", "run-churn", "--embeddings", "--out", "ce.npz", cwd=root))
    ok(in_process("predict", "run-churn", "--embeddings", "--out", "ce.parquet", cwd=root))
    arrays = np.load(root / "ce.npz")
    table = pq.read_table(root / "ce.parquet")
    assert table.column_names == ["customer_id", "logits_0", "logits_1", "probs_0", "probs_1", "pred"]
    for node_type, column in (("customers", "customer_id"), ("orders", "order_id"), ("products", "product_id")):
        states = pq.read_table(root / f"ce.embedding__{node_type}.parquet")
        width = arrays[f"embedding__{node_type}"].shape[1]
        assert states.column_names == [column, *(f"embedding_{j}" for j in range(width))]
        keys = pq.read_table(root / "churn" / "keys" / f"{node_type}.parquet")
        ids = dict(zip(keys.column(column).to_pylist(), keys.column("id").to_pylist()))  # the user's key -> node
        rows = [ids[key] for key in states.column(column).to_pylist()]
        assert sorted(rows) == list(range(len(ids)))  # every node once
        got = np.stack([states.column(f"embedding_{j}").to_numpy() for j in range(width)], 1)
        np.testing.assert_array_equal(got, arrays[f"embedding__{node_type}"][rows])


def test_like_refuses_other_columns(shop, tmp_path):
    tables = shop["tables"]
    ages = pa.array([str(v) for v in tables["customers"].column("age").to_pylist()])
    changed = {**tables, "customers": tables["customers"].set_column(1, "age", ages)}
    source = write_parquet(changed, tmp_path / "src")
    one_line(gnnbridge("prepare", str(source), "--like", str(shop["root"] / "churn"), "--out", "g", cwd=tmp_path),
             "table 'customers' column 'age' is string, but")  # fmt: skip
    gone = {**tables, "products": tables["products"].drop_columns(["category"])}
    source = write_parquet(gone, tmp_path / "src2")
    one_line(gnnbridge("prepare", str(source), "--like", str(shop["root"] / "churn"), "--out", "g", cwd=tmp_path),
             "table 'products' has no column 'category'")  # fmt: skip
    assert not (tmp_path / "g").exists()


def test_files_recorded_and_types_across_files(shop, tmp_path):
    info = json.loads((shop["root"] / "churn" / "tables.json").read_text())
    assert any(p.endswith("customers.parquet") and s["size"] > 0 for p, s in info["files"].items())
    orders = shop["tables"]["orders"]
    (tmp_path / "src" / "orders").mkdir(parents=True)
    for name in ("customers", "products", "order_items", "reviews"):
        pq.write_table(shop["tables"][name], tmp_path / "src" / f"{name}.parquet")
    pq.write_table(orders.slice(0, 10), tmp_path / "src" / "orders" / "part-0.parquet")
    rest = orders.slice(10).set_column(
        0, "order_id", pa.array([str(v) for v in orders.column("order_id")[10:].to_pylist()])
    )
    pq.write_table(rest, tmp_path / "src" / "orders" / "part-1.parquet")
    one_line(gnnbridge("prepare", "src", "--label", "customers.churned", "--out", "g", cwd=tmp_path),
             "Table 'orders': column 'order_id' is int64 in part-0.parquet but string in part-1.parquet")  # fmt: skip


def test_a_prepare_again_names_the_files_that_changed(shop, tmp_path):
    source = write_parquet(shop["tables"], tmp_path / "src")
    prepare_tables(Settings(str(source), str(tmp_path / "g"), label="customers.churned", progress=False))
    products = shop["tables"]["products"]
    pq.write_table(products.take(np.arange(products.num_rows)[::-1]), source / "products.parquet")
    r = prepare_tables(Settings(str(source), str(tmp_path / "g"), label="customers.churned", progress=False))
    assert any(n.startswith(f"changed since {tmp_path / 'g'} was prepared: products.parquet (") for n in r["notes"])
