"""Edge features (``edge_attr``) on homogeneous graphs and collections: each row follows its edge
into the records, every batch carries its edges' rows (PyG ``edge_attr``, DGL ``edata["feat"]``,
through core's sampler, DGL's own, layer-wise passes and graph batches), and ``gine`` learns
labels only the edge features explain, the same model on both libraries. Bad input is one line."""

from __future__ import annotations

import re

import helpers
import numpy as np
import pytest
import torch

import gnnbridge
from gnnbridge.backends.dgl.compat import import_dgl
from gnnbridge.core.app.compare import same_batches
from gnnbridge.core.config import ModelSpec, SamplerKind, Task  # AUTO: DGL its own sampler, PyG core (no pyg-lib here)
from gnnbridge.core.errors import GnnBridgeError
from gnnbridge.core.models.build import build_model
from gnnbridge.core.plugins import get_backend
from gnnbridge.core.records.collection import GraphCollection, pack
from gnnbridge.core.records.data import GraphData, random_split
from gnnbridge.core.records.hetero import HeteroSource
from gnnbridge.core.sampling.adapters import CoreSampler
from gnnbridge.core.sampling.build import make_hetero_sampler
from gnnbridge.core.storage.folder import open_prepared
from gnnbridge.core.storage.formats import graph_from_arrays
from gnnbridge.core.tasks import for_node_task

pytestmark = pytest.mark.slow
N, F, E, D = 400, 4, 3200, 3
BACKENDS = ("pyg", "dgl")


def node_graph(seed: int = 3) -> dict[str, np.ndarray]:
    """Node classes that only the in-edges' features explain: the sign of their first column's sum."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, N, E), rng.integers(0, N, E)
    attr = rng.normal(size=(E, D)).astype(np.float32)
    score = np.zeros(N)
    np.add.at(score, dst, attr[:, 0])
    x = rng.normal(size=(N, F)).astype(np.float32)
    return {"x": x, "edge_index": np.stack([src, dst]), "y": (score > 0).astype(np.int64), "edge_attr": attr}


def graph_collection(seed: int = 4, graphs: int = 160) -> dict[str, np.ndarray]:
    """Graphs of featureless nodes whose class is the sign of their edges' second feature's sum."""
    rng = np.random.default_rng(seed)
    edges, attrs, ys, ptr = [], [], [], [0]
    for _ in range(graphs):
        n = int(rng.integers(5, 12))
        ei, attr = rng.integers(0, n, (2, 3 * n)), rng.normal(size=(3 * n, D)).astype(np.float32)
        edges.append(ei + ptr[-1])
        attrs.append(attr)
        ys.append(int(attr[:, 1].sum() > 0))
        ptr.append(ptr[-1] + n)
    return {
        "x": np.ones((ptr[-1], 2), np.float32),
        "edge_index": np.concatenate(edges, 1),
        "edge_attr": np.concatenate(attrs),
        "node_ptr": np.array(ptr),
        "y": np.array(ys),
    }


_RUNS: dict[str, dict] = {}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("edge-features")
    np.savez(root / "nodes.npz", **node_graph())
    np.savez(root / "graphs.npz", **graph_collection())
    return root


def trained(files, kind: str, backend: str) -> dict:
    key = f"{kind}-{backend}"
    if key not in _RUNS:
        task = ["task=graph", "train.epochs=6"] if kind == "graphs" else ["train.epochs=8"]
        _RUNS[key] = gnnbridge.run(
            dataset=files / f"{kind}.npz", backend=backend, nproc=2, out=files / key, progress=False,
            overrides=["model.arch=gine", "train.batch_size=32", *task],
        )  # fmt: skip
    return _RUNS[key]


@pytest.mark.xdist_group("test_edge_features:nodes")
@pytest.mark.parametrize("backend", BACKENDS)
def test_gine_learns_node_classes_only_the_edge_features_explain(files, backend):
    metrics = trained(files, "nodes", backend)["metrics"]
    assert metrics["test_acc"] > 0.8, metrics  # the node features alone say nothing: chance is 0.5
    if backend == "dgl":  # exact evaluation: every neighbour sampled gives what layer-wise gave
        full = gnnbridge.evaluate(files / "nodes-dgl", overrides=["eval.mode=full"])["metrics"]
        assert full == pytest.approx(metrics, abs=1e-6)


@pytest.mark.xdist_group("test_edge_features:graphs")
def test_gine_on_graphs_is_one_model_on_both_libraries(files):
    pyg, dgl = (trained(files, "graphs", b)["metrics"] for b in BACKENDS)
    assert pyg["test_acc"] > 0.7, pyg
    assert dgl == pytest.approx(pyg, abs=1e-5)  # the same batches and weights on either library


@pytest.mark.xdist_group("test_edge_features:nodes")
def test_a_gine_run_on_edges_of_another_width_says_so(files, tmp_path):
    trained(files, "nodes", "pyg")
    a = node_graph()
    np.savez(tmp_path / "wider.npz", **{**a, "edge_attr": np.ones((E, D + 2), np.float32)})
    needle = f"was trained on edges with {D} features each (edge_attr), but the dataset's edges have {D + 2} each"
    with pytest.raises(GnnBridgeError, match=re.escape(needle)):
        gnnbridge.evaluate(files / "nodes-pyg", overrides=[f"dataset.path={tmp_path / 'wider.npz'}"])
    proc = helpers.gnnbridge("predict", str(files / "nodes-pyg"), "--set", f"dataset.path={tmp_path / 'wider.npz'}",
                             "--out", str(tmp_path / "out.npz"), cwd=tmp_path)  # fmt: skip
    helpers.one_line(proc, needle)
    assert not (tmp_path / "out.npz").exists()


@pytest.mark.xdist_group("test_edge_features:nodes")
def test_a_gine_run_moves_to_the_other_library_with_its_numbers(files, tmp_path):
    trained(files, "nodes", "pyg")
    proc = helpers.gnnbridge(
        "port", str(files / "nodes-pyg"), "--to", "dgl", "--out", str(tmp_path / "dgl"), cwd=tmp_path
    )
    helpers.ok(proc)
    before = gnnbridge.evaluate(files / "nodes-pyg")["metrics"]
    assert gnnbridge.evaluate(tmp_path / "dgl")["metrics"] == pytest.approx(before, abs=1e-5)


def test_both_libraries_train_gine_on_the_same_batches(files):
    report = same_batches(
        dataset=str(files / "nodes.npz"), epochs=1, overrides=["model.arch=gine", "train.batch_size=64"]
    )
    assert report["agree"] and report["pairs"][0]["steps"] > 1, report


def test_each_row_follows_its_edge_into_the_records_and_every_batch():
    """Features that name their edge (its source and destination): after sorting, packing and
    sampling on either library, each edge still holds its own row."""
    rng = np.random.default_rng(0)
    ei = torch.from_numpy(rng.integers(0, 60, (2, 500)))
    names = ei.t().float()  # row e: [source, destination] of edge e
    data = GraphData.from_edges(ei, torch.ones(60, 1), torch.arange(60) % 2, *random_split(60, 0), edge_attr=names)
    assert torch.equal(data.edge_attr[:, 0].long(), data.indices)
    assert torch.equal(data.edge_attr[:, 1].long(), data.edge_index[1])
    for name in BACKENDS:
        backend = get_backend(name).require()
        store = backend.graph_store(data)
        for sampler in (
            CoreSampler(store, [5, 5], backend.from_sampled),
            backend.sampler(store, [5, 5], SamplerKind.AUTO),
        ):
            sampler.reseed(0, 0, 0)
            (mb,) = sampler.loader([torch.arange(8)])
            for src, dst, rows in _edges_of(name, mb.graph):
                assert torch.equal(rows, torch.stack([src, dst], 1).float())
    ptr = torch.tensor([0, 20, 45, 60])
    inside = ei[:, (torch.searchsorted(ptr, ei[0], right=True) == torch.searchsorted(ptr, ei[1], right=True))]
    graphs = GraphCollection.from_edges(
        torch.ones(60, 1), inside, ptr, torch.tensor([0, 1, 0]), edge_attr=inside.t().float()
    )
    packed = pack(graphs, torch.tensor([2, 0]))
    global_ids = packed.node  # local id i is collection node node[i]
    assert torch.equal(packed.edge_attr.long(), global_ids[packed.edge_index].t())


def _edges_of(backend: str, graph):
    """``(global source, global destination, feature rows)`` of every edge a batch holds."""
    if backend == "pyg":
        yield graph.n_id[graph.edge_index[0]], graph.n_id[graph.edge_index[1]], graph.edge_attr
        return
    dgl = import_dgl()
    for block in graph:
        src, dst = block.edges()
        yield block.srcdata[dgl.NID][src], block.dstdata[dgl.NID][dst], block.edata["feat"]


def test_graphs_held_in_memory_bring_their_edge_features(tmp_path):
    from torch_geometric.data import Data

    a = node_graph()
    x, ei, y, attr = (torch.from_numpy(a[k]) for k in ("x", "edge_index", "y", "edge_attr"))
    g = import_dgl().graph((ei[0], ei[1]), num_nodes=N)
    g.ndata["feat"], g.ndata["label"], g.edata["feat"] = x, y, attr
    for name, graph, backend in (("data", Data(x=x, edge_index=ei, y=y, edge_attr=attr), "dgl"), ("dgl", g, "pyg")):
        results = gnnbridge.run(dataset=graph, backend=backend, nproc=1, out=tmp_path / name, progress=False,
                                overrides=["model.arch=gine", "train.epochs=4", "train.batch_size=32"])  # fmt: skip
        assert results["metrics"]["test_acc"] > 0.7, (name, results["metrics"])
    c = graph_collection(graphs=12)
    ptr = c["node_ptr"]
    graphs = [
        Data(x=torch.ones(ptr[i + 1] - ptr[i], 2), edge_index=torch.from_numpy(c["edge_index"][:, m] - ptr[i]),
             edge_attr=torch.from_numpy(c["edge_attr"][m]), y=torch.tensor([c["y"][i]]))
        for i in range(12)
        for m in [(c["edge_index"][1] >= ptr[i]) & (c["edge_index"][1] < ptr[i + 1])]
    ]  # fmt: skip
    results = gnnbridge.run(dataset=graphs, backend="pyg", nproc=1, out=tmp_path / "graphs", progress=False,
                            overrides=["task=graph", "model.arch=gine", "train.epochs=1"])  # fmt: skip
    assert "test_acc" in results["metrics"]


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda a: a.pop("edge_attr"), "model.arch=gine reads edge features, but dataset"),
        (lambda a: a.update(edge_attr=a["edge_attr"][:-1]), "edge_attr has 3199 rows for 3200 edges"),
        (lambda a: a["edge_attr"].__setitem__((7, 1), np.nan), "edge_attr holds NaN or inf values"),
        (lambda a: a.update(edge_attr=a["edge_attr"].astype(np.float64)), "edge_attr has dtype float64"),
    ],
)
def test_bad_edge_features_are_one_line(tmp_path, change, needle):
    arrays = node_graph()
    change(arrays)
    helpers.refused_npz(tmp_path, arrays, needle, "model.arch=gine")


def test_what_does_not_take_edge_features_yet_says_so(tmp_path, capsys):
    """gine without them is refused, and link prediction, which does not read them yet, says it
    trains without them: of a typed graph, and of a homogeneous one (a PyG ``Data``, named so)."""
    with pytest.raises(GnnBridgeError, match="reads edge features"):
        gnnbridge.run(dataset="synthetic", overrides=["model.arch=gine"], out=tmp_path / "run", progress=False)
    a = node_graph()
    rates = {"edge_index__user__rates__item": a["edge_index"] % 50, "edge_attr__user__rates__item": a["edge_attr"]}
    np.savez(
        tmp_path / "typed.npz", x__user=np.ones((50, 2), np.float32), x__item=np.ones((50, 2), np.float32), **rates
    )
    gnnbridge.run(dataset=tmp_path / "typed.npz", overrides=["task=link", "train.epochs=1"], out=tmp_path / "link",
                  progress=False)  # fmt: skip
    assert "has edge features, which link prediction does not read yet" in capsys.readouterr().err
    from torch_geometric.data import Data

    data = Data(**{key: torch.from_numpy(a[key]) for key in ("x", "edge_index", "edge_attr", "y")})
    gnnbridge.run(dataset=data, overrides=["task=link", "train.epochs=1"], out=tmp_path / "homogeneous", progress=False)
    err = capsys.readouterr().err
    assert "dataset (a Data) has edge features, which link prediction does not read yet" in err, err


def named_edges(rng, edges: dict) -> dict[str, np.ndarray]:
    """Typed arrays of ``edges`` whose features name their edge ([source, destination])."""
    return {
        **{f"edge_index__{'__'.join(et)}": ei for et, ei in edges.items()},
        **{f"edge_attr__{'__'.join(et)}": ei.T.astype(np.float32) for et, ei in edges.items()},
    }


def prepared(tmp_path, name: str, arrays: dict):
    """``arrays`` saved as ``name.npz``, prepared by the command, and opened as a run opens it."""
    np.savez(tmp_path / f"{name}.npz", **arrays)
    helpers.ok(helpers.gnnbridge("prepare", str(tmp_path / f"{name}.npz"), "--quiet", cwd=tmp_path))
    return open_prepared(tmp_path / name)


def test_prepared_folders_carry_each_edges_features_into_its_records(tmp_path):
    """``gnnbridge prepare`` sorts edge features with their edges (out of core, as it sorts the
    topology): a homogeneous folder's record holds each edge's own row in CSC order, a typed
    folder's node task (its mapped topology) each type's and each ``rev_`` type's as the ``.npz``'s
    record does, and a collection's as its ``.npz`` gives them."""
    rng = np.random.default_rng(2)
    ei = rng.integers(0, 60, (2, 500))
    data = prepared(tmp_path, "plain", {"x": np.ones((60, 2), np.float32), "edge_index": ei,
                                        "y": np.arange(60) % 2, "edge_attr": ei.T.astype(np.float32)})  # fmt: skip
    dst = torch.repeat_interleave(torch.arange(60), data.indptr.diff())
    assert data.folder is not None and torch.equal(data.edge_attr, torch.stack([data.indices, dst], 1).float())
    edges = {
        ("user", "rates", "item"): rng.integers(0, 30, (2, 300)),
        ("item", "like", "item"): rng.integers(0, 30, (2, 200)),
    }
    typed = {"x__user": np.ones((30, 2), np.float32), "x__item": np.ones((30, 2), np.float32),
             "y__item": np.arange(30) % 2, **named_edges(rng, edges)}  # fmt: skip
    source = prepared(tmp_path, "typed", typed)
    assert source.mapped_topology(True) is not None  # the node task maps the folder's topology
    folder, memory = (for_node_task(s, reverse=True, seed=0) for s in (source, graph_from_arrays("t", typed, 0, "t")))
    assert set(folder.edge_attr) == set(memory.edge_attr) == set(folder.edge_index)  # rev_ types too
    for et, rows in memory.edge_attr.items():
        assert torch.equal(folder.edge_index[et], memory.edge_index[et]) and torch.equal(folder.edge_attr[et], rows)
    graphs = graph_collection(graphs=20)
    collection = prepared(tmp_path, "graphs", graphs)
    assert torch.equal(collection.edge_attr, graph_from_arrays("g", graphs, 0, "g").edge_attr)


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda a: a["edge_attr"].__setitem__((7, 1), np.nan), "edge_attr holds NaN or inf values (first at edge 7)"),
        (lambda a: a.update(edge_attr=a["edge_attr"][:-1]), "edge_attr has shape [3199, 3]; expected [3200, D]"),
    ],
)
def test_prepare_refuses_bad_edge_features_in_one_line_and_leaves_no_folder(tmp_path, change, needle):
    arrays = node_graph()
    change(arrays)
    helpers.refused_prepare(tmp_path, arrays, needle)


@pytest.mark.xdist_group("test_edge_features:nodes")
def test_gine_trains_the_same_from_a_prepared_folder_as_from_its_npz(files, tmp_path):
    """The folder's mapped, CSC-sorted edge features reach every rank's batches as the ``.npz``'s
    do: two ranks train to the same numbers."""
    helpers.ok(helpers.gnnbridge("prepare", str(files / "nodes.npz"), "--out", str(tmp_path / "nodes"), "--quiet",
                                 cwd=tmp_path))  # fmt: skip
    results = gnnbridge.run(
        dataset=tmp_path / "nodes", backend="pyg", nproc=2, out=tmp_path / "run", progress=False,
        overrides=["model.arch=gine", "train.batch_size=32", "train.epochs=8"],
    )  # fmt: skip
    assert results["metrics"] == trained(files, "nodes", "pyg")["metrics"]


def test_gat_reads_edge_features_in_its_attention_as_pyg_does_on_both_libraries(files):
    """GAT on a graph with edge features adds them to its attention (PyG's ``GATConv(edge_dim)``);
    DGL's layer computes the same from the same weights, and the features change the outputs."""
    settings = ["model.arch=gat", "model.heads=2", "train.batch_size=64"]
    report = same_batches(dataset=str(files / "nodes.npz"), epochs=1, overrides=settings)
    assert report["agree"] and report["pairs"][0]["steps"] > 1, report
    data = GraphData.from_edges(*(torch.from_numpy(node_graph()[k]) for k in ("edge_index", "x", "y")),
                                *random_split(N, 0), edge_attr=torch.from_numpy(node_graph()["edge_attr"]))  # fmt: skip
    spec = ModelSpec(arch="gat", hidden=16, layers=2, heads=2)
    for name in BACKENDS:
        backend = get_backend(name).require()
        model, _ = build_model(spec, name, Task.NODE, F, 2, data)
        assert {"layers.0.edge.weight", "layers.0.att_edge"} <= set(model.neutral_parameters())
        (mb,) = CoreSampler(backend.graph_store(data), [5, 5], backend.from_sampled).loader([torch.arange(16)])
        before = model.eval()(mb.graph, data.x[mb.input_nodes])
        shuffled = CoreSampler(backend.graph_store(data), [5, 5], backend.from_sampled)
        data.edge_attr = data.edge_attr.flip(0)
        (mb,) = shuffled.loader([torch.arange(16)])
        data.edge_attr = data.edge_attr.flip(0)
        assert not torch.allclose(before, model(mb.graph, data.x[mb.input_nodes]))


def test_heterogeneous_edge_features_follow_their_edges_into_both_libraries_batches():
    """Features naming their edge ([source, destination]) on every type, its ``rev_`` type holding
    its original's rows: after the record sorts, and in PyG's and DGL's heterogeneous batches (core's
    sampler and DGL's own), every edge holds its own row."""
    rng = np.random.default_rng(1)
    edges = {("user", "rates", "item"): torch.from_numpy(rng.integers(0, 30, (2, 300))),
             ("item", "like", "item"): torch.from_numpy(rng.integers(0, 30, (2, 200)))}  # fmt: skip
    source = HeteroSource({"user": 30, "item": 30}, {"user": torch.ones(30, 2), "item": torch.ones(30, 2)}, edges,
                          target_node="item", y=torch.arange(30) % 2,
                          edge_attr={et: ei.t().float() for et, ei in edges.items()})  # fmt: skip
    data = for_node_task(source, reverse=True, seed=0)
    for et, ei in data.edge_index.items():
        named = ei.flip(0) if et[1].startswith("rev_") else ei  # a rev_ edge keeps its original's row
        assert torch.equal(data.edge_attr[et], named.t().float()), et
    for name in BACKENDS:
        backend = get_backend(name).require()
        core = make_hetero_sampler(backend, data, [4, 4], {}, "core")
        for sampler in (core, make_hetero_sampler(backend, data, [4, 4], {}, "auto")):
            sampler.reseed(0, 0, 0)
            (mb,) = sampler.loader([torch.arange(6)])
            for et, (src, dst, rows) in _typed_edges(name, mb.graph).items():
                named = torch.stack([dst, src] if et[1].startswith("rev_") else [src, dst], 1).float()
                assert torch.equal(rows, named), (name, et)


def _typed_edges(backend: str, graph) -> dict:
    """``{edge type: (global sources, global destinations, feature rows)}`` of a heterogeneous batch."""
    if backend == "pyg":
        return {
            et: (
                graph[et[0]].n_id[graph[et].edge_index[0]],
                graph[et[2]].n_id[graph[et].edge_index[1]],
                graph[et].edge_attr,
            )
            for et in graph.edge_types
        }
    dgl, out = import_dgl(), {}
    for block in graph:
        for et in block.canonical_etypes:
            src, dst = block.edges(etype=et)
            ids = (block.srcnodes[et[0]].data[dgl.NID][src], block.dstnodes[et[2]].data[dgl.NID][dst])
            out[et] = (*ids, block.edges[et].data["feat"])
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_edge_task_reads_each_scored_edges_own_features(tmp_path, backend):
    """Fraud on transactions: the label is mostly the transaction's amount (an edge feature), which
    the edge task's head reads beside both ends' states; without it the same graph learns far less."""
    rng = np.random.default_rng(7)
    src, dst = rng.integers(0, 300, 3000), rng.integers(0, 300, 3000)
    x, amount = rng.normal(size=(300, 4)).astype(np.float32), rng.normal(size=(3000, 2)).astype(np.float32)
    label = ((amount[:, 0] > 0.5) | (x[src, 0] > 1.0)).astype(np.int64)
    np.savez(tmp_path / "fraud.npz", x=x, edge_index=np.stack([src, dst]), edge_label=label, edge_attr=amount)
    settings = ["task=edge", "train.epochs=5", "train.batch_size=64"]
    results = gnnbridge.run(dataset=tmp_path / "fraud.npz", backend=backend, nproc=1, out=tmp_path / "run",
                            overrides=settings, progress=False)  # fmt: skip
    assert results["metrics"]["test_acc"] > 0.9, results["metrics"]  # endpoints alone reach about 0.7
    full = gnnbridge.evaluate(tmp_path / "run", overrides=["eval.mode=full"])["metrics"]
    assert full == pytest.approx(results["metrics"], abs=1e-6)
    # Edges of another width to score: that is what the line says, not the head's weight shapes.
    np.savez(tmp_path / "wider.npz", x=x, edge_index=np.stack([src, dst]), edge_attr=np.ones((3000, 5), np.float32))
    trained_with = "was trained on edges with 2 features each (edge_attr), but the dataset's edges have"
    with pytest.raises(GnnBridgeError, match=re.escape(f"{trained_with} 5 each")):
        gnnbridge.predict(tmp_path / "run", dataset=tmp_path / "wider.npz")
    np.savez(tmp_path / "bare.npz", x=x, edge_index=np.stack([src, dst]))
    with pytest.raises(GnnBridgeError, match=re.escape(f"{trained_with} none")):
        gnnbridge.predict(tmp_path / "run", dataset=tmp_path / "bare.npz")


def test_heterogeneous_graphs_in_memory_bring_edge_labels_and_features(tmp_path):
    """A ``HeteroData`` (``edge_label``, ``edge_attr`` on a relation) trains on DGL and a
    heterogeneous ``DGLGraph`` (``edges[...].data["label"]``, ``["feat"]``) on PyG: the amount
    each payment carries is what the model reads."""
    from torch_geometric.data import HeteroData

    rng = np.random.default_rng(7)
    src, dst = torch.from_numpy(rng.integers(0, 100, 2000)), torch.from_numpy(rng.integers(0, 80, 2000))
    amount = torch.from_numpy(rng.normal(size=(2000, 2)).astype(np.float32))
    label, pays = (amount[:, 0] > 0.5).long(), ("user", "pays", "shop")
    users, shops = torch.randn(100, 3), torch.randn(80, 3)
    data = HeteroData()
    data["user"].x, data["shop"].x = users, shops
    data[pays].edge_index, data[pays].edge_label, data[pays].edge_attr = torch.stack([src, dst]), label, amount
    g = import_dgl().heterograph({pays: (src, dst)}, {"user": 100, "shop": 80})
    g.nodes["user"].data["feat"], g.nodes["shop"].data["feat"] = users, shops
    g.edges["pays"].data["label"], g.edges["pays"].data["feat"] = label, amount
    for name, graph, backend in (("heterodata", data, "dgl"), ("dgl", g, "pyg")):
        results = gnnbridge.run(dataset=graph, backend=backend, nproc=1, out=tmp_path / name, progress=False,
                                overrides=["task=edge", "train.epochs=4", "train.batch_size=64"])  # fmt: skip
        assert results["metrics"]["test_acc"] > 0.9, (name, results["metrics"])
