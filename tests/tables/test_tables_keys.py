"""Edge and link tasks of a folder prepared from tables predict by the user's keys: an edge
task's table names both ends (``customer_id``, ``product_id``) of each scored review, and a link
task takes and returns pairs and top-k lists by those keys, equal to the same pairs and lists
given as node numbers through ``.npz``; a key not in the map is one line naming it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from helpers import in_process, ok, one_line
from shop import make_shop, write_parquet

from gnnbridge.core.app.keyed import Ends
from gnnbridge.tables.build import Settings, prepare_tables

FEW = ("--backend", "pyg", "--set", "train.epochs=2", "--set", "model.layers=1", "--set", "sampler.fanouts=[5]")
LINK = ("--set", "task=link", "--set", "target=class", "--set", "link.edge_type=reviews")
EDGE = ("customers", "reviews", "products")


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """One shop folder (reviews.rating, an edge regression) with an edge run and a link run."""
    root = tmp_path_factory.mktemp("shopkeys")
    tables = make_shop(n_customers=120)
    source = write_parquet(tables, root / "src")
    prepare_tables(Settings(str(source), str(root / "g"), label="reviews.rating", target="regression",
                            progress=False))  # fmt: skip
    ok(in_process("train", "--dataset", "g", *FEW, "--out", "run-edge", cwd=root))
    ok(in_process("train", "--dataset", "g", *FEW, *LINK, "--out", "run-link", cwd=root))
    keys = {t: pq.read_table(root / "g" / "keys" / f"{t}.parquet").sort_by("id") for t in ("customers", "products")}
    return {"root": root, "tables": tables, "keys": keys}


def _keys(shop, node_type: str, ids) -> list:
    column = "customer_id" if node_type == "customers" else "product_id"
    return shop["keys"][node_type].column(column).take(pa.array(np.asarray(ids, dtype=np.int64))).to_pylist()


def test_edge_task_table_names_both_ends(shop):
    root = shop["root"]
    ok(in_process("predict", "run-edge", "--out", "e.npz", cwd=root))
    ok(in_process("predict", "run-edge", "--out", "e.csv", cwd=root))
    ok(in_process("predict", "run-edge", "--out", "e.parquet", cwd=root))
    arrays = np.load(root / "e.npz")
    table = pcsv.read_csv(root / "e.csv")
    assert table.column_names == ["customer_id", "product_id", "logits_0"]
    assert pq.read_table(root / "e.parquet").column_names == table.column_names
    # row i: column i of the folder's edge_index, by the keys the user wrote
    src, dst = np.load(root / "g" / f"edge_index__{'__'.join(EDGE)}.npy")
    assert table.column("customer_id").to_pylist() == _keys(shop, "customers", src)
    assert table.column("product_id").to_pylist() == _keys(shop, "products", dst)
    assert np.allclose(table.column("logits_0").to_numpy(), arrays["logits"][:, 0], atol=1e-5)
    reviews = shop["tables"]["reviews"]
    given = set(zip(reviews.column("customer_id").to_pylist(), reviews.column("product_id").to_pylist()))
    assert set(zip(table.column("customer_id").to_pylist(), table.column("product_id").to_pylist())) == given


def test_link_pairs_by_keys_equal_the_npz(shop):
    root = shop["root"]
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, 120, 25), rng.integers(0, 60, 25)
    np.savez(root / "p.npz", src=src, dst=dst)
    pairs = pa.table({"customer_id": _keys(shop, "customers", src), "product_id": _keys(shop, "products", dst)})
    pcsv.write_csv(pairs, root / "p.csv")
    pq.write_table(pairs.select(["product_id", "customer_id"]), root / "p.parquet")  # any column order
    ok(in_process("predict", "run-link", "--pairs", "p.npz", "--out", "s.npz", cwd=root))
    ok(in_process("predict", "run-link", "--pairs", "p.csv", "--out", "s.csv", cwd=root))
    ok(in_process("predict", "run-link", "--pairs", "p.parquet", "--out", "s.parquet", cwd=root))
    ok(in_process("predict", "run-link", "--pairs", "p.csv", "--out", "s2.npz", cwd=root))  # keys in, numbers out
    numbers = np.load(root / "s.npz")
    for name in ("s.csv", "s.parquet"):
        table = pcsv.read_csv(root / name) if name.endswith(".csv") else pq.read_table(root / name)
        assert table.column_names == ["customer_id", "product_id", "score", "prob"]
        assert table.select(["customer_id", "product_id"]).equals(pairs)
        assert np.allclose(table.column("score").to_numpy(), numbers["scores"], atol=1e-5)
    again = np.load(root / "s2.npz")
    assert np.array_equal(again["src"], src) and np.allclose(again["scores"], numbers["scores"], atol=1e-6)


def test_link_top_k_by_keys(shop):
    root = shop["root"]
    ok(in_process("predict", "run-link", "--top-k", "4", "--out", "t.npz", cwd=root))
    ok(in_process("predict", "run-link", "--top-k", "4", "--out", "t.csv", cwd=root))
    lists = np.load(root / "t.npz")
    table = pcsv.read_csv(root / "t.csv")
    assert table.column_names == ["customer_id", "rank", "product_id", "score"]
    filled = np.arange(4)[None, :] < lists["counts"][:, None]
    assert table.num_rows == int(filled.sum())
    assert table.column("customer_id").to_pylist() == _keys(shop, "customers", np.repeat(lists["src"], lists["counts"]))
    assert table.column("product_id").to_pylist() == _keys(shop, "products", lists["top_dst"][filled])
    assert table.column("rank").to_pylist()[:4] == [1, 2, 3, 4]
    assert np.allclose(table.column("score").to_numpy(), lists["top_scores"][filled], atol=1e-5)


def test_unknown_keys_are_refused_by_their_names(shop, tmp_path):
    root = shop["root"]
    bad = pa.table({"customer_id": ["C0001", "C9999", "C9998", "C9999"], "product_id": [100, 107, 3, 114]})
    pcsv.write_csv(bad, tmp_path / "bad.csv")
    one_line(
        in_process("predict", str(root / "run-link"), "--pairs", "bad.csv", "--out", "s.csv", cwd=tmp_path),
        "--pairs bad.csv: 2 customer_id value(s) not among the keys of 'customers' (e.g. 'C9999', 'C9998'); "
        "1 product_id value(s) not among the keys of 'products' (e.g. 3); give keys the dataset has.",
    )
    pcsv.write_csv(bad.rename_columns(["customer", "product_id"]), tmp_path / "cols.csv")
    one_line(in_process("predict", str(root / "run-link"), "--pairs", "cols.csv", "--out", "s.csv", cwd=tmp_path),
             "--pairs cols.csv has no column customer_id; a pairs table of this run has the columns customer_id, "
             "product_id")  # fmt: skip
    pcsv.write_csv(pa.table({"customer_id": ["C0001"], "product_id": ["shoe"]}), tmp_path / "type.csv")
    one_line(in_process("predict", str(root / "run-link"), "--pairs", "type.csv", "--out", "s.csv", cwd=tmp_path),
             "--pairs type.csv: cannot be read as a table with the columns customer_id, product_id")  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv", "cols.csv", "type.csv"]


def test_clashing_key_columns_are_prefixed():
    """Both ends keyed by ``id``-like columns of one name (a customer refers a customer): every
    key column of each end carries ``src.`` / ``dst.``; columns that differ are kept as written."""
    people = pa.table({"user_id": ["a", "b"], "id": [0, 1]})
    same = Ends(("users", "refers", "users"), people, people)
    assert same.names == (["src.user_id"], ["dst.user_id"])
    shops = pa.table({"store": [1, 1], "sku": ["x", "y"], "id": [0, 1]})
    stores = pa.table({"store": [1, 2], "id": [0, 1]})
    assert Ends(("items", "sold_at", "stores"), shops, stores).names == (["src.store", "src.sku"], ["dst.store"])
    assert Ends(("users", "likes", "items"), people, shops).names == (["user_id"], ["store", "sku"])


def _states(table: pa.Table) -> np.ndarray:
    names = [c for c in table.column_names if c.startswith("embedding_")]
    assert names == [f"embedding_{j}" for j in range(len(names))]
    return np.stack([table.column(c).to_numpy() for c in names], 1)


def test_link_embeddings_by_keys(shop):
    """``--embeddings`` beside a table: every node type's final states in a table of its own,
    named as the .npz names its array, a row per node by the key the user wrote; the states are
    the .npz's rows of those nodes."""
    root = shop["root"]
    ok(in_process("predict", "run-link", "--top-k", "4", "--embeddings", "--out", "te.npz", cwd=root))
    ok(in_process("predict", "run-link", "--top-k", "4", "--embeddings", "--out", "te.csv", cwd=root))
    arrays = np.load(root / "te.npz")
    assert pcsv.read_csv(root / "te.csv").column_names == ["customer_id", "rank", "product_id", "score"]  # as without
    for node_type, column in (("customers", "customer_id"), ("products", "product_id"), ("orders", "order_id")):
        table = pcsv.read_csv(root / f"te.embedding__{node_type}.csv")
        assert table.column_names[0] == column
        keys = pq.read_table(root / "g" / "keys" / f"{node_type}.parquet")
        ids = dict(zip(keys.column(column).to_pylist(), keys.column("id").to_pylist()))  # the user's key -> node
        rows = [ids[key] for key in table.column(column).to_pylist()]
        assert sorted(rows) == list(range(len(ids)))  # every node once
        np.testing.assert_allclose(_states(table), arrays[f"embedding__{node_type}"][rows], atol=1e-5)


def test_embeddings_tables_are_checked_new_before_any_work(shop, tmp_path):
    (tmp_path / "x.embedding__orders.csv").write_text("mine\n")
    run = str(shop["root"] / "run-link")
    done = in_process("predict", run, "--top-k", "4", "--embeddings", "--out", "x.csv", cwd=tmp_path)
    errors = [line for line in done.stderr.splitlines() if not line.startswith("Warning: ")]  # (the graph's own)
    assert done.returncode != 0 and len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "'x.embedding__orders.csv' already exists; choose a new --out" in errors[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.embedding__orders.csv"]
