"""A folder prepared from tables, cut with ``gnnbridge partition`` and trained by two machines
holding one part each (torchrun "machines", as tests/distributed/test_partitions.py runs them),
predicts by the user's keys: each machine writes its own rows as a table (``OUT.part-M.csv``)
with their keys, looked up in its copy of the folder's key maps by the dataset ids it scores.
The rows are checked by key against the same checkpoint's predictions of the folder whole."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from helpers import job
from shop import make_shop, write_parquet

import gnnbridge
from gnnbridge.core.app.partitioning import cut_link
from gnnbridge.core.storage.partition import partition
from gnnbridge.tables.build import Settings, prepare_tables

pytestmark = pytest.mark.slow

FEW = ["--backend", "pyg", "--set", "train.epochs=2", "--set", "model.layers=1", "--set", "sampler.fanouts=[5]"]
LINK = ["--set", "task=link", "--set", "target=class", "--set", "link.edge_type=reviews"]
# a machine's folder holds no train-defaults.json: the folder's own defaults, given
MACHINE = ["--set", "dataset.partitions=2", "--set", "dataset.reverse_edges=true", "--timeout", "120"]


def _machines(root, where) -> None:
    """Machine M's ``data``: partition.json, part-M (and the link task's part-M), and the folder's
    key maps, as a user copies them."""
    cut = root / "partitions" / "2"
    for m in range(2):
        folder = where / f"machine{m}" / "data" / "partitions" / "2"
        folder.mkdir(parents=True)
        shutil.copy(cut / "partition.json", folder)
        shutil.copytree(cut / f"part-{m}", folder / f"part-{m}")
        for link in cut.glob("link-*"):
            (folder / link.name).mkdir()
            shutil.copy(link / "link.json", folder / link.name)
            shutil.copytree(link / f"part-{m}", folder / link.name / f"part-{m}")
        shutil.copytree(root / "keys", where / f"machine{m}" / "data" / "keys")


def _ran(codes, outs) -> None:
    assert codes == [0, 0], outs


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """The shop prepared for churn, cut in two with a link task on reviews; a node run and a link
    run, each trained by the two machines (the run folders on storage both see)."""
    root = tmp_path_factory.mktemp("shopmachines")
    tables = make_shop(n_customers=120)
    prepare_tables(Settings(str(write_parquet(tables, root / "src")), str(root / "g"), label="customers.churned",
                            progress=False))  # fmt: skip
    partition(root / "g", 2, method="stream", progress=False)
    cut_link(root / "g", 2, overrides=[LINK[i] for i in (1, 3, 5)])
    _machines(root / "g", root)
    for run, task in (("run-node", []), ("run-link", LINK)):
        _ran(*job(2, root, ["train", "--dataset", "data", *FEW, *task, *MACHINE, "--out", run]))
        (root / "machine1" / run).symlink_to(root / "machine0" / run)
    return root


def _whole(root, run: str, **options) -> dict:
    """The same checkpoint's predictions of the folder whole, by node id."""
    overrides = [f"dataset.path={root / 'g'}", "dataset.partitions=0"]
    return gnnbridge.predict(root / "machine0" / run, overrides=overrides, **options)


def _ids(root, node_type: str, column: str) -> dict:
    """The user's key -> the node's id, from the folder's key map."""
    keys = pq.read_table(root / "g" / "keys" / f"{node_type}.parquet")
    return dict(zip(keys.column(column).to_pylist(), keys.column("id").to_pylist()))


def _part(root, name: str, m: int) -> pa.Table:
    """Machine ``m``'s table ``name`` (``part-{m}`` in it) from its working folder."""
    return pcsv.read_csv(root / f"machine{m}" / name.format(m=m))


def _states(table: pa.Table) -> np.ndarray:
    return np.stack([table.column(c).to_numpy() for c in table.column_names if c.startswith("embedding_")], 1)


def test_each_machine_writes_its_nodes_by_their_keys(shop):
    """A node run: each machine's table names its customers by ``customer_id``, with their
    outputs; together every customer once. With ``--embeddings``, each machine's states of every
    type by that type's keys."""
    codes, outs = job(2, shop, ["predict", "run-node", "--out", "p.csv", "--embeddings", "--set", "dataset.path=data"])
    _ran(codes, outs)
    assert outs[0][0].startswith("p.part-0.csv, p.part-0.embedding__customers.csv, ")
    assert "(each machine's own nodes; by their keys)" in outs[0][0] and outs[1][0] == ""
    whole, ids = _whole(shop, "run-node", embeddings=True), _ids(shop, "customers", "customer_id")
    seen = []
    for m in range(2):
        table = _part(shop, "p.part-{m}.csv", m)
        assert table.column_names == ["customer_id", "logits_0", "logits_1", "probs_0", "probs_1", "pred"]
        rows = [ids[key] for key in table.column("customer_id").to_pylist()]
        np.testing.assert_allclose(table.column("logits_1").to_numpy(), whole["logits"][rows, 1], atol=1e-5)
        assert table.column("pred").to_pylist() == whole["pred"][rows].tolist()
        seen += rows
        for node_type, column in (("customers", "customer_id"), ("orders", "order_id"), ("products", "product_id")):
            states = _part(shop, f"p.part-{{m}}.embedding__{node_type}.csv", m)
            named = [_ids(shop, node_type, column)[key] for key in states.column(column).to_pylist()]
            np.testing.assert_allclose(_states(states), whole[f"embedding__{node_type}"][named], atol=1e-4)
    assert sorted(seen) == list(range(len(ids)))


def test_each_machine_writes_its_sources_lists_and_its_share_of_the_pairs_by_keys(shop):
    """A link run: each machine's top-k lists of its own customers by ``customer_id`` and
    ``product_id``; ``--pairs pairs.csv`` by keys (two ranks a machine), each machine the pairs
    whose destination it owns with ``index``, their rows in the file."""
    _ran(*job(2, shop, ["predict", "run-link", "--out", "t.csv", "--top-k", "4", "--set", "dataset.path=data"]))
    whole = _whole(shop, "run-link", top_k=4)
    customers, products = _ids(shop, "customers", "customer_id"), _ids(shop, "products", "product_id")
    sources = []
    for m in range(2):
        table = _part(shop, "t.part-{m}.csv", m)
        assert table.column_names == ["customer_id", "rank", "product_id", "score"]
        src = np.array([customers[key] for key in table.column("customer_id").to_pylist()])
        dst = np.array([products[key] for key in table.column("product_id").to_pylist()])
        rank = table.column("rank").to_numpy() - 1
        assert (dst == whole["top_dst"][src, rank]).all()
        np.testing.assert_allclose(table.column("score").to_numpy(), whole["top_scores"][src, rank], atol=1e-5)
        sources += sorted(set(src.tolist()))
    assert sorted(sources) == [s for s in range(len(customers)) if whole["counts"][s]]  # each source on one machine

    rng = np.random.default_rng(5)
    src, dst = rng.integers(0, len(customers), 30), rng.integers(0, len(products), 30)
    by_id = {v: k for k, v in customers.items()}, {v: k for k, v in products.items()}
    pairs = pa.table({"customer_id": [by_id[0][i] for i in src], "product_id": [by_id[1][i] for i in dst]})
    for m in range(2):
        pcsv.write_csv(pairs, shop / f"machine{m}" / "pairs.csv")
    command = ["predict", "run-link", "--out", "s.csv", "--pairs", "pairs.csv", "--set", "dataset.path=data"]
    _ran(*job(2, shop, command, launcher=("--nproc-per-node", "2")))  # (a machine's first rank writes)
    np.savez(shop / "pairs.npz", src=src, dst=dst)
    expected, places = _whole(shop, "run-link", pairs=shop / "pairs.npz"), []
    for m in range(2):
        table = _part(shop, "s.part-{m}.csv", m)
        assert table.column_names == ["index", "customer_id", "product_id", "score", "prob"]
        index = table.column("index").to_numpy()
        assert table.select(["customer_id", "product_id"]).equals(pairs.take(index))
        np.testing.assert_allclose(table.column("score").to_numpy(), expected["scores"][index], atol=1e-4)
        places += index.tolist()
    assert sorted(places) == list(range(30))  # every pair once, on its destination's machine


def test_a_machine_without_the_key_maps_is_refused_on_every_machine(shop):
    """Machine 1's copy lacks ``keys/``: both machines end with the one line naming machine 1 and
    the fix, before any scoring, and nothing is written."""
    held = shop / "machine1" / "data" / "keys"
    held.rename(shop / "keys-aside")
    try:
        codes, outs = job(2, shop, ["predict", "run-node", "--out", "q.csv", "--set", "dataset.path=data"])
    finally:
        (shop / "keys-aside").rename(held)
    for code, (_, err) in zip(codes, outs):  # (torchrun's own report of the failed agent follows)
        first = [line for line in err.splitlines() if line.startswith("Error: ")][0]
        assert code != 0 and "machine 1: --out q.part-1.csv writes a table by the user's keys" in first, err
        assert f"which this machine's {shop / 'machine1' / 'data'} lacks: copy the folder's keys/ to every " in first
    assert not list(shop.glob("machine*/q.*"))
