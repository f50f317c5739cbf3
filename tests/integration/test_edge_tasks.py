"""Edge tasks (``task: edge``): a label per given edge, on a homogeneous and a heterogeneous
``.npz``, trained on both libraries with 2 ranks. What a user would notice: the model learns
the rule the labels follow, ``predict`` writes a row per edge in the order the file gave the
edges and its figures are the run's own, both libraries train the same batches, the final
evaluation is exact (layer-wise equals every neighbour sampled) and no training batch sees its
own edges; bad input is one line."""

from __future__ import annotations

import helpers
import numpy as np
import pytest
import torch

import gnnbridge
from gnnbridge.core.app.compare import same_batches
from gnnbridge.core.errors import GnnBridgeError
from gnnbridge.core.plugins import get_target
from gnnbridge.core.records.hetero import HeteroSource
from gnnbridge.core.records.reading import Reading
from gnnbridge.core.sampling.hetero import CoreHeteroSampler, HeteroStore, typed_fanouts
from gnnbridge.core.storage.folder import open_prepared
from gnnbridge.core.storage.formats import graph_from_arrays
from gnnbridge.core.tasks import for_edge_task

pytestmark = pytest.mark.slow
N, F, E = 300, 6, 2400
BACKENDS = ("pyg", "dgl")


def homogeneous(seed: int = 0) -> dict[str, np.ndarray]:
    """A directed graph whose edges carry one of three classes, a rule of both ends' features."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, F)).astype(np.float32)
    src, dst = rng.integers(0, N, E), rng.integers(0, N, E)
    label = (x[src, 0] + x[dst, 1] > 0).astype(np.int64) + (x[src, 2] - x[dst, 3] > 1).astype(np.int64)
    return {"x": x, "edge_index": np.stack([src, dst]).astype(np.int64), "edge_label": label}


def ratings(seed: int = 1) -> dict[str, np.ndarray]:
    """Users rate items (a value each, from both ends' features) beside item-item edges; the
    file gives its own splits of the ratings."""
    rng = np.random.default_rng(seed)
    users, items = 200, 120
    xu, xi = rng.normal(size=(users, F)).astype(np.float32), rng.normal(size=(items, F)).astype(np.float32)
    src, dst = rng.integers(0, users, E), rng.integers(0, items, E)
    value = (xu[src, :3] * xi[dst, :3]).sum(1) + 0.5 * xu[src, 3]
    order, rel = rng.permutation(E), "user__rates__item"
    return {
        "x__user": xu,
        "x__item": xi,
        f"edge_index__{rel}": np.stack([src, dst]).astype(np.int64),
        f"edge_label__{rel}": value.astype(np.float32),
        f"edge_train_idx__{rel}": order[: E * 7 // 10],
        f"edge_val_idx__{rel}": order[E * 7 // 10 : E * 17 // 20],
        f"edge_test_idx__{rel}": order[E * 17 // 20 :],
        "edge_index__item__similar__item": rng.integers(0, items, (2, 600)).astype(np.int64),
    }


_RUNS: dict[str, dict] = {}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("edges")
    np.savez(root / "edges.npz", **homogeneous())
    np.savez(root / "ratings.npz", **ratings())
    return root


def trained(files, backend: str) -> dict:
    """Edge classification of ``edges.npz`` on ``backend`` with 2 ranks (once per module)."""
    if backend not in _RUNS:
        _RUNS[backend] = gnnbridge.run(
            dataset=files / "edges.npz", backend=backend, nproc=2, out=files / f"run-{backend}", progress=False,
            overrides=["task=edge", "train.epochs=4", "train.batch_size=128", "train.lr=0.01"],
        )  # fmt: skip
    return _RUNS[backend]


@pytest.mark.xdist_group("test_edge_tasks")
@pytest.mark.parametrize("backend", BACKENDS)
def test_edge_classification_learns_and_predicts_each_edge_in_the_files_order(files, backend):
    results = trained(files, backend)
    given = np.load(files / "edges.npz")["edge_label"]
    majority = np.bincount(given).max() / given.size
    assert results["metrics"]["test_acc"] > majority + 0.1, results["metrics"]  # learned the rule, not the prior
    assert results["eval"]["final"] == "layerwise"  # the typed layer-wise pass scores every edge
    out = gnnbridge.predict(files / f"run-{backend}")  # best.pt: the weights results.json scored
    assert out["logits"].shape == (E, 3)
    np.testing.assert_array_equal(out["y"], given)  # row i is column i of the file's edge_index
    test = out["test_idx"]
    assert (out["logits"][test].argmax(1) == given[test]).mean() == pytest.approx(results["metrics"]["test_acc"])


@pytest.mark.xdist_group("test_edge_tasks")
def test_layerwise_evaluation_equals_every_neighbour_sampled(files):
    trained(files, "dgl")
    layerwise = gnnbridge.evaluate(files / "run-dgl")["metrics"]
    full = gnnbridge.evaluate(files / "run-dgl", overrides=["eval.mode=full"])["metrics"]
    assert full == pytest.approx(layerwise, abs=1e-6)


def test_both_libraries_train_the_same_batches_to_the_same_losses(files):
    settings = ["task=edge", "target=regression", "model.arch=rgcn", "train.batch_size=256"]
    report = same_batches(dataset=str(files / "ratings.npz"), epochs=1, overrides=settings)
    assert report["agree"] and report["pairs"][0]["steps"] > 1, report


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_heterogeneous_rating_regression_keeps_the_files_splits(files, tmp_path, backend):
    """On PyG from the folder ``gnnbridge prepare`` made of the file (its edge labels and splits
    carried), on DGL from the ``.npz`` itself."""
    arrays = ratings()
    dataset = files / "ratings.npz"
    if backend == "pyg":
        dataset = tmp_path / "ratings"
        helpers.ok(helpers.gnnbridge("prepare", str(files / "ratings.npz"), "--out", str(dataset), "--quiet",
                                     cwd=tmp_path))  # fmt: skip
    results = gnnbridge.run(dataset=dataset, backend=backend, target="regression", nproc=1,
                            overrides=["task=edge", "train.epochs=5", "train.batch_size=128", "train.lr=0.01"],
                            out=tmp_path / "run", progress=False)  # fmt: skip
    assert results["metrics"]["test_r2"] > 0.3, results["metrics"]
    out = gnnbridge.predict(tmp_path / "run")
    rel = "user__rates__item"
    np.testing.assert_array_equal(out["test_idx"], np.sort(arrays[f"edge_test_idx__{rel}"]))
    test = out["test_idx"]
    scores = get_target("regression").scores(1)
    scores.update(torch.from_numpy(out["logits"][test]), torch.from_numpy(arrays[f"edge_label__{rel}"][test]))
    assert scores.as_metrics("test") == pytest.approx({k: v for k, v in results["metrics"].items() if "test" in k})
    # the same ratings, their labels and splits left out: predict scores them as they are given
    unlabelled = {
        k: v for k, v in arrays.items() if not k.startswith(("edge_label", "edge_train", "edge_val", "edge_test"))
    }
    np.savez(tmp_path / "new.npz", **unlabelled)
    new = gnnbridge.predict(tmp_path / "run", dataset=tmp_path / "new.npz")
    assert set(new) == {"logits"} and np.allclose(new["logits"], out["logits"], atol=1e-5)
    np.savez(tmp_path / "other.npz", **{k: v for k, v in unlabelled.items() if "rates" not in k})
    with pytest.raises(GnnBridgeError, match=r"no \(user,rates,item\) edges, the edge type this run's model scores"):
        gnnbridge.predict(tmp_path / "run", kind="latest", dataset=tmp_path / "other.npz")


def test_a_training_batch_never_samples_its_own_edges_or_their_mirrors():
    arrays = ratings()
    rel = ("user", "rates", "item")
    source = HeteroSource(
        {"user": 200, "item": 120},
        {"user": torch.from_numpy(arrays["x__user"]), "item": torch.from_numpy(arrays["x__item"])},
        {rel: torch.from_numpy(arrays["edge_index__user__rates__item"])},
        target_edge=rel,
        edge_y=torch.from_numpy(arrays["edge_label__user__rates__item"]),
    )
    data = for_edge_task(source, reverse=True, seed=0, reading="regression")
    rev = data.reverse_edge
    assert rev == ("item", "rev_rates", "user")
    sampler = CoreHeteroSampler(HeteroStore(data), typed_fanouts(data, [-1, -1], {}), lambda sub: sub, negatives=0)
    sampler.reseed(0, 0, 0)
    batch = data.split("train")[:64]
    (mb,) = sampler.loader([batch])
    sub = mb.graph
    assert not torch.isin(sub.edge[rel], batch).any()
    assert not torch.isin(sub.edge[rev], data.reverse_eid[batch]).any()
    # with every neighbour, all the rest of each end's edges are there
    src, dst = data.edge_index[rel][:, batch]
    around = torch.isin(data.edge_index[rel][1], dst) & ~torch.isin(torch.arange(E), batch)
    assert torch.isin(around.nonzero().flatten(), sub.edge[rel]).all()
    (scored,) = sampler.edges_loader([batch])  # evaluation leaves nothing out
    assert torch.isin(batch, scored.graph.edge[rel]).all()


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda a: a.pop("edge_label"), "has no edge labels"),
        (lambda a: a.update(edge_label=a["edge_label"][:-1]), "edge_label has 2399 labels for 2400 edges"),
        (
            lambda a: a.update(
                edge_train_idx=np.arange(10), edge_val_idx=np.arange(10, 20), edge_test_idx=np.array([5000])
            ),
            "edge_test_idx",
        ),  # fmt: skip
        (lambda a: a.update(edge_label=a["edge_label"].astype(np.float32)), "edge_label"),
        (lambda a: a.update(edge_label=a["edge_label"] + 1), "bad.npz: edge_label has labels up to 3 but no 0"),
    ],
)
def test_bad_edge_input_is_one_line(tmp_path, change, needle):
    arrays = homogeneous()
    arrays["y"] = np.arange(N, dtype=np.int64) % 2  # node labels too: task=node would read them
    change(arrays)
    helpers.refused_npz(tmp_path, arrays, needle, "task=edge")


def test_a_graph_without_node_or_edge_labels_is_told_of_the_edge_labels_an_edge_task_reads(tmp_path):
    """An edge task reads no node labels (its family says so): an .npz of features and edges
    alone is refused for the edge labels it lacks, not for a y it may leave out."""
    arrays = homogeneous()
    np.savez(tmp_path / "g.npz", x=arrays["x"], edge_index=arrays["edge_index"])
    proc = helpers.in_process("train", "--dataset", "g.npz", "--set", "task=edge", "--out", "run", cwd=tmp_path)
    helpers.one_line(proc, f"Dataset '{tmp_path / 'g.npz'}' has no edge labels; task=edge reads edge_label")
    assert not (tmp_path / "run").exists()


def test_a_typed_files_bad_edge_label_is_named_as_the_file_names_it_at_the_users_column(tmp_path):
    """The member's name, and the column of edge_index (not the record's sorted order)."""
    arrays = ratings()
    column = int(np.argmax(arrays["edge_index__user__rates__item"][1]))  # the last once sorted by destination
    arrays["edge_label__user__rates__item"][column] = np.inf
    helpers.refused_npz(
        tmp_path, arrays, f"edge_label__user__rates__item holds an infinite value (first at (user,rates,item) edge "
        f"{column})", "task=edge", "target=regression",
    )  # fmt: skip


def test_a_graph_objects_bad_edge_labels_are_named_as_its_library_names_them(tmp_path, monkeypatch):
    """What the user handed over and its own array (a ``Data``'s ``edge_label``, a ``DGLGraph``'s
    ``edata['label']``), never the file gnnbridge writes for it or ``y``; nothing is written. A
    graph without edge labels is named so too (not as lacking ``y``)."""
    from torch_geometric.data import Data, HeteroData

    from gnnbridge.backends.dgl.compat import import_dgl

    monkeypatch.setenv("GNNBRIDGE_DATA", str(tmp_path / "data"))
    a = homogeneous()
    x, ei, label = (torch.from_numpy(a[k]) for k in ("x", "edge_index", "edge_label"))
    g = import_dgl().graph((ei[0], ei[1]), num_nodes=N)
    g.ndata["feat"], g.edata["label"] = x, label + 1
    given = {
        "dataset (a torch_geometric Data): edge_label has labels up to 3 but no 0": Data(
            x=x, edge_index=ei, edge_label=label + 1
        ),
        "dataset (a DGLGraph): edata['label'] has labels up to 3 but no 0": g,
        "dataset (a torch_geometric Data): edge_label holds one class only (0)": Data(
            x=x, edge_index=ei, edge_label=torch.zeros_like(label)
        ),
    }
    for needle, graph in given.items():
        with pytest.raises(GnnBridgeError) as refused:
            gnnbridge.run(dataset=graph, overrides=["task=edge"], out=tmp_path / "run", progress=False)
        assert str(refused.value).startswith(needle), refused.value
    assert not (tmp_path / "run").exists() and not (tmp_path / "data").exists()
    hetero = HeteroData()
    hetero["user"].x, hetero["item"].x = x, x
    hetero["user", "rates", "item"].edge_index = ei
    unlabelled = {  # with node labels or without: what the edge task lacks
        "dataset (a Data) has no edge labels; task=edge reads edge_label": Data(
            x=x, edge_index=ei, y=torch.arange(N) % 2
        ),
        "dataset (a Data) has no edge labels": Data(x=x, edge_index=ei),
        "dataset (a HeteroData) has no edge labels": hetero,
    }
    for needle, graph in unlabelled.items():
        with pytest.raises(GnnBridgeError) as refused:
            gnnbridge.run(dataset=graph, overrides=["task=edge"], out=tmp_path / "run", progress=False)
        assert str(refused.value).startswith(needle), refused.value


@pytest.mark.xdist_group("test_edge_tasks")
def test_predict_scores_the_edges_of_a_new_graph_that_carries_no_labels(files, tmp_path):
    """A graph without edge labels (an ``.npz``, a PyG ``Data``) is scored edge by edge in the
    order it gives its edges: here the training graph's edges shuffled, whose rows are the run's
    own rows shuffled alike."""
    trained(files, "pyg")
    arrays, run = homogeneous(), files / "run-pyg"
    before = gnnbridge.predict(run)
    perm = np.random.default_rng(0).permutation(E)
    np.savez(tmp_path / "new.npz", x=arrays["x"], edge_index=arrays["edge_index"][:, perm])
    new = gnnbridge.predict(run, dataset=tmp_path / "new.npz")
    assert set(new) == {"logits", "probs", "pred"}
    np.testing.assert_allclose(new["logits"], before["logits"][perm], atol=1e-5)
    from torch_geometric.data import Data

    graph = Data(x=torch.from_numpy(arrays["x"]), edge_index=torch.from_numpy(arrays["edge_index"]))
    np.testing.assert_allclose(gnnbridge.predict(run, dataset=graph)["logits"], before["logits"], atol=1e-5)
    np.savez(tmp_path / "one.npz", x=arrays["x"], edge_index=arrays["edge_index"][:, 5:6])  # too few to split
    np.testing.assert_allclose(gnnbridge.predict(run, dataset=tmp_path / "one.npz")["logits"].shape, (1, 3))
    narrow = Data(x=graph.x[:, :2], edge_index=graph.edge_index)  # counted as the graph's, not its one node type's
    with pytest.raises(GnnBridgeError, match=f"has num_features=2 but the model in .* was trained with {F};"):
        gnnbridge.predict(run, dataset=narrow)


def test_a_homogeneous_model_is_refused_in_one_line(tmp_path):
    np.savez(tmp_path / "edges.npz", **homogeneous())
    proc = helpers.gnnbridge("train", "--dataset", str(tmp_path / "edges.npz"), "--set", "task=edge",
                             "--set", "model.arch=gcn", cwd=tmp_path)  # fmt: skip
    helpers.one_line(proc, "model.arch='gcn' is a model for task=node, not task=edge; use one of: hgt, rgcn, sage")


@pytest.mark.xdist_group("test_edge_tasks")
def test_an_edge_task_trains_the_same_from_a_prepared_folder_as_from_its_npz(files, tmp_path):
    """``gnnbridge prepare`` carries edge labels (a graph without node labels too); two ranks
    train the folder to the ``.npz``'s numbers, and a node task on it says what it lacks."""
    folder = tmp_path / "edges"
    helpers.ok(helpers.gnnbridge("prepare", str(files / "edges.npz"), "--out", str(folder), "--quiet", cwd=tmp_path))
    results = gnnbridge.run(
        dataset=folder, backend="pyg", nproc=2, out=tmp_path / "run", progress=False,
        overrides=["task=edge", "train.epochs=4", "train.batch_size=128", "train.lr=0.01"],
    )  # fmt: skip
    assert results["metrics"] == trained(files, "pyg")["metrics"]
    proc = helpers.gnnbridge("train", "--dataset", str(folder), "--out", str(tmp_path / "node"), cwd=tmp_path)
    helpers.one_line(
        proc, "has no node labels (no labelled node type); use task=edge (its edges are labelled) or task=link"
    )


def test_a_typed_folders_edge_task_is_the_npzs(tmp_path):
    """The record an edge task builds from a prepared typed folder (labels, splits, features of
    the labelled type, read as the target's form) is the one it builds from the ``.npz``."""
    arrays = {
        **ratings(),
        "edge_attr__user__rates__item": np.random.default_rng(3).normal(size=(E, 2)).astype(np.float32),
    }
    np.savez(tmp_path / "r.npz", **arrays)
    helpers.ok(helpers.gnnbridge("prepare", str(tmp_path / "r.npz"), "--quiet", cwd=tmp_path))
    reading = Reading(form="regression", edge_labels=True)
    sources = (open_prepared(tmp_path / "r", 0, reading), graph_from_arrays("r", arrays, 0, "r", reading))
    folder, memory = (for_edge_task(s, False, 0, reading) for s in sources)
    for key in ("y", "train_idx", "val_idx", "test_idx"):
        assert torch.equal(getattr(folder, key), getattr(memory, key)), key
    assert folder.edge_attr.keys() == memory.edge_attr.keys() and folder.edge_attr
    for et, rows in memory.edge_attr.items():
        assert torch.equal(folder.edge_index[et], memory.edge_index[et]) and torch.equal(folder.edge_attr[et], rows)


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda a: a["edge_label"].__setitem__(3, 7), "edge_label has labels up to 7 but no 3"),
        (lambda a: a.update(edge_train_idx=np.arange(10), edge_val_idx=np.arange(5, 20), edge_test_idx=np.array([30])),
         "edge_label: The val split overlaps an earlier split"),
        (lambda a: a.update(edge_train_idx=np.arange(10)), "has edge_train_idx but not edge_test_idx, edge_val_idx"),
    ],
)  # fmt: skip
def test_prepare_refuses_bad_edge_labels_in_one_line(tmp_path, change, needle):
    arrays = homogeneous()
    change(arrays)
    helpers.refused_prepare(tmp_path, arrays, needle)


def test_graphs_held_in_memory_bring_their_edge_labels_and_masks(tmp_path):
    """A PyG ``Data`` (``edge_label``, ``edge_*_mask``) trains on DGL, a ``DGLGraph``
    (``edata['label']``, ``edata['*_mask']``) on PyG and a ``HeteroData`` of ratings on PyG: the
    masks are the run's splits, the labels its ``y``. Read for a node task, the same ``DGLGraph``'s
    float edge labels are left alone."""
    from torch_geometric.data import Data, HeteroData

    from gnnbridge.backends.dgl.compat import import_dgl

    dgl, a = import_dgl(), homogeneous()
    x, ei, label = (torch.from_numpy(a[k]) for k in ("x", "edge_index", "edge_label"))
    part = torch.arange(E) % 4
    masks = {"train": part < 2, "val": part == 2, "test": part == 3}
    g = dgl.graph((ei[0], ei[1]), num_nodes=N)
    g.ndata["feat"] = x
    g.edata["label"] = label
    g.edata.update({f"{s}_mask": m for s, m in masks.items()})
    data = Data(x=x, edge_index=ei, edge_label=label, **{f"edge_{s}_mask": m for s, m in masks.items()})
    for name, graph, backend in (("data", data, "dgl"), ("dglgraph", g, "pyg")):
        gnnbridge.run(dataset=graph, backend=backend, nproc=1, overrides=["task=edge", "train.epochs=1"],
                      out=tmp_path / name, progress=False)  # fmt: skip
        out = gnnbridge.predict(tmp_path / name)
        np.testing.assert_array_equal(out["y"], a["edge_label"])
        for split, mask in masks.items():
            np.testing.assert_array_equal(out[f"{split}_idx"], mask.nonzero().flatten().numpy())
    r = ratings()
    hetero = HeteroData()
    hetero["user"].x, hetero["item"].x = torch.from_numpy(r["x__user"]), torch.from_numpy(r["x__item"])
    rates = hetero["user", "rates", "item"]
    rates.edge_index, rates.edge_label = (
        torch.from_numpy(r[f"{k}__user__rates__item"]) for k in ("edge_index", "edge_label")
    )
    results = gnnbridge.run(dataset=hetero, backend="pyg", nproc=1, target="regression", progress=False,
                            overrides=["task=edge", "train.epochs=1"], out=tmp_path / "hetero")  # fmt: skip
    assert {"test_rmse", "test_r2"} <= set(results["metrics"])
    g.ndata["label"] = (x[:, 0] > 0).long()
    g.edata["label"] = label.float()  # not classes: a node task must not read it
    node = gnnbridge.run(dataset=g, backend="pyg", nproc=1, overrides=["train.epochs=1"], out=tmp_path / "node",
                         progress=False)  # fmt: skip
    assert "test_acc" in node["metrics"]


def test_a_model_instance_is_refused_for_edge_tasks_in_one_line(tmp_path):
    from torch_geometric.nn import GraphSAGE

    with pytest.raises(GnnBridgeError, match="not task=edge"):
        gnnbridge.run(dataset=tmp_path / "none.npz", model=GraphSAGE(F, 16, 2, 3), overrides=["task=edge"],
                      out=tmp_path / "run", progress=False)  # fmt: skip
    assert not (tmp_path / "run").exists()
