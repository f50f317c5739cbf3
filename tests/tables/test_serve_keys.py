"""``gnnbridge serve`` of runs on a folder prepared from tables answers by the user's keys: a
churn run takes ``{"nodes": ["C0001", ...]}`` and answers ``predict --out FILE.csv``'s rows of
those customers in the request's order; a link run (customers review products) takes its
sources as customer keys and names its top-k items by product keys, as ``predict --top-k
--out FILE.csv`` does; a key not in the map, or of the wrong type, is a 4xx naming the key, the
node type and its column; /metadata says the key columns."""

from __future__ import annotations

import numpy as np
import pyarrow.csv as pcsv
import pytest
from helpers import in_process, ok
from served import Server
from shop import make_shop, write_csv

from gnnbridge.tables.build import Settings, prepare_tables

pytestmark = pytest.mark.slow  # trains two runs and starts two servers

FEW = ("--backend", "pyg", "--set", "train.epochs=2", "--set", "model.layers=1", "--set", "sampler.fanouts=[5]")
LINK = ("--set", "task=link", "--set", "target=class", "--set", "link.edge_type=reviews")


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """One shop of CSV tables prepared for churn, a churn run and a link run on it, a server each."""
    root = tmp_path_factory.mktemp("servekeys")
    source = write_csv(make_shop(n_customers=120), root / "src")
    prepare_tables(Settings(str(source), str(root / "g"), label="customers.churned", progress=False))
    ok(in_process("train", "--dataset", "g", *FEW, "--out", "run-churn", cwd=root))
    ok(in_process("train", "--dataset", "g", *FEW, *LINK, "--out", "run-link", cwd=root))
    servers = {"churn": Server(root / "run-churn"), "link": Server(root / "run-link")}
    yield {"root": root, **servers}
    for server in servers.values():
        assert server.stop() == 0


def test_nodes_by_key_answer_predicts_csv_rows(shop):
    root, server = shop["root"], shop["churn"]
    ok(in_process("predict", "run-churn", "--out", "p.csv", cwd=root))
    table = pcsv.read_csv(root / "p.csv").to_pandas().set_index("customer_id")
    asked = ["C0100", "C0001", "C0042", "C0001", "C0120"]
    got = server.post("/predict", {"nodes": asked})
    assert got.status_code == 200, got.text
    body = got.json()
    for name in ("logits", "probs"):
        columns = [f"{name}_{j}" for j in range(2)]
        np.testing.assert_allclose(np.array(body[name]), table.loc[asked, columns].to_numpy(), atol=1e-5, rtol=0)
    assert body["pred"] == table.loc[asked, "pred"].tolist()
    meta = server.client.get("/metadata").json()
    assert meta["ids"] == "keys" and meta["keys"] == {"customers": ["customer_id"]}


def test_top_k_by_key_answers_predicts_csv_rows(shop):
    root, server = shop["root"], shop["link"]
    ok(in_process("predict", "run-link", "--top-k", "4", "--out", "t.csv", cwd=root))
    table = pcsv.read_csv(root / "t.csv").to_pandas()
    asked = ["C0007", "C0100", "C0007"]
    got = server.post("/top-k", {"sources": asked, "k": 4})
    assert got.status_code == 200, got.text
    body = got.json()
    for row, source in enumerate(asked):
        rows = table[table.customer_id == source].sort_values("rank")
        assert body["items"][row] == rows.product_id.tolist()  # the products' own keys (100, 107, ...)
        np.testing.assert_allclose(body["scores"][row], rows.score.to_numpy(), atol=1e-5, rtol=0)
    meta = server.client.get("/metadata").json()
    assert meta["keys"] == {"customers": ["customer_id"], "products": ["product_id"]}


@pytest.mark.parametrize(
    "server, path, body, status, field, words",
    [
        ("churn", "/predict", {"nodes": ["C0001", "C9999"]}, 404, "nodes[1]",
         "'C9999' is not among the keys of 'customers' (column customer_id)"),
        ("churn", "/predict", {"nodes": ["C0001", 5]}, 422, "nodes[1]",
         "column customer_id of 'customers' holds string keys, got 5"),
        ("churn", "/predict", {"nodes": [["C0001"]]}, 422, "nodes[0]", "one 'customers' key"),
        ("churn", "/predict", {"nodes": "C0001"}, 422, "nodes", "non-empty list of 'customers' keys (customer_id)"),
        ("link", "/top-k", {"sources": ["X1"], "k": 2}, 404, "sources[0]", "'X1' is not among the keys of 'customers'"),
    ],
)  # fmt: skip
def test_a_bad_key_is_refused_naming_it(shop, server, path, body, status, field, words):
    got = shop[server].post(path, body)
    assert got.status_code == status and got.json()["field"] == field, got.text
    assert words in got.json()["error"], got.json()
