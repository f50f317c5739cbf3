"""Tables in (issue 62): a shop warehouse as CSV, Parquet, SQLite and DuckDB becomes one folder
dataset: the schema inferred alike from each, the same arrays from every source and any row
order, each bad table refused in one line with nothing left behind."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import yaml
from helpers import gnnbridge, in_process, ok, one_line
from shop import make_shop, shuffled, write_csv, write_duckdb, write_parquet, write_sqlite

from gnnbridge.tables.build import Settings, prepare_tables
from gnnbridge.tables.schema import infer
from gnnbridge.tables.sources import open_source

WRITERS = {"csv": write_csv, "parquet": write_parquet, "shop.sqlite": write_sqlite, "shop.duckdb": write_duckdb}


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """The shop written four ways, and each prepared with the churn label."""
    root = tmp_path_factory.mktemp("shop")
    tables = make_shop()
    sources = {name: str(write(tables, root / name)) for name, write in WRITERS.items()}
    sources["shuffled"] = str(write_parquet(shuffled(tables), root / "shuffled"))
    prepared = {}
    for name, where in sources.items():
        out = root / f"graph-{name}"
        prepare_tables(Settings(where, str(out), label="customers.churned", progress=False))
        prepared[name] = out
    return {"root": root, "tables": tables, "sources": sources, "prepared": prepared}


def arrays(folder: Path) -> dict:
    return {p.name: np.load(p) for p in sorted(folder.glob("*.npy"))}


def test_schema_finds_keys_foreign_keys_and_edge_tables(shop):
    schema = infer(open_source(shop["sources"]["csv"]), "customers.churned")
    t = schema["tables"]
    assert t["customers"]["primary_key"] == "customer_id" and t["customers"]["role"] == "entity"
    assert t["orders"]["foreign_keys"] == {"customer_id": "customers"}
    assert t["order_items"]["role"] == "edge" and t["reviews"]["role"] == "edge"
    assert t["order_items"]["foreign_keys"] == {"order_id": "orders", "product_id": "products"}
    kinds = {c: s["kind"] for c, s in t["customers"]["columns"].items()}
    assert kinds == {"customer_id": "id", "age": "numeric", "segment": "categorical", "signup_date": "datetime",
                     "churned": "boolean"}  # fmt: skip
    assert any("0 dangling" in note for note in t["orders"]["notes"])
    assert schema["task"] == {
        "label": "customers.churned",
        "target": "class",
        "split_column": None,
        "time_column": None,
    }


def test_every_source_and_row_order_gives_the_same_arrays(shop):
    base = arrays(shop["prepared"]["parquet"])
    expected = {
        "x__customers.npy",
        "y__customers.npy",
        "edge_index__orders__customer_id__customers.npy",
        "edge_attr__customers__reviews__products.npy",
    }
    assert expected <= set(base) and not any("rev_" in name for name in base)  # added at load
    for name, folder in shop["prepared"].items():
        other = arrays(folder)
        assert other.keys() == base.keys(), name
        for key, a in base.items():
            assert a.dtype == other[key].dtype and np.array_equal(a, other[key], equal_nan=True), (name, key)


def test_keys_and_transforms_are_kept(shop):
    folder = shop["prepared"]["csv"]
    import pyarrow.parquet as pq

    keys = pq.read_table(folder / "keys" / "customers.parquet")
    assert keys.column("customer_id").to_pylist()[:2] == ["C0001", "C0002"]
    assert keys.column("id").to_pylist() == list(range(keys.num_rows))
    info = json.loads((folder / "tables.json").read_text())
    customers = info["node_types"]["customers"]
    assert "age.missing" in customers["features"] and "segment=<other>" in customers["features"]
    age = next(e for e in customers["encoders"] if e["column"] == "age")
    assert age["transform"] == "standardize" and age["missing"] > 0
    x = np.load(folder / "x__customers.npy")
    missing = x[:, customers["features"].index("age.missing")]
    assert set(np.unique(missing)) == {0.0, 1.0}  # flagged, and filled with the mean (0 standardised)
    assert np.all(x[missing == 1, customers["features"].index("age")] == 0)
    assert info["labels"]["classes"] == ["0", "1"]
    assert "password" not in json.dumps(info["source"])


@pytest.mark.slow
def test_time_split_and_edge_regression(shop, tmp_path):
    source = shop["sources"]["parquet"]
    ok(gnnbridge("schema", source, "--label", "customers.churned", "--out", "s.yaml", cwd=tmp_path))
    schema = yaml.safe_load((tmp_path / "s.yaml").read_text())
    schema["task"]["time_column"] = "customers.signup_date"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(schema))
    prepare_tables(Settings(source, str(tmp_path / "g"), schema=str(tmp_path / "s.yaml"), progress=False))
    features = json.loads((tmp_path / "g" / "tables.json").read_text())["node_types"]["customers"]["features"]
    signup = np.load(tmp_path / "g" / "x__customers.npy")[:, features.index("signup_date")]  # standardised time
    train, test = (np.load(tmp_path / "g" / f"{s}_idx__customers.npy") for s in ("train", "test"))
    assert signup[train].max() <= signup[test].min() and len(train) == 180
    r = prepare_tables(
        Settings(source, str(tmp_path / "e"), label="reviews.rating", target="regression", progress=False)
    )
    assert r["train"] == f"gnnbridge train --dataset {tmp_path / 'e'}"
    defaults = json.loads((tmp_path / "e" / "train-defaults.json").read_text())
    assert defaults == {"task": "edge", "target": "regression", "dataset.reverse_edges": True}
    label = np.load(tmp_path / "e" / "edge_label__customers__reviews__products.npy")
    assert label.dtype == np.float32 and len(label) == shop["tables"]["reviews"].num_rows
    assert not (tmp_path / "e" / "edge_attr__customers__reviews__products.npy").exists()  # rating was its one column


def bad(tables: dict, name: str, column: str, values) -> dict:
    t = tables[name]
    i = t.schema.get_field_index(column)
    return {**tables, name: t.set_column(i, column, pa.array(values, t.schema.field(column).type))}


def refused(tmp_path: Path, tables: dict, needle: str, *args: str) -> None:
    source = write_parquet(tables, tmp_path / "src")
    proc = gnnbridge(
        "prepare", str(source), "--label", "customers.churned", "--out", "g", "--quiet", *args, cwd=tmp_path
    )
    one_line(proc, needle)
    assert not (tmp_path / "g").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["src"]  # no temporary folder left either


def test_dangling_foreign_keys_refused_or_dropped(shop, tmp_path):
    orders = shop["tables"]["orders"].column("customer_id").to_pylist()
    tables = bad(shop["tables"], "orders", "customer_id", ["C9999", "C9998", *orders[2:]])
    refused(tmp_path, tables, "orders.customer_id: 2 values not among customers's keys (e.g. 'C9999', 'C9998')")
    proc = ok(gnnbridge("prepare", str(tmp_path / "src"), "--label", "customers.churned", "--out", "g", "--quiet",
                        "--on-dangling", "drop", cwd=tmp_path))  # fmt: skip
    assert "2 values not among customers's keys" in proc.stdout and "dropped" in proc.stdout
    assert np.load(tmp_path / "g" / "edge_index__orders__customer_id__customers.npy").shape[1] == len(orders) - 2


@pytest.mark.parametrize(
    "case, needle",
    [
        ("duplicate", "primary key customer_id repeats on 1 rows (e.g. 'C0001')"),
        ("null", "primary key customer_id is missing on 1 rows"),
        ("label", "Label customers.churned is missing on 1 rows"),
        ("empty", "Table 'products' is empty"),
        ("unknown", "--label 'customers.loyal': table 'customers' has no column 'loyal'"),
    ],
)
def test_bad_tables_are_one_line_and_leave_nothing(shop, tmp_path, case, needle):
    tables, ids = shop["tables"], shop["tables"]["customers"].column("customer_id").to_pylist()
    args = ()
    if case == "duplicate":
        tables = bad(tables, "customers", "customer_id", ["C0001", *ids[1:-1], "C0001"])
        tables = {
            **tables,
            "orders": bad(tables, "orders", "customer_id", ["C0001"] * tables["orders"].num_rows)["orders"],
        }
    elif case == "null":
        tables = bad(tables, "customers", "customer_id", [None, *ids[1:]])
    elif case == "label":
        churned = tables["customers"].column("churned").to_pylist()
        tables = bad(tables, "customers", "churned", [None, *churned[1:]])
    elif case == "empty":
        empty = {name: tables[name].slice(0, 0) for name in ("products", "order_items", "reviews")}
        tables = {**tables, **empty}
    else:
        args = ("--label", "customers.loyal")
    refused(tmp_path, tables, needle, *args)


def test_bad_schema_entries_name_the_valid_ones(shop, tmp_path):
    source = shop["sources"]["shop.duckdb"]
    schema = infer(open_source(source), "customers.churned")
    edits = {
        "kind": (
            ("customers", "age", "kind"),
            "number",
            "kind 'number' is not a kind; use one of: numeric, categorical",
        ),
        "transform": (("customers", "age", "transform"), "onehot", "transform 'onehot' does not apply to kind numeric"),
        "column": (("customers", "agee"), {"kind": "numeric"}, "column 'agee' is not in the table; its columns:"),
    }
    for name, (path, value, needle) in edits.items():
        s = json.loads(json.dumps(schema))
        entry = s["tables"][path[0]]["columns"]
        if len(path) == 3:
            entry[path[1]][path[2]] = value
        else:
            entry[path[1]] = value
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(s))
        proc = gnnbridge("prepare", source, "--schema", f"{name}.yaml", "--out", "g", cwd=tmp_path)
        one_line(proc, needle)
    s = json.loads(json.dumps(schema))
    s["tables"]["shoppers"] = s["tables"].pop("customers")
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(s))
    one_line(
        gnnbridge("prepare", source, "--schema", "t.yaml", "--out", "g", cwd=tmp_path),
        "Schema table 'shoppers' is not in",
    )
    assert not (tmp_path / "g").exists()


def own_columns_auc(folder: Path, run: Path) -> float:
    """Test ROC-AUC of a logistic regression on the customers' own columns, fitted and scored on
    the run's own splits (as ``predict`` writes them beside its outputs)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    ok(in_process("predict", str(run), "--out", str(run / "scores.npz"), cwd=run))
    scored = np.load(run / "scores.npz")
    x, y = np.load(folder / "x__customers.npy"), np.load(folder / "y__customers.npy")
    train, test = scored["train_idx"], scored["test_idx"]
    assert np.array_equal(scored["y"], y)  # the rows predict scored are the folder's customers
    return roc_auc_score(y[test], LogisticRegression().fit(x[train], y[train]).predict_proba(x[test])[:, 1])


@pytest.mark.slow
def test_pyg_train_uses_the_graph(shop, tmp_path):
    """The model beats a logistic regression on the customers' own columns, on the same split."""
    folder = shop["prepared"]["parquet"]
    ok(in_process("train", "--dataset", folder, "--backend", "pyg", "--set", "train.epochs=40", "--out", "run",
                  cwd=tmp_path))  # fmt: skip
    metrics = json.loads((tmp_path / "run" / "results.json").read_text())["metrics"]
    own = own_columns_auc(folder, tmp_path / "run")
    assert metrics["test_roc_auc"] > own + 0.05, (metrics, own)


@pytest.mark.slow
def test_dgl_train_on_two_ranks(shop, tmp_path):
    """The same folder trains on DGL with two ranks, and beats the customers' own columns too."""
    folder = shop["prepared"]["csv"]
    ok(gnnbridge("train", "--dataset", str(folder), "--backend", "dgl", "--nproc", "2", "--set", "train.epochs=40",
                 "--out", "run", cwd=tmp_path, timeout=600))  # fmt: skip
    metrics = json.loads((tmp_path / "run" / "results.json").read_text())["metrics"]
    own = own_columns_auc(folder, tmp_path / "run")
    assert metrics["test_roc_auc"] > own + 0.05, (metrics, own)


def test_an_array_folder_with_a_csv_beside_it_stays_an_array_folder(tmp_path):
    """``notes.csv`` beside ``x.npy`` is one of the other files an array folder ignores: the
    folder prepares as arrays, never read as a table source."""
    folder = tmp_path / "papers"
    folder.mkdir()
    np.save(folder / "x.npy", np.random.default_rng(0).normal(size=(30, 4)).astype(np.float32))
    np.save(folder / "edge_index.npy", np.stack([np.arange(30), (np.arange(30) + 1) % 30]).astype(np.int64))
    np.save(folder / "y.npy", np.arange(30, dtype=np.int64) % 2)
    (folder / "notes.csv").write_text("who,what\nme,a note\n")
    ok(in_process("prepare", str(folder), "--quiet", cwd=tmp_path))
    assert (folder / "prepared" / "manifest.json").is_file() and not (folder / "tables.json").exists()
