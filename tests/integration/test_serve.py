"""``gnnbridge serve``: the real server (uvicorn, a subprocess) on a free loopback port, on runs
trained on each backend; every answer is checked against ``predict``'s file for the same
checkpoint (or, for a graph the client sends, against the model run on that graph directly);
bad requests are refused in JSON and the server answers the next one; several client threads
get the same numbers; SIGTERM ends it with 0 once the request in flight has its answer."""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from served import Server

import gnnbridge

pytestmark = pytest.mark.slow  # trains runs and starts servers

NODE = ["dataset.options.num_nodes=300", "train.batch_size=64", "train.epochs=2"]
REC = ["dataset.options.num_users=150", "dataset.options.num_items=100", "train.epochs=2", "link.eval_negatives=20"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    out = {}
    for backend in ("pyg", "dgl"):
        out[backend] = root / f"sage-{backend}"
        gnnbridge.run("sage-synthetic", backend=backend, nproc=1, overrides=NODE, out=out[backend], progress=False)
    out["rec"] = root / "rec"
    gnnbridge.run("rec-synthetic", backend="pyg", nproc=1, overrides=REC, out=out["rec"], progress=False)
    return out


@pytest.fixture(scope="module", params=["pyg", "dgl"])
def node_server(request, runs):
    server = Server(runs[request.param], "--max-wait-ms", "20")
    yield server, runs[request.param]
    server.stop()


@pytest.fixture(scope="module")
def rec_server(runs):
    server = Server(runs["rec"])
    yield server, runs["rec"]
    server.stop()


def test_health_and_metadata_name_the_checkpoint(node_server):
    server, run = node_server
    meta = server.client.get("/metadata").json()
    state = torch.load(run / "checkpoints" / "best.pt", weights_only=False)
    assert meta["task"] == "node" and meta["target"] == "class" and meta["backend"] == run.name.split("-")[1]
    assert meta["feature_width"] == 32 and meta["classes"] == 8 and meta["num_nodes"] == 300
    assert meta["checkpoint"]["epoch"] == state["epoch"]
    assert server.client.get("/health").json()["checkpoint"] == meta["checkpoint"]["sha256"]


def test_node_ids_answer_predicts_rows_in_the_requests_order(node_server):
    server, run = node_server
    expected = gnnbridge.predict(run)
    ids = [5, 299, 0, 5, 17]
    got = server.post("/predict", {"nodes": ids})
    assert got.status_code == 200, got.text
    body = got.json()
    for key in ("logits", "probs"):
        np.testing.assert_allclose(np.array(body[key]), expected[key][ids], atol=1e-5, rtol=0, err_msg=key)
    assert body["pred"] == expected["pred"][ids].tolist()


def test_a_sent_graph_is_scored_as_the_model_runs_on_it(node_server):
    server, run = node_server
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 32)).astype(np.float32)
    edge_index = np.array([[0, 1, 2, 3, 4, 5, 1], [1, 2, 3, 4, 5, 0, 4]])
    got = server.post("/predict", {"graph": {"x": x.tolist(), "edge_index": edge_index.tolist()}, "nodes": [4, 0]})
    assert got.status_code == 200, got.text
    expected = direct_forward(run, torch.from_numpy(x), torch.from_numpy(edge_index))[[4, 0]]
    np.testing.assert_allclose(np.array(got.json()["logits"]), expected.numpy(), atol=1e-5, rtol=0)


def direct_forward(run: Path, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
    """The run's model (``gnnbridge.load``) called on the whole graph at once, by its library."""
    model = gnnbridge.load(run)
    with torch.no_grad():
        if run.name.endswith("pyg"):
            from torch_geometric.data import Data

            return model(Data(edge_index=edge_index, num_nodes=x.shape[0], batch_size=x.shape[0]), x)
        import dgl

        graph = dgl.graph((edge_index[0], edge_index[1]), num_nodes=x.shape[0])
        return model([graph] * model.num_layers, x)


ONE = [[0.0] * 32]  # a sent graph's x: one node of the run's width
BAD = [  # (path, body, status, field, words in the error)
    ("/predict", b"not json", 400, "body", "not JSON"),
    ("/predict", b"[1, 2]", 400, "body", "JSON object"),
    ("/predict", {"nodez": [1]}, 422, "nodes", "missing"),
    ("/predict", {"nodes": "1"}, 422, "nodes", "[0, 300)"),
    ("/predict", {"nodes": []}, 422, "nodes", "non-empty"),
    ("/predict", {"nodes": [1, 2.5]}, 422, "nodes[1]", "whole number"),
    ("/predict", {"nodes": [1, True]}, 422, "nodes[1]", "whole number"),
    ("/predict", {"nodes": [0, -1]}, 422, "nodes[1]", "outside [0, 300)"),
    ("/predict", {"nodes": [300]}, 404, "nodes[0]", "outside [0, 300)"),
    ("/predict", {"graph": {"x": [[0.0] * 31], "edge_index": [[], []]}, "nodes": [0]}, 422, "graph.x[0]", "32"),
    ("/predict", {"graph": {"x": ONE, "edge_index": [[0], [1]]}, "nodes": [0]}, 422, "graph.edge_index[1][0]", "[0, 1"),
    ("/predict", {"graph": {"x": ONE, "edge_index": [[0], []]}, "nodes": [0]}, 422, "graph.edge_index", "as long"),
    ("/predict", {"graph": {"x": ONE, "edge_index": [[], []]}, "nodes": [1]}, 404, "nodes[0]", "[0, 1)"),
    ("/predict", {"graph": [1], "nodes": [0]}, 422, "graph", "object"),
    ("/top-k", {"sources": [0], "k": 3}, 400, "sources", "link task"),
    ("/predict", {"edges": [[0, 1]]}, 400, "edges", "edge task"),
    ("/nowhere", {}, 404, "path", "POST /predict"),
]  # fmt: skip


@pytest.mark.parametrize("case", BAD, ids=[f"{c[3]}-{i}" for i, c in enumerate(BAD)])
def test_a_bad_request_is_refused_in_json_and_the_next_is_answered(node_server, case):
    server, _ = node_server
    path, body, status, field, words = case
    kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
    got = server.client.post(path, **kwargs)
    assert got.status_code == status, got.text
    assert got.json()["field"] == field and words in got.json()["error"], got.json()
    assert got.json()["error"].startswith(field + ":")
    assert server.post("/predict", {"nodes": [1]}).status_code == 200


def test_a_body_over_the_limit_is_refused(node_server):
    server, _ = node_server
    limit = server.client.get("/metadata").json()["max_body"]
    got = server.post("/predict", {"nodes": [1] * (limit // 2)})
    assert got.status_code == 413 and "--max-body" in got.json()["error"], got.text
    assert server.post("/predict", {"nodes": [1]}).status_code == 200


def test_concurrent_clients_get_predicts_numbers_in_shared_passes(node_server):
    server, run = node_server
    expected = gnnbridge.predict(run)["logits"]
    before = server.client.get("/metadata").json()["batching"]
    requests = [list(range(i, 300, 37)) for i in range(40)]  # 4 threads x 10 requests

    def ask(ids):
        with httpx.Client(base_url=server.url, timeout=60) as client:
            return client.post("/predict", json={"nodes": ids})

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(ask, requests))
    for ids, got in zip(requests, answers):
        assert got.status_code == 200, got.text
        np.testing.assert_allclose(np.array(got.json()["logits"]), expected[ids], atol=1e-5, rtol=0)
    after = server.client.get("/metadata").json()["batching"]
    assert after["requests"] - before["requests"] == 40
    assert after["forward_passes"] - before["forward_passes"] <= 40


def test_sigterm_lets_the_request_in_flight_finish_and_exits_0(node_server):
    server, _ = node_server
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(server.post, "/predict", {"nodes": list(range(300))})
        time.sleep(0.05)
        rc = server.stop()
        assert pending.result().status_code == 200
    assert rc == 0, server.proc.stderr.read()
    assert "Traceback" not in server.proc.stderr.read()


def test_top_k_answers_predict_top_k_rows(rec_server):
    server, run = rec_server
    expected = gnnbridge.predict(run, top_k=5)
    sources = [3, 0, 149, 3]
    got = server.post("/top-k", {"sources": sources, "k": 5})
    assert got.status_code == 200, got.text
    body = got.json()
    for row, source in enumerate(sources):
        count = int(expected["counts"][source])
        assert body["items"][row] == expected["top_dst"][source][:count].tolist()
        np.testing.assert_allclose(body["scores"][row], expected["top_scores"][source][:count], atol=1e-5, rtol=0)
    meta = server.client.get("/metadata").json()
    assert meta["task"] == "link" and meta["num_sources"] == 150 and meta["num_destinations"] == 100


@pytest.mark.parametrize(
    "body, field, words",
    [
        ({"sources": [0], "k": 0}, "k", "[1, 100]"),
        ({"sources": [0], "k": 101}, "k", "[1, 100]"),
        ({"sources": [0], "k": "3"}, "k", "whole number"),
        ({"sources": [150], "k": 3}, "sources[0]", "[0, 150)"),
        ({"k": 3}, "sources", "missing"),
        ({"nodes": [0]}, "nodes", "link"),
    ],
)
def test_bad_top_k_requests_are_refused(rec_server, body, field, words):
    server, _ = rec_server
    got = server.post("/predict" if "nodes" in body else "/top-k", body)
    assert 400 <= got.status_code < 500 and got.json()["field"] == field and words in got.json()["error"], got.text
    assert server.post("/top-k", {"sources": [1], "k": 2}).status_code == 200


def test_a_model_error_is_a_500_of_one_line_and_the_server_goes_on(runs, tmp_path):
    """Weights that give NaN (a checkpoint file written so, as a diverged run would leave it)."""
    import shutil

    run = tmp_path / "nan"
    shutil.copytree(runs["pyg"], run)
    path = run / "checkpoints" / "best.pt"
    state = torch.load(path, weights_only=False)
    state["model"] = {k: torch.full_like(v, float("nan")) for k, v in state["model"].items()}
    torch.save(state, path)
    server = Server(run)
    try:
        got = server.post("/predict", {"nodes": [1, 2]})
        assert got.status_code == 500 and got.json()["field"] == "model", got.text
        assert "NaN" in got.json()["error"] and "\n" not in got.json()["error"]
        assert server.client.get("/health").status_code == 200
    finally:
        assert server.stop() == 0


def edge_graph(n: int = 200, e: int = 1200) -> dict[str, np.ndarray]:
    """A directed graph whose edges carry one of two classes, a rule of both ends' features."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    return {"x": x, "edge_index": np.stack([src, dst]).astype(np.int64), "edge_label": (x[src, 0] + x[dst, 1] > 0)}


@pytest.fixture(scope="module")
def edge_server(tmp_path_factory):
    """An edge task (task=edge) trained briefly on a homogeneous .npz, served."""
    root = tmp_path_factory.mktemp("serve-edges")
    arrays = edge_graph()
    np.savez(root / "edges.npz", **{**arrays, "edge_label": arrays["edge_label"].astype(np.int64)})
    run = root / "run"
    gnnbridge.run(dataset=root / "edges.npz", backend="pyg", nproc=1, out=run, progress=False,
                  overrides=["task=edge", "train.epochs=1", "train.batch_size=256"])  # fmt: skip
    server = Server(run)
    yield server, run, arrays["edge_index"]
    assert server.stop() == 0


def test_edges_answer_predicts_rows_of_those_edges(edge_server):
    server, run, edge_index = edge_server
    expected = gnnbridge.predict(run)  # row i: column i of the file's edge_index
    columns = [7, 0, 1199, 7, 512]
    got = server.post("/predict", {"edges": edge_index[:, columns].T.tolist()})
    assert got.status_code == 200, got.text
    body = got.json()
    for key in ("logits", "probs"):
        np.testing.assert_allclose(np.array(body[key]), expected[key][columns], atol=1e-5, rtol=0, err_msg=key)
    assert body["pred"] == expected["pred"][columns].tolist()
    meta = server.client.get("/metadata").json()
    assert meta["task"] == "edge" and meta["num_edges"] == 1200 and meta["ids"] == "rows"


@pytest.mark.parametrize(
    "body, status, field, words",
    [
        ({"edges": "0,1"}, 422, "edges", "non-empty list of [source, destination] pairs"),
        ({"edges": [[0, 1, 2]]}, 422, "edges[0]", "pair [source, destination]"),
        ({"edges": [[0, 0], 5]}, 422, "edges[1]", "pair"),
        ({"edges": [[0, 200]]}, 404, "edges[0][1]", "outside [0, 200)"),
        ({"edges": [[-1, 0]]}, 422, "edges[0][0]", "outside [0, 200)"),
        ({"edges": [[0, 1.5]]}, 422, "edges[0][1]", "whole number"),
        ({"nodes": [0]}, 400, "nodes", "edge"),
    ],
)
def test_bad_edges_are_refused_naming_the_field(edge_server, body, status, field, words):
    server, _, edge_index = edge_server
    got = server.post("/predict", body)
    assert got.status_code == status and got.json()["field"] == field and words in got.json()["error"], got.text
    assert server.post("/predict", {"edges": edge_index[:, :2].T.tolist()}).status_code == 200


def test_a_pair_that_is_not_an_edge_is_refused(edge_server):
    server, _, edge_index = edge_server
    present = set(zip(*edge_index.tolist()))
    absent = next([s, d] for s in range(200) for d in range(200) if (s, d) not in present)
    got = server.post("/predict", {"edges": [edge_index[:, 0].tolist(), absent]})
    assert got.status_code == 404 and got.json()["field"] == "edges[1]", got.text
    assert f"{absent} is not an edge of (" in got.json()["error"] and "its graph's own edges" in got.json()["error"]


def test_health_is_503_loading_until_the_run_has_loaded_then_200(runs):
    """The server listens before the run loads: its first line names the URL, every answer
    before ``/health``'s 200 was a 503 in JSON (:class:`served.Server` checks that for every
    server here), and a second line says it is ready, with the checkpoint's epoch."""
    server = Server(runs["dgl"])
    try:
        assert server.client.get("/health").json()["status"] == "ok"
        assert server.post("/predict", {"nodes": [1]}).status_code == 200
        ready = server.lines.get(timeout=60)
        assert "ready" in ready and "checkpoint epoch" in ready, ready
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.proc.stderr.read()


def test_a_run_that_fails_to_load_stops_the_server_with_one_line(runs):
    """Checked before listening: the checkpoint; after (while /health says loading): the graph,
    here one too small for the run's classes."""
    cmd = [sys.executable, "-m", "gnnbridge", "serve", str(runs["pyg"]), "--port", "0"]
    proc = subprocess.run([*cmd, "--set", "dataset.options.num_nodes=10"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "http://127.0.0.1:" in proc.stdout, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "num_nodes=10 is too small" in lines[0], proc.stderr
