"""Graphs a PyG or DGL user already holds, handed to ``gnnbridge.run(dataset=...)`` as they are: a
``Data``, a ``HeteroData``, a ``DGLGraph`` (homogeneous and heterogeneous), a dataset of graphs,
and a library's own dataset class by name (``pyg:Planetoid``, ``dgl:CoraGraphDataset``) read from
a small copy in the library's raw format. Each is read with its library's conventions and
becomes the same dataset as the same arrays in an ``.npz``."""

from __future__ import annotations

import hashlib
import json
import pickle
import re
import subprocess
import sys
from pathlib import Path

import helpers
import numpy as np
import pytest
import scipy.sparse as sp
import torch
import yaml
from torch_geometric.data import Data, HeteroData
from torch_geometric.nn import GINConv, GINEConv, global_add_pool
from torch_geometric.nn import SAGEConv as PygSAGEConv

import gnnbridge
from gnnbridge.backends.dgl.compat import import_dgl
from gnnbridge.core.app.objects import as_dataset
from gnnbridge.core.app.plan import Plan
from gnnbridge.core.app.preflight import load_dataset
from gnnbridge.core.app.resolve import resolve_config
from gnnbridge.core.errors import CheckpointError, GnnBridgeError

dgl = import_dgl()
DglSAGEConv = dgl.nn.SAGEConv
N, F, C = 300, 6, 3
DOCS = helpers.REPO / "docs" / "evaluate-and-predict.md"  # its recipe for DGL's blocks of a whole graph


@pytest.fixture(autouse=True)
def data_root(tmp_path, monkeypatch):
    """Where graphs handed over in memory are written (``$GNNBRIDGE_DATA/in-memory``)."""
    monkeypatch.setenv("GNNBRIDGE_DATA", str(tmp_path / "data-root"))
    return tmp_path / "data-root"


def arrays(seed=0, n=N) -> dict[str, np.ndarray]:
    """A homophilous graph whose classes its features and edges both carry, with a split."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, C, n)
    x = (rng.normal(size=(n, F)) + 1.5 * np.eye(C, F)[y]).astype(np.float32)
    src = rng.integers(0, n, 6 * n)
    same = rng.random(6 * n) < 0.8
    dst = np.where(same, [rng.choice(np.flatnonzero(y == y[s])) for s in src], rng.integers(0, n, 6 * n))
    perm = rng.permutation(n)
    splits = {"train_idx": np.sort(perm[: n // 2]), "val_idx": np.sort(perm[n // 2 : 3 * n // 4])}
    splits["test_idx"] = np.sort(perm[3 * n // 4 :])
    return {"x": x, "edge_index": np.stack([src, dst]).astype(np.int64), "y": y.astype(np.int64), **splits}


def masks(a: dict, n=N) -> dict[str, torch.Tensor]:
    out = {}
    for split in ("train", "val", "test"):
        mask = torch.zeros(n, dtype=torch.bool)
        mask[torch.from_numpy(a[f"{split}_idx"])] = True
        out[f"{split}_mask"] = mask
    return out


def pyg_data(a: dict) -> Data:
    t = {k: torch.from_numpy(v) for k, v in a.items()}
    return Data(x=t["x"], edge_index=t["edge_index"], y=t["y"], **masks(a))


def dgl_graph(a: dict):
    g = dgl.graph((torch.from_numpy(a["edge_index"][0]), torch.from_numpy(a["edge_index"][1])), num_nodes=N)
    g.ndata["feat"], g.ndata["label"] = torch.from_numpy(a["x"]), torch.from_numpy(a["y"])
    g.ndata.update(masks(a))
    return g


def stored(path) -> dict[str, np.ndarray]:
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def same(left: dict, right: dict) -> bool:
    return left.keys() == right.keys() and all(np.array_equal(left[k], right[k]) for k in left)


def test_a_data_and_a_dglgraph_of_the_same_arrays_are_one_dataset_file(data_root):
    a = arrays()
    from_pyg, from_dgl = as_dataset(pyg_data(a)), as_dataset(dgl_graph(a))
    assert from_pyg == from_dgl and Path(from_pyg).parent == data_root / "in-memory"
    assert same(stored(from_pyg), a)  # masks became the .npz's index splits
    assert as_dataset(pyg_data(a)) == from_pyg and len(list((data_root / "in-memory").iterdir())) == 1


def hetero_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    writes = np.stack([rng.integers(0, 40, 200), rng.integers(0, 60, 200)])
    cites = np.stack([rng.integers(0, 60, 150), rng.integers(0, 60, 150)])
    return {
        "num_nodes__author": np.array([40]),
        "x__paper": rng.normal(size=(60, 5)).astype(np.float32),
        "y__paper": rng.integers(0, 3, 60),
        "edge_index__author__writes__paper": writes,
        "edge_index__paper__cites__paper": cites,
    }


def test_a_heterodata_and_a_heterogeneous_dglgraph_are_the_typed_format():
    a = hetero_arrays()
    data = HeteroData()
    data["author"].num_nodes = 40
    data["paper"].x, data["paper"].y = torch.from_numpy(a["x__paper"]), torch.from_numpy(a["y__paper"])
    for key in ("edge_index__author__writes__paper", "edge_index__paper__cites__paper"):
        data[tuple(key.split("__")[1:])].edge_index = torch.from_numpy(a[key])
    g = dgl.heterograph(
        {tuple(k.split("__")[1:]): tuple(torch.from_numpy(v)) for k, v in a.items() if k.startswith("edge_index")},
        num_nodes_dict={"author": 40, "paper": 60},
    )
    g.nodes["paper"].data["feat"], g.nodes["paper"].data["label"] = data["paper"].x, data["paper"].y
    assert as_dataset(data) == as_dataset(g)
    assert same(stored(as_dataset(data)), dict(sorted(a.items())))


def test_collections_of_graphs_from_either_library_are_one_collection():
    rng = np.random.default_rng(2)
    sizes = [4, 7, 5]
    pyg, pairs = [], []
    for i, n in enumerate(sizes):
        x, ei = torch.from_numpy(rng.normal(size=(n, 3)).astype(np.float32)), torch.randint(0, n, (2, 2 * n))
        pyg.append(Data(x=x, edge_index=ei, y=torch.tensor([i % 2])))
        g = dgl.graph((ei[0], ei[1]), num_nodes=n)
        g.ndata["feat"] = x
        pairs.append((g, torch.tensor(i % 2)))
    path = as_dataset(pyg)
    assert path == as_dataset(helpers.dgl_pairs(pairs))
    assert stored(path)["node_ptr"].tolist() == [0, 4, 11, 16] and stored(path)["y"].tolist() == [0, 1, 0]


def refusal(obj) -> str:
    with pytest.raises(GnnBridgeError) as caught:
        as_dataset(obj)
    return str(caught.value)


def test_what_cannot_be_read_is_one_line_naming_it_and_nothing_is_written(data_root, capsys):
    a = arrays()
    no_x = pyg_data(a)
    del no_x.x
    assert "has no x (node features)" in refusal(no_x)
    regression = pyg_data(a)
    regression.y = regression.y.float()
    assert "y is float32; classification takes integer classes" in refusal(regression)
    several = pyg_data(a)
    several.train_mask = torch.stack([several.train_mask] * 3, 1)
    assert "train_mask[:, 0]" in refusal(several)
    partial = dgl_graph(a)
    del partial.ndata["test_mask"]
    assert "train_mask, val_mask but not all of" in refusal(partial)
    ids = pyg_data(a)
    ids.edge_index = ids.edge_index.clone()
    ids.edge_index[0, 5] = N + 7
    assert "edge_index" in refusal(ids) and str(N + 7) in refusal(ids)
    odd = HeteroData()
    odd["my__type"].x = torch.ones(3, 1)
    odd["my__type", "to", "my__type"].edge_index = torch.zeros(2, 1, dtype=torch.long)
    assert "type 'my__type' contains '__'" in refusal(odd)
    assert "builtins.dict, which no graph reader reads" in refusal({"x": a["x"]}) and "PyG: a Data" in refusal({})
    assert not (data_root / "in-memory").exists() or not list((data_root / "in-memory").iterdir())
    with_features = pyg_data(a)
    with_features.edge_weight = torch.ones(a["edge_index"].shape[1])
    as_dataset(with_features)
    assert "has edge_weight, which gnnbridge does not read (yet)" in capsys.readouterr().err
    graphs = [Data(x=torch.ones(3, 1), edge_index=torch.tensor([[0], [1]]), y=torch.tensor([i % 2])) for i in range(9)]
    with pytest.raises(GnnBridgeError) as caught:  # named as handed over, not as the file it was kept in
        gnnbridge.run(dataset=graphs, backend="pyg", out=data_root.parent / "graphs", progress=False)
    assert str(caught.value).startswith("dataset (a list of 9 Data) is a collection of 9 graphs (one label per graph)")


def run(tmp_path, dataset, backend, name, *settings, nproc=1, model=None) -> dict:
    overrides = ["train.epochs=2", "train.batch_size=64", *settings]
    return gnnbridge.run(
        dataset=dataset,
        backend=backend,
        model=model,
        nproc=nproc,
        overrides=overrides,
        out=tmp_path / name,
        progress=False,
    )


def test_a_graph_in_memory_trains_to_the_metrics_of_the_same_arrays_in_an_npz(tmp_path):
    a = arrays()
    np.savez(tmp_path / "graph.npz", **a)
    from_file = run(tmp_path, tmp_path / "graph.npz", "pyg", "file")
    from_data = run(tmp_path, pyg_data(a), "pyg", "from-data")
    assert (
        from_data["metrics"] == from_file["metrics"]
        and from_data["history"][-1]["loss"] == (from_file["history"][-1]["loss"])
    )
    assert from_data["metrics"]["test_acc"] > 0.6  # chance: 1/3
    # A later process (the CLI) evaluates the run from its recorded data.
    report = helpers.in_process("evaluate", tmp_path / "from-data", "--json", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["metrics"]["test_acc"] == from_data["metrics"]["test_acc"]
    # The model back, and its outputs in memory: what predict --out writes, what the model computes.
    outputs = gnnbridge.predict(tmp_path / "from-data")
    written = helpers.in_process("predict", tmp_path / "from-data", "--out", "p.npz", cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    assert same(outputs, stored(tmp_path / "p.npz")) and outputs["logits"].shape == (N, C)
    model = gnnbridge.load(tmp_path / "from-data")
    assert isinstance(model, torch.nn.Module) and not model.training
    with torch.no_grad():  # PyG's idiom: the whole graph, every node's output
        t = {k: torch.from_numpy(v) for k, v in a.items()}
        logits = model(Data(edge_index=t["edge_index"], batch_size=N), t["x"])
    assert torch.allclose(logits, torch.from_numpy(outputs["logits"]), atol=1e-5)
    # Another graph of the same kind, handed over in memory.
    other = arrays(seed=5)
    on_other = gnnbridge.predict(tmp_path / "from-data", dataset=pyg_data(other))
    assert np.array_equal(on_other["y"], other["y"]) and not np.allclose(on_other["logits"], outputs["logits"])


def test_a_dgl_run_gives_back_a_model_that_takes_blocks(tmp_path):
    """The model takes the blocks docs/evaluate-and-predict.md builds for a whole graph, also one
    whose last nodes have no in-edges (and no edges at all), and scores it as predict does."""
    a = arrays()
    run(tmp_path, dgl_graph(a), "dgl", "dgl")
    model, outputs = gnnbridge.load(tmp_path / "dgl"), gnnbridge.predict(tmp_path / "dgl")
    recipe = re.search(r"\(`(\[dgl\.to_block\(.*?\] \* layers)` for the whole graph", DOCS.read_text(), re.S)
    keep = a["edge_index"][1] < N - 20  # the last 20 nodes: no in-edges, no out-edges
    edges = a["edge_index"][:, keep & (a["edge_index"][0] < N - 20)]
    np.savez(tmp_path / "lonely.npz", x=a["x"], edge_index=edges)
    lonely = gnnbridge.predict(tmp_path / "dgl", dataset=tmp_path / "lonely.npz")
    for graph_edges, scored in ((a["edge_index"], outputs), (edges, lonely)):
        g = dgl.graph((torch.from_numpy(graph_edges[0]), torch.from_numpy(graph_edges[1])), num_nodes=N)
        blocks = eval(recipe.group(1), {"dgl": dgl, "torch": torch, "g": g, "layers": 2})  # noqa: S307 - the page's own code
        with torch.no_grad():  # DGL's idiom: a block per layer, here every node's whole neighbourhood
            logits = model(blocks, torch.from_numpy(a["x"]))
        assert torch.allclose(logits, torch.from_numpy(scored["logits"]), atol=1e-5)
    check_predict_takes_a_graph_without_labels(tmp_path, tmp_path / "dgl")


def check_predict_takes_a_graph_without_labels(tmp_path, trained):
    """A new graph to score has no labels (and no splits): predict takes it from either library
    or a file, and scores it as the same graph with labels; training and evaluation refuse it."""
    other = arrays(seed=5)
    labelled = gnnbridge.predict(trained, dataset=pyg_data(other))
    bare = {"x": other["x"], "edge_index": other["edge_index"]}
    data = Data(**{k: torch.from_numpy(v) for k, v in bare.items()})
    g = dgl.graph(tuple(torch.from_numpy(other["edge_index"])), num_nodes=N)
    g.ndata["feat"] = torch.from_numpy(other["x"])
    np.savez(tmp_path / "bare.npz", **bare)
    written = helpers.in_process("predict", trained, "--set", "dataset.path=bare.npz", "--out", "b.npz", cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    for outputs in (gnnbridge.predict(trained, dataset=data), gnnbridge.predict(trained, dataset=g)):
        assert set(outputs) == {"logits", "probs", "pred"}  # no labels or splits to hand back
        assert np.array_equal(outputs["logits"], labelled["logits"])
        assert same(outputs, stored(tmp_path / "b.npz"))
    for refused in (lambda: gnnbridge.evaluate(trained, dataset=g), lambda: run(tmp_path, data, "pyg", "bare")):
        with pytest.raises(GnnBridgeError, match=r"training and evaluation need labels \(predict does not\)"):
            refused()
    assert not (tmp_path / "bare").exists()
    proc = helpers.in_process("evaluate", trained, "--set", "dataset.path=bare.npz", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        f"Error: {tmp_path / 'bare.npz'}: no y (int64, a class per node, or per graph of a collection); training "
        "and evaluation need labels (predict takes a graph without them)."
    ]


@pytest.mark.slow
def test_a_data_trains_on_dgl_and_a_dglgraph_on_pyg_on_two_ranks(tmp_path):
    """Each library's graph on the other library, 2 ranks. The two objects are one dataset (one
    file, as the first test shows), so a Data on PyG is the run a DGLGraph on PyG is."""
    a = arrays()
    names = set()
    for obj, backend in ((pyg_data(a), "dgl"), (dgl_graph(a), "pyg")):
        result = run(tmp_path, obj, backend, backend, nproc=2)
        assert result["world_size"] == 2 and result["backend"] == backend
        assert result["metrics"]["test_acc"] > 0.6, (backend, result["metrics"])
        names.add(result["dataset"]["name"])
    assert len(names) == 1


def test_a_heterodata_link_task_trains(tmp_path):
    rng = np.random.default_rng(3)
    taste, latent = rng.normal(size=(200, 4)), rng.normal(size=(80, 4))
    data = HeteroData()
    data["user"].num_nodes = 200
    data["item"].x = torch.from_numpy((latent @ rng.normal(size=(4, 8))).astype(np.float32))
    buys = np.stack([np.repeat(np.arange(200), 5), np.argsort(-(taste @ latent.T), 1)[:, :5].ravel()])
    data["user", "buys", "item"].edge_index = torch.from_numpy(buys)
    result = run(tmp_path, data, "dgl", "link", "task=link", "dataset.reverse_edges=true", "sampler.fanouts=[5,5]")
    assert result["dataset"]["target_edge"] == "user,buys,item" and result["metrics"]["test_roc_auc"] > 0.6


def test_a_data_and_a_dglgraph_without_labels_train_a_link_task_to_the_numbers_with_them(tmp_path):
    """Link prediction reads no node labels (most link data has none: ogbl-collab, citation and
    social graphs): a Data or a DGLGraph of features and edges alone is one dataset and trains a
    link task to the numbers of the same graph with labels; its run evaluates to them and
    predicts top-k lists, of its graph and of another without labels. Node classification on it
    is refused as it always was."""
    a = arrays()
    bare = Data(x=torch.from_numpy(a["x"]), edge_index=torch.from_numpy(a["edge_index"]))
    g = dgl.graph(tuple(torch.from_numpy(a["edge_index"])), num_nodes=N)
    g.ndata["feat"] = torch.from_numpy(a["x"])
    link = ("task=link", "train.epochs=1")
    assert as_dataset(g, overrides=link) == as_dataset(bare, overrides=link)
    labelled = run(tmp_path, pyg_data(a), "dgl", "labelled", *link)["metrics"]
    metrics = run(tmp_path, g, "dgl", "bare", *link)["metrics"]
    assert metrics == labelled and set(metrics) >= {"test_roc_auc", "test_mrr"}
    assert gnnbridge.evaluate(tmp_path / "bare")["metrics"] == metrics
    lists = gnnbridge.predict(tmp_path / "bare", top_k=5)
    assert lists["top_dst"].shape == (N, 5) and (lists["counts"] == 5).all()
    other = arrays(seed=5)
    new = Data(x=torch.from_numpy(other["x"]), edge_index=torch.from_numpy(other["edge_index"]))
    assert gnnbridge.predict(tmp_path / "bare", dataset=new, top_k=5)["top_dst"].shape == (N, 5)
    for obj, backend, where in (
        (bare, "pyg", "dataset (a torch_geometric Data) has no y"),
        (g, "dgl", "dataset (a DGLGraph) has no ndata['label']"),
    ):
        with pytest.raises(GnnBridgeError) as refused:
            run(tmp_path, obj, backend, "node")
        needed = "training and evaluation need labels (predict does not)"
        assert str(refused.value) == f"{where} (a class per node); {needed}."
    assert not (tmp_path / "node").exists()


def write_planetoid(folder: Path, prefix: str, a: dict) -> None:
    """``a``'s graph in Planetoid's raw files (``ind.PREFIX.x`` ...; pickles, as published): the
    first 30 nodes labelled for training, then 500 validation nodes, the last 100 the test."""
    n = a["x"].shape[0]
    onehot = np.eye(C)[a["y"]]
    test = np.arange(n - 100, n)
    parts = {
        "x": sp.csr_matrix(a["x"][:30]),
        "y": onehot[:30],
        "allx": sp.csr_matrix(a["x"][: n - 100]),
        "ally": onehot[: n - 100],
        "tx": sp.csr_matrix(a["x"][test]),
        "ty": onehot[test],
        "graph": {i: [] for i in range(n)},
    }
    for s, d in a["edge_index"].T:
        parts["graph"][int(s)].append(int(d))
    folder.mkdir(parents=True)
    for name, value in parts.items():
        (folder / f"ind.{prefix}.{name}").write_bytes(pickle.dumps(value))
    (folder / f"ind.{prefix}.test.index").write_text("\n".join(map(str, test)) + "\n")


def test_a_librarys_own_dataset_class_by_name_on_the_command_line(tmp_path):
    a = arrays(n=700)
    write_planetoid(tmp_path / "root" / "pyg" / "Planetoid" / "Cora" / "raw", "cora", a)
    # DGL keeps a dataset in a folder named after its download address: cora_v2_<sha1(url)[:8]>.
    url = dgl.data.utils._get_dgl_url(dgl.data.CitationGraphDataset._urls["cora_v2"])
    dgl_folder = f"cora_v2_{hashlib.sha1(url.encode()).hexdigest()[:8]}"
    write_planetoid(tmp_path / "root" / "dgl" / "CoraGraphDataset" / dgl_folder, "cora_v2", a)
    common = ["--set", "dataset.root=root", "--set", "train.epochs=2", "--quiet"]
    for dataset, extra in (("pyg:Planetoid", ["--set", "dataset.options.name=Cora"]), ("dgl:CoraGraphDataset", [])):
        out = dataset.split(":")[0]
        done = helpers.in_process("train", "--dataset", dataset, *extra, *common, "--out", out, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        result = json.loads((tmp_path / out / "results.json").read_text())
        assert result["dataset"]["name"] == dataset and result["dataset"]["train"] == 30  # the library's split
        assert result["dataset"]["val"] == 500 and result["dataset"]["test"] == 100
        scored = helpers.ok(helpers.in_process("evaluate", out, "--json", cwd=tmp_path))  # a deterministic class
        assert json.loads(scored.stdout)["metrics"] == result["best"]["metrics"]  # ... gives its pinned data again
    wrong = helpers.in_process("train", "--dataset", "pyg:Planetoidd", "--out", "x", cwd=tmp_path)
    assert wrong.returncode != 0 and "did you mean 'pyg:Planetoid'" in wrong.stderr and not (tmp_path / "x").exists()
    missing = helpers.in_process("train", "--dataset", "pyg:Planetoid", *common, "--out", "y", cwd=tmp_path)
    assert "missing a required argument: 'name'" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1


def empty_cases() -> list[tuple]:
    """Graphs whose arrays are empty, each as a user builds it, the arrays its .npz holds, the
    backend and the settings it trains with."""
    rng = np.random.default_rng(4)
    n, y = 24, np.tile(np.arange(2), 12)
    x = (rng.normal(size=(n, 3)) + y[:, None]).astype(np.float32)
    none = torch.empty(2, 0, dtype=torch.long)
    data = Data(x=torch.from_numpy(x), edge_index=none, y=torch.from_numpy(y))
    g = dgl.graph((torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long)), num_nodes=n)
    g.ndata["feat"], g.ndata["label"] = torch.from_numpy(x), torch.from_numpy(y)
    homogeneous = {"x": x, "edge_index": np.zeros((2, 0), np.int64), "y": y}
    cites = rng.integers(0, n, (2, 60))
    hetero = HeteroData()
    hetero["paper"].x, hetero["paper"].y = torch.from_numpy(x), torch.from_numpy(y)
    hetero["author"].num_nodes = 5
    hetero["paper", "cites", "paper"].edge_index = torch.from_numpy(cites)
    hetero["author", "writes", "paper"].edge_index = none  # a relation with no edges yet
    typed = {
        "x__paper": x, "y__paper": y, "num_nodes__author": np.array([5]),
        "edge_index__paper__cites__paper": cites, "edge_index__author__writes__paper": np.zeros((2, 0), np.int64),
    }  # fmt: skip
    graphs = [Data(x=torch.from_numpy(x[i : i + 3]), edge_index=none, y=torch.tensor([i % 2])) for i in range(0, 24, 3)]
    collection = {
        "x": x, "edge_index": np.zeros((2, 0), np.int64), "y": np.arange(8) % 2, "node_ptr": np.arange(0, 25, 3),
    }  # fmt: skip
    return [
        ("data", data, homogeneous, "pyg", []),
        ("dglgraph", g, homogeneous, "dgl", []),
        ("hetero", hetero, typed, "pyg", []),
        ("graphs", graphs, collection, "pyg", ["task=graph", "model.arch=gin", "train.batch_size=4"]),
    ]


def test_graphs_with_empty_arrays_train_and_predict_as_their_npz_does(tmp_path):
    """No edges, a relation with no edges, graphs without edges: what the .npz of the same arrays
    trains to, the object trains to, and predict on the object scores it as on the file."""
    for name, obj, arrays_of, backend, settings in empty_cases():
        np.savez(tmp_path / f"{name}.npz", **arrays_of)
        from_file = run(tmp_path, tmp_path / f"{name}.npz", backend, f"{name}-file", *settings)
        from_obj = run(tmp_path, obj, backend, name, *settings)
        assert from_obj["metrics"] == from_file["metrics"], name
        on_obj = gnnbridge.predict(tmp_path / name, dataset=obj)
        assert same(on_obj, gnnbridge.predict(tmp_path / f"{name}-file", dataset=tmp_path / f"{name}.npz")), name


def test_what_empty_arrays_cannot_train_is_refused_in_the_words_of_the_npz(tmp_path):
    """x with no columns, a link task on a graph without edges: one line, the .npz's, said of the
    object (not of the file it was kept in); predict on such a graph is refused alike."""
    a = arrays()
    no_columns = pyg_data(a)
    no_columns.x = torch.empty(N, 0)
    no_edges = Data(x=torch.from_numpy(a["x"]), edge_index=torch.empty(2, 0, dtype=torch.long), y=no_columns.y)
    cases = (
        ("columns", no_columns, {**a, "x": np.zeros((N, 0), np.float32)}, []),
        ("edges", no_edges, {**a, "edge_index": np.zeros((2, 0), np.int64)}, ["task=link"]),
    )
    for name, obj, arrays_of, settings in cases:
        np.savez(tmp_path / f"{name}.npz", **arrays_of)
        with pytest.raises(GnnBridgeError) as from_file:
            run(tmp_path, tmp_path / f"{name}.npz", "pyg", f"{name}-file", *settings)
        with pytest.raises(GnnBridgeError) as from_obj:
            run(tmp_path, obj, "pyg", name, *settings)
        assert str(from_obj.value) == f"dataset (a Data): {str(from_file.value).split(': ', 1)[1]}", name
        assert not (tmp_path / name).exists() and not (tmp_path / f"{name}-file").exists()
    assert "x has 0 feature columns; give every node at least one feature" in refusal(no_columns)
    assert "has 0 distinct edges; link prediction needs at least 3" in str(from_obj.value)
    run(tmp_path, pyg_data(a), "pyg", "trained")
    with pytest.raises(GnnBridgeError, match="x has 0 feature columns"):
        gnnbridge.predict(tmp_path / "trained", dataset=no_columns)
    wider = Data(x=torch.ones(N, F + 1), edge_index=no_edges.edge_index)
    with pytest.raises(
        GnnBridgeError, match=rf"^dataset \(a Data\) has num_features={F + 1} but the model in .* with {F}; give"
    ):
        gnnbridge.predict(tmp_path / "trained", dataset=wider)  # said of the object, not of a file to point at


def test_a_users_tensors_are_named_with_their_field_and_the_fix(data_root):
    """What is wrong with a user's own tensor is said of their object and its field, not as
    numpy's or torch's error inside a graph reader; a numpy array is read as its tensor."""
    a = arrays()
    on_meta = pyg_data(a)
    on_meta.x = torch.empty(N, F, device="meta")
    assert refusal(on_meta) == (
        "dataset (a torch_geometric Data): x is on the meta device (a shape without values); give a tensor that "
        "holds its values (built on the CPU or a GPU, not under torch.device('meta'))."
    )
    more_nodes = pyg_data(a)
    more_nodes.num_nodes = N + 10
    assert refusal(more_nodes) == (
        f"dataset (a torch_geometric Data) has num_nodes={N + 10} but x has {N} rows; give x one row per node "
        f"(or set num_nodes = {N})."
    )
    graphs = [
        Data(x=torch.ones(3, 4 + (i > 0)), edge_index=torch.tensor([[0], [1]]), y=torch.tensor([i % 2]))
        for i in range(3)
    ]
    assert refusal(graphs) == (
        "dataset (a list of 3 graphs)[1] has x of 5 feature columns but graph 0 has 4; give every graph features "
        "of one width."
    )
    pairs = [(dgl.graph(([0], [1]), num_nodes=3), torch.tensor(i % 2)) for i in range(3)]
    for i, (g, _) in enumerate(pairs):
        g.ndata["feat"] = torch.ones(3, 2 + (i == 2))
    assert "Pairs of 3 graphs)[2] has x of 3 feature columns but graph 0 has 2" in refusal(helpers.dgl_pairs(pairs))
    assert not (data_root / "in-memory").exists() or not list((data_root / "in-memory").iterdir())
    as_numpy = pyg_data(a)
    as_numpy.x, as_numpy.edge_index = a["x"], a["edge_index"]
    assert as_dataset(as_numpy) == as_dataset(pyg_data(a))


FAKE = ["--dataset", "pyg:FakeDataset", "--set", "dataset.options.avg_num_nodes=60"]
FAKE += ["--set", "dataset.options.num_channels=4", "--set", "dataset.options.num_classes=3"]


def test_a_library_class_that_draws_at_random_is_pinned_to_what_its_run_trained_on(tmp_path):
    """PyG's FakeDataset draws new graphs on every build: it is built under the run's seed, so
    evaluate scores the run's own graph, and what it gave is pinned (dataset.digest): other data
    (other options, another seed) is refused in one line by evaluate, predict and --resume."""
    quick = ["--set", "train.epochs=2", "--quiet"]
    helpers.ok(helpers.in_process("train", *FAKE, *quick, "--out", "fake", cwd=tmp_path))
    results = json.loads((tmp_path / "fake" / "results.json").read_text())
    scored = json.loads(helpers.ok(helpers.in_process("evaluate", "fake", "--json", cwd=tmp_path)).stdout)
    assert scored["metrics"] == results["best"]["metrics"]  # the graph it trained on, drawn again
    digest = yaml.safe_load((tmp_path / "fake" / "config.yaml").read_text())["dataset"]["digest"]
    assert len(digest) == 20 and int(digest, 16) >= 0
    other = ["--set", "dataset.options.avg_num_nodes=70"]
    for command in (("evaluate", "fake", *other), ("predict", "fake", "--out", "p.npz", *other)):
        helpers.one_line(helpers.in_process(*command, cwd=tmp_path), "gave other data than the run was trained on")
    assert not (tmp_path / "p.npz").exists()
    more = ["--set", "train.epochs=3", "--quiet"]
    refused = helpers.in_process("train", "--resume", "fake", "--set", "train.seed=5", *more, cwd=tmp_path)
    helpers.one_line(refused, "train.seed=5 differs from the checkpoint's 0, but --resume keeps")  # (it draws the data)
    anyway = helpers.in_process("evaluate", "fake", *other, "--set", "dataset.digest=", "--json", cwd=tmp_path)
    assert json.loads(helpers.ok(anyway).stdout)["metrics"] != scored["metrics"]
    helpers.ok(helpers.in_process("train", "--resume", "fake", *more, cwd=tmp_path))
    # A restarted job's ranks open the data from the command's config, which pins nothing yet.
    command = resolve_config(None, dataset="pyg:FakeDataset", overrides=FAKE[3::2])
    restarted = Plan(command).after_restart(tmp_path / "fake", 1, "a rank died")
    restarted.config.dataset.options["avg_num_nodes"] = 70  # its class gave other data this time
    with pytest.raises(CheckpointError, match=f"than run '{tmp_path / 'fake'}' was trained on \\({digest}\\)"):
        restarted.check_same_data(load_dataset(restarted.config))


def test_a_library_classs_options_are_checked_by_name_before_it_runs(tmp_path):
    def refused(needle: str, *settings: str) -> None:
        options = [arg for setting in settings for arg in ("--set", f"dataset.options.{setting}")]
        helpers.one_line(helpers.in_process("train", *FAKE, *options, "--out", "x", cwd=tmp_path), needle)
        assert not (tmp_path / "x").exists()

    refused(
        "dataset.options.avg_num_nodes='1e9' has the wrong type for dataset 'pyg:FakeDataset': expected int; its "
        "default is 1000.",
        "avg_num_nodes=1e9",
    )
    refused("dataset.options.is_undirected='maybe' has the wrong type", "is_undirected=maybe")
    refused("Dataset 'pyg:FakeDataset' refused dataset.options avg_num_nodes=60, num_channels=4, num_classes=3, "
            "task='edges' (AssertionError); see torch_geometric.datasets.FakeDataset", "task=edges")  # fmt: skip
    refused(
        "Dataset 'pyg:FakeDataset' does not fit in this machine's memory with dataset.options",
        "avg_num_nodes=" + "9" * 15,
    )


def test_a_library_classs_incomplete_masks_can_be_left_for_a_drawn_split(tmp_path):
    """PyG's KarateClub marks only train_mask: its masks cannot be completed from the command
    line, so the refusal offers dataset.splits=drawn, which draws the seeded split instead (for
    a graph object or a .npz alike); set for a dataset that keeps its own splits, it is refused."""
    karate = ["--dataset", "pyg:KarateClub", "--set", "train.epochs=1", "--quiet"]
    helpers.one_line(
        helpers.in_process("train", *karate, "--out", "k", cwd=tmp_path),
        "dataset 'pyg:KarateClub' (a torch_geometric Data) has train_mask but not all of train_mask, val_mask, "
        "test_mask; give all three, or none (gnnbridge then draws a seeded 60/20/20 split; --set "
        "dataset.splits=drawn draws it, leaving these out).",
    )
    helpers.ok(helpers.in_process("train", *karate, "--set", "dataset.splits=drawn", "--out", "k", cwd=tmp_path))
    summary = json.loads((tmp_path / "k" / "results.json").read_text())["dataset"]
    assert summary["train"] == 20 and summary["val"] + summary["test"] == 14  # all 34 nodes, split 60/20/20
    helpers.ok(helpers.in_process("evaluate", "k", cwd=tmp_path))
    a = arrays()
    partial = pyg_data(a)
    del partial.test_mask
    np.savez(tmp_path / "partial.npz", **{k: v for k, v in a.items() if k != "test_idx"})
    for dataset in (partial, tmp_path / "partial.npz"):
        result = run(tmp_path, dataset, "pyg", f"drawn-{type(dataset).__name__}", "dataset.splits=drawn")
        assert result["dataset"]["train"] == 180  # 60% of 300: gnnbridge's split, not the data's 150
    helpers.one_line(
        helpers.in_process("train", "--set", "dataset.splits=drawn", "--out", "s", cwd=tmp_path),
        "dataset 'synthetic' keeps its own: leave dataset.splits=given.",
    )


# --------------------------------------------------------------------------- the user's own model


class PygSAGE(torch.nn.Module):
    """GraphSAGE as a PyG user writes it, for full-batch training."""

    def __init__(self, d_in, hidden, d_out):
        super().__init__()
        self.conv1, self.conv2 = PygSAGEConv(d_in, hidden), PygSAGEConv(hidden, d_out)

    def forward(self, x, edge_index):
        return self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)


class PygGINE(torch.nn.Module):
    """GINE as a PyG user writes it: forward(x, edge_index, edge_attr), GINEConv reading each edge's features."""

    def __init__(self, d_in, d_edge, hidden, d_out):
        super().__init__()
        nn = torch.nn
        mlp = lambda d: nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, hidden))  # noqa: E731
        self.conv1, self.conv2 = GINEConv(mlp(d_in), edge_dim=d_edge), GINEConv(mlp(hidden), edge_dim=d_edge)
        self.out = torch.nn.Linear(hidden, d_out)

    def forward(self, x, edge_index, edge_attr):
        h = torch.relu(self.conv1(x, edge_index, edge_attr))
        return self.out(self.conv2(h, edge_index, edge_attr))


def test_a_pyg_model_that_takes_edge_attr_is_given_each_batchs_edge_features(tmp_path):
    """Classes only the in-edges' features explain (the sign of their first column's sum): a
    GINEConv model handed over learns them, so it got each sampled edge's own row; on a graph
    without edge features it is refused in one line, before anything is written."""
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, N, 8 * N), rng.integers(0, N, 8 * N)
    attr = rng.normal(size=(8 * N, 3)).astype(np.float32)
    score = np.zeros(N)
    np.add.at(score, dst, attr[:, 0])
    x, ei = torch.from_numpy(rng.normal(size=(N, F)).astype(np.float32)), torch.from_numpy(np.stack([src, dst]))
    y = torch.from_numpy((score > 0).astype(np.int64))
    graph = Data(x=x, edge_index=ei, edge_attr=torch.from_numpy(attr), y=y)
    result = run(tmp_path, graph, None, "gine", "train.epochs=8", "train.batch_size=32", model=PygGINE(F, 3, 32, 2))
    assert result["metrics"]["test_acc"] > 0.8, result["metrics"]  # the node features alone: chance, 0.5
    with pytest.raises(GnnBridgeError, match=re.escape("has forward(x, edge_index, edge_attr), which takes each")):
        run(tmp_path, Data(x=x, edge_index=ei, y=y), None, "none", model=PygGINE(F, 3, 32, 2))
    assert not (tmp_path / "none").exists()


class DglGraphSAGE(torch.nn.Module):
    """GraphSAGE as a DGL user writes it for a whole graph: forward(g, x)."""

    def __init__(self, d_in, hidden, d_out):
        super().__init__()
        self.conv1, self.conv2 = DglSAGEConv(d_in, hidden, "mean"), DglSAGEConv(hidden, d_out, "mean")

    def forward(self, g, x):
        return self.conv2(g, torch.relu(self.conv1(g, x)))


class DglBlocksSAGE(DglGraphSAGE):
    """The same for DGL's sampled training: forward(blocks, x), a block per layer."""

    def forward(self, blocks, x):
        return self.conv2(blocks[1], torch.relu(self.conv1(blocks[0], x)))


@pytest.mark.slow
def test_a_pyg_users_model_instance_trains_on_two_ranks_and_its_run_works_everywhere(tmp_path):
    a = arrays()
    result = run(tmp_path, pyg_data(a), None, "mine", "train.epochs=3", model=PygSAGE(F, 32, C), nproc=2)
    assert result["backend"] == "pyg" and result["world_size"] == 2  # the library its idiom names
    assert result["metrics"]["test_acc"] > 0.6, result["metrics"]
    # Another process rebuilds it from the run, once trusted: the saved instance holds code.
    refused = helpers.in_process("evaluate", "mine", cwd=tmp_path)
    assert refused.returncode != 0 and "--trust-code" in refused.stderr and len(refused.stderr.splitlines()) == 1
    report = helpers.in_process("evaluate", "mine", "--trust-code", "--json", cwd=tmp_path)
    assert json.loads(report.stdout)["metrics"] == result["metrics"], report.stderr
    with pytest.raises(GnnBridgeError, match=re.escape("load and port do that only with trust_code=True.")):
        gnnbridge.load(tmp_path / "mine", kind="latest")  # from Python: the keyword, not the flag
    model = gnnbridge.load(tmp_path / "mine", kind="latest", trust_code=True)
    assert type(model).__name__ == "PygSAGE" and not model.training  # their class back, trained
    outputs = gnnbridge.predict(tmp_path / "mine", kind="latest", trust_code=True)
    with torch.no_grad():
        logits = model(torch.from_numpy(a["x"]), torch.from_numpy(a["edge_index"]))
    assert torch.allclose(logits, torch.from_numpy(outputs["logits"]), atol=1e-5)
    resumed = gnnbridge.run(resume=tmp_path / "mine", overrides=["train.epochs=4"], progress=False)
    assert len(resumed["history"]) == 4 and resumed["history"][:3] == result["history"]
    ported = helpers.in_process("port", "mine", "--to", "dgl", "--out", "moved", "--trust-code", cwd=tmp_path)
    assert ported.returncode != 0 and "which backend 'dgl' does not train" in ported.stderr
    assert len(ported.stderr.splitlines()) == 1 and not (tmp_path / "moved").exists()


@pytest.mark.parametrize("cls", [DglGraphSAGE, DglBlocksSAGE])
def test_a_dgl_users_model_instance_trains_in_either_idiom(tmp_path, cls):
    result = run(tmp_path, dgl_graph(arrays()), None, "mine", "train.epochs=3", model=cls(F, 32, C))
    assert result["backend"] == "dgl" and result["metrics"]["test_acc"] > 0.6, result["metrics"]
    assert type(gnnbridge.load(tmp_path / "mine", trust_code=True)) is cls


class Unknown(torch.nn.Module):
    def forward(self, features, adjacency):
        return features


def test_a_model_in_no_known_idiom_or_on_the_other_library_is_one_line(tmp_path):
    a = arrays()
    with pytest.raises(GnnBridgeError, match=r"forward\(features, adjacency\)\) is in no library's idiom"):
        run(tmp_path, pyg_data(a), None, "x", model=Unknown())
    with pytest.raises(GnnBridgeError, match="is written for pyg, not --backend dgl; use --backend pyg"):
        run(tmp_path, pyg_data(a), "dgl", "y", model=PygSAGE(F, 8, C))
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def mlp(d_in, hidden):
    return torch.nn.Sequential(torch.nn.Linear(d_in, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden))


class PygGIN(torch.nn.Module):
    """Graph classification as PyG's tutorials write it: pool each graph's nodes by ``batch``."""

    def __init__(self, d_in, hidden, d_out):
        super().__init__()
        self.conv1, self.conv2 = GINConv(mlp(d_in, hidden)), GINConv(mlp(hidden, hidden))
        self.out = torch.nn.Linear(hidden, d_out)

    def forward(self, x, edge_index, batch):
        h = self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)
        return self.out(global_add_pool(h, batch))


class DglGIN(torch.nn.Module):
    """The same as DGL's tutorials write it: forward(g, x) on a batched graph, a readout per graph."""

    def __init__(self, d_in, hidden, d_out):
        super().__init__()
        self.conv1, self.conv2 = dgl.nn.GINConv(mlp(d_in, hidden), "sum"), dgl.nn.GINConv(mlp(hidden, hidden), "sum")
        self.out = torch.nn.Linear(hidden, d_out)

    def forward(self, g, x):
        g.ndata["h"] = self.conv2(g, torch.relu(self.conv1(g, x)))
        return self.out(dgl.sum_nodes(g, "h"))


GRAPHS = ["task=graph", "dataset.options.num_graphs=600", "train.batch_size=32", "train.epochs=8", "train.lr=0.01"]


@pytest.mark.parametrize("cls, nproc", [(PygGIN, 2), (DglGIN, 1)])
def test_a_users_graph_classification_model_trains_as_its_library_batches_graphs(tmp_path, cls, nproc):
    torch.manual_seed(0)
    result = run(tmp_path, "gin-synthetic", None, "mine", *GRAPHS, model=cls(1, 32, 3), nproc=nproc)
    assert result["task"] == "graph" and result["world_size"] == nproc
    assert result["best"]["metrics"]["test_acc"] > 0.8, result["best"]  # chance: 1/3
    outputs = gnnbridge.predict(tmp_path / "mine", trust_code=True)
    assert outputs["logits"].shape == (600, 3)
    report = gnnbridge.evaluate(tmp_path / "mine", trust_code=True)
    assert report["metrics"]["test_acc"] == result["best"]["metrics"]["test_acc"]
    assert type(gnnbridge.load(tmp_path / "mine", trust_code=True)) is cls


def test_a_node_model_cannot_train_graph_classification_and_says_what_can(tmp_path):
    with pytest.raises(GnnBridgeError, match=r"forward\(x, edge_index\), which cannot pool a batch of graphs"):
        run(tmp_path, "gin-synthetic", None, "x", *GRAPHS, model=PygSAGE(1, 8, 3))
    with pytest.raises(
        GnnBridgeError, match=r"forward\(blocks, x\), which cannot pool.*PyG's forward\(x, edge_index, batch\)"
    ):
        run(tmp_path, "gin-synthetic", None, "y", *GRAPHS, model=DglBlocksSAGE(1, 8, 3))
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


SCRIPT = """
import numpy as np, torch, gnnbridge
from torch_geometric.nn import SAGEConv

class InMain(torch.nn.Module):  # defined in the script itself: ranks cannot import it by name
    def __init__(self):
        super().__init__()
        self.conv = SAGEConv(6, 3)

    def forward(self, x, edge_index):
        return self.conv(x, edge_index)

if __name__ == "__main__":
    results = gnnbridge.run(dataset="graph.npz", model=InMain(), nproc=2, out="run",
                            overrides=["train.epochs=1", "train.batch_size=64"], progress=False)
    print(results["backend"], results["world_size"])
"""


@pytest.mark.slow
def test_a_class_defined_in_a_script_trains_on_two_ranks_and_is_evaluated_by_another_process(tmp_path):
    np.savez(tmp_path / "graph.npz", **arrays())
    (tmp_path / "script.py").write_text(SCRIPT)
    env = {**helpers.ENV, "GNNBRIDGE_DATA": str(tmp_path / "data-root")}
    done = subprocess.run(
        [sys.executable, "script.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0 and done.stdout.split() == ["pyg", "2"], done.stderr[-3000:]
    report = helpers.gnnbridge("evaluate", "run", "--trust-code", cwd=tmp_path, env=env)
    assert report.returncode == 0 and "test_acc" in report.stdout, report.stderr


def test_pygs_zoo_class_by_path_is_the_zoo_model_and_its_own_arguments_are_not_overridden(tmp_path, refused):
    """model.arch=torch_geometric.nn.models:GraphSAGE builds what model.arch=GraphSAGE builds (its
    own constructor arguments filled from the data and model.*), and an option gnnbridge fills is
    one line naming the key to set instead, never a silent override."""
    a = arrays()
    by_name = run(tmp_path, pyg_data(a), "pyg", "name", "model.arch=GraphSAGE", "model.options.jk=cat")
    by_path = run(
        tmp_path, pyg_data(a), "pyg", "path", "model.arch=torch_geometric.nn.models:GraphSAGE", "model.options.jk=cat"
    )
    assert by_path["metrics"] == by_name["metrics"]
    assert [h["loss"] for h in by_path["history"]] == [h["loss"] for h in by_name["history"]]
    np.savez(tmp_path / "g.npz", **a)
    twice = refused(
        "train", "--dataset", "g.npz", "--set", "model.arch=GraphSAGE", "--set", "model.options.num_layers=3"
    )
    assert "model.options.num_layers of GraphSAGE is set by gnnbridge from model.layers" in twice.stderr
    other = refused(
        "train", "--dataset", "g.npz", "--backend", "dgl", "--set", "model.arch=torch_geometric.nn.models:GCN"
    )
    assert "is model 'GCN' of backend pyg, not 'dgl'; use --backend pyg" in other.stderr
