"""Targets other than one class per item (``target=regression``, ``target=multilabel``) on nodes
and on graphs, each trained on both libraries with 2 ranks: the metrics a run reports are those
OGB's own ``Evaluator`` computes from the run's outputs (ogbn-proteins' ROC-AUC, ogbg-molpcba's
AP, ogbg-molesol's RMSE, on graphs of those shapes), the monitor knows lower errors are better,
graph runs are one run on either library, and a run resumes, predicts and hands its model back.

The four datasets reach gnnbridge as their users hold them: a PyG ``Data`` and a ``DGLGraph``
with float labels, lists of PyG ``Data`` and of DGL ``(graph, label)`` pairs with a row of
targets per graph, NaN where a label is missing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import helpers
import numpy as np
import pytest
import torch
import yaml
from ogb.graphproppred import Evaluator as GraphEvaluator
from ogb.nodeproppred import Evaluator as NodeEvaluator
from torch_geometric.data import Data

import gnnbridge
from gnnbridge.backends.dgl.compat import import_dgl
from gnnbridge.core.app.compare import same_batches
from gnnbridge.core.app.plan import plan_resume
from gnnbridge.core.errors import ConfigError, GnnBridgeError
from gnnbridge.core.plugins import get_target
from gnnbridge.plugins.folder_datasets import prepare

pytestmark = pytest.mark.slow
dgl = import_dgl()
N, F, GRAPHS = 400, 8, 160
BACKENDS = ("pyg", "dgl")


def node_arrays(seed: int, labels: np.ndarray) -> dict[str, np.ndarray]:
    """A random graph over N nodes whose targets ``labels(x, mean of neighbours' x)`` reads."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, N, 6 * N), rng.integers(0, N, 6 * N)
    edge_index = np.stack([np.r_[src, dst], np.r_[dst, src]]).astype(np.int64)
    x = rng.normal(size=(N, F)).astype(np.float32)
    total, degree = np.zeros((N, F)), np.zeros(N)
    np.add.at(total, edge_index[1], x[edge_index[0]])
    np.add.at(degree, edge_index[1], 1)
    y = labels(rng, x, total / np.maximum(degree, 1)[:, None]).astype(np.float32)
    return {"x": x, "edge_index": edge_index, "y": y}


def node_regression(rng, x, around):
    """Two values per node, a tenth of them missing."""
    y = np.stack([x[:, 0] + 2 * around[:, 1], x[:, 2] - x[:, 3]], axis=1)
    y[rng.random(y.shape) < 0.1] = np.nan
    return y


def node_multilabel(rng, x, around):
    """ogbn-proteins' shape: 112 binary labels per node, each a linear rule of the node and its neighbours."""
    w = rng.normal(size=(2 * F, 112))
    return (np.concatenate([x, around], axis=1) @ w > 0).astype(np.float32)


def graphs(seed: int, targets) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """GRAPHS small graphs ``(x, edge_index, row of targets)``, the targets ``targets(rng, x)``."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(GRAPHS):
        n = int(rng.integers(6, 14))
        x = rng.normal(size=(n, 4)).astype(np.float32)
        src, dst = rng.integers(0, n, 2 * n), rng.integers(0, n, 2 * n)
        out.append((x, np.stack([np.r_[src, dst], np.r_[dst, src]]).astype(np.int64), targets(rng, x)))
    return out


def graph_regression(rng, x):
    """ogbg-molesol's shape: one value per graph."""
    return np.array([3 * x[:, 0].mean() + 0.1 * len(x)], dtype=np.float32)


def graph_multilabel(rng, x):
    """ogbg-molpcba's shape: 128 labels per graph, most of them missing."""
    w = np.random.default_rng(7).normal(size=(4, 128))
    row = (x.mean(0) @ w > 0).astype(np.float32)
    row[rng.random(128) < 0.6] = np.nan
    return row


def as_data(a: dict) -> Data:
    return Data(**{k: torch.from_numpy(v) for k, v in a.items()})


def as_dglgraph(a: dict):
    g = dgl.graph((torch.from_numpy(a["edge_index"][0]), torch.from_numpy(a["edge_index"][1])), num_nodes=N)
    g.ndata["feat"], g.ndata["label"] = torch.from_numpy(a["x"]), torch.from_numpy(a["y"])
    return g


def pyg_graphs(items) -> list[Data]:  # y [1, T], as PyG's molecule datasets hold it
    return [
        Data(x=torch.from_numpy(x), edge_index=torch.from_numpy(e), y=torch.from_numpy(y)[None]) for x, e, y in items
    ]


def dgl_graphs(items):
    pairs = []
    for x, e, y in items:
        g = dgl.graph((torch.from_numpy(e[0]), torch.from_numpy(e[1])), num_nodes=len(x))
        g.ndata["feat"] = torch.from_numpy(x)
        pairs.append((g, torch.from_numpy(y)))
    return helpers.dgl_pairs(pairs)


# family: (task, target, the dataset's arrays)
FAMILIES = {
    "node-regression": ("node", "regression", lambda: node_arrays(1, node_regression)),
    "node-multilabel": ("node", "multilabel", lambda: node_arrays(2, node_multilabel)),
    "graph-regression": ("graph", "regression", lambda: graphs(3, graph_regression)),
    "graph-multilabel": ("graph", "multilabel", lambda: graphs(4, graph_multilabel)),
}
HANDED = {"node": {"pyg": as_data, "dgl": as_dglgraph}, "graph": {"pyg": pyg_graphs, "dgl": dgl_graphs}}


_RUNS: dict[str, dict[str, dict]] = {}  # family -> backend -> results, trained once per worker


def family(*names: str) -> list:
    """``names`` as parameters, each family's tests grouped on one xdist worker (``--dist
    loadgroup``), which trains that family's runs once (:func:`runs`) while other workers train
    the other families'."""
    return [pytest.param(name, marks=pytest.mark.xdist_group(f"test_targets:{name}")) for name in names]


def runs(name: str, tmp_path_factory) -> dict[str, dict]:
    """One family trained on both libraries, 2 ranks each: ``{backend: results}``."""
    if name not in _RUNS:
        task, target, make = FAMILIES[name]
        made, root = make(), tmp_path_factory.mktemp(name)
        settings = [f"task={task}", "train.epochs=4", "train.batch_size=32", "train.lr=0.01"]
        if task == "graph":
            settings.append("model.arch=gin")
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("GNNBRIDGE_DATA", str(root / "data-root"))
            _RUNS[name] = {
                backend: gnnbridge.run(dataset=HANDED[task][backend](made), backend=backend, target=target,
                                       nproc=2, overrides=settings, out=root / backend, progress=False)
                for backend in BACKENDS
            }  # fmt: skip
    return _RUNS[name]


def ogb_figures(family: str, y: np.ndarray, outputs: np.ndarray) -> dict[str, float]:
    """What OGB's Evaluator (or, for two values per node, OGB's RMSE per column) makes of the outputs."""
    if family == "node-multilabel":
        return {"roc_auc": NodeEvaluator("ogbn-proteins").eval({"y_true": y, "y_pred": outputs})["rocauc"]}
    if family == "graph-multilabel":
        return {"ap": GraphEvaluator("ogbg-molpcba").eval({"y_true": y, "y_pred": outputs})["ap"]}
    if family == "graph-regression":
        return {"rmse": GraphEvaluator("ogbg-molesol").eval({"y_true": y, "y_pred": outputs})["rmse"]}
    rmse = [
        GraphEvaluator("ogbg-molesol").eval({"y_true": y[:, [c]], "y_pred": outputs[:, [c]]})["rmse"] for c in (0, 1)
    ]
    return {"rmse": float(np.mean(rmse))}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", family(*FAMILIES))
def test_each_family_reports_what_ogbs_evaluator_computes_from_its_outputs(tmp_path_factory, name, backend):
    results = runs(name, tmp_path_factory)[backend]
    run_dir = results["run_dir"]
    outputs = gnnbridge.predict(run_dir)  # best.pt, the weights results' metrics are of
    test = outputs["test_idx"]
    y, logits = outputs["y"][test], outputs["logits"][test]
    scores = get_target(FAMILIES[name][1]).scores(y.shape[1])
    scores.update(torch.from_numpy(logits), torch.from_numpy(y))
    ours = scores.as_metrics("test")  # gnnbridge's metric on the outputs predict wrote
    for metric, value in ogb_figures(name, y.astype(np.float64), logits.astype(np.float64)).items():
        assert ours[f"test_{metric}"] == pytest.approx(value, rel=1e-12, abs=1e-15), (metric, value)
        # What the run reported: its evaluation's outputs are predict's up to float32 sums in another
        # order (DGL's full-neighbour blocks batch the nodes differently).
        assert results["metrics"][f"test_{metric}"] == pytest.approx(value, rel=1e-6)
    assert gnnbridge.evaluate(run_dir)["metrics"] == pytest.approx(results["metrics"], rel=1e-6)
    if FAMILIES[name][1] == "multilabel":  # probabilities of each label, and 0/1 predictions
        assert np.allclose(outputs["probs"], 1 / (1 + np.exp(-outputs["logits"])), atol=1e-6)
        assert set(np.unique(outputs["pred"])) <= {0, 1} and outputs["pred"].shape == outputs["y"].shape
    else:  # regression writes its values alone
        assert set(outputs) == {"logits", "y", "train_idx", "val_idx", "test_idx"}


@pytest.mark.parametrize("name", family(*FAMILIES))
def test_the_monitor_keeps_the_best_epoch_which_is_the_lowest_error_for_regression(tmp_path_factory, name):
    results = runs(name, tmp_path_factory)["pyg"]
    monitor = results["best"]["monitor"]
    values = [h[monitor] for h in results["history"]]
    best = int(np.argmin(values)) if FAMILIES[name][1] == "regression" else int(np.argmax(values))
    assert monitor == ("val_rmse" if FAMILIES[name][1] == "regression" else "val_roc_auc")
    assert results["best"]["epoch"] == best and results["best"]["value"] == values[best]


@pytest.mark.parametrize("name", family("graph-regression", "graph-multilabel"))
def test_a_graph_family_is_one_run_on_either_library(tmp_path_factory, name):
    pyg, dgl_ = runs(name, tmp_path_factory)["pyg"], runs(name, tmp_path_factory)["dgl"]
    assert [h["loss"] for h in pyg["history"]] == pytest.approx([h["loss"] for h in dgl_["history"]], rel=1e-5)
    assert pyg["metrics"] == pytest.approx(dgl_["metrics"], rel=1e-5)


@pytest.mark.xdist_group("test_targets:node-regression")
def test_node_regression_layer_wise_is_the_whole_graph_through_the_model_handed_back(tmp_path_factory):
    run_dir = runs("node-regression", tmp_path_factory)["pyg"]["run_dir"]
    outputs = gnnbridge.predict(run_dir)
    model = gnnbridge.load(run_dir)
    a = node_arrays(1, node_regression)
    with torch.no_grad():
        whole = model(Data(edge_index=torch.from_numpy(a["edge_index"]), batch_size=N), torch.from_numpy(a["x"]))
    assert torch.allclose(whole, torch.from_numpy(outputs["logits"]), atol=1e-5)
    # A graph of the same kind without labels is scored as the same graph with them.
    unlabelled = Data(x=torch.from_numpy(a["x"]), edge_index=torch.from_numpy(a["edge_index"]))
    on_it = gnnbridge.predict(run_dir, dataset=unlabelled)
    assert set(on_it) == {"logits"} and np.allclose(on_it["logits"], outputs["logits"], atol=1e-6)


@pytest.mark.xdist_group("test_targets:node-regression")
def test_resume_keeps_the_loss_it_trained_with(tmp_path_factory):
    """Another ``train.loss`` would minimise something else from the resumed epoch on: refused,
    nothing trained; naming the loss the run trains with (the target's own) is no change."""
    run_dir = runs("node-regression", tmp_path_factory)["pyg"]["run_dir"]
    with pytest.raises(ConfigError, match="train.loss='l1' differs from the checkpoint's 'mse', but --resume keeps"):
        gnnbridge.run(resume=run_dir, overrides=["train.loss=l1", "train.epochs=5"], progress=False)
    assert plan_resume(run_dir, None, None, None, ["train.loss=mse", "train.epochs=5"], {}).config.train.loss == "mse"
    assert len(json.loads((Path(run_dir) / "results.json").read_text())["history"]) == 4


@pytest.mark.xdist_group("test_targets:node-multilabel")
def test_a_multilabel_run_resumes_to_more_epochs(tmp_path_factory, tmp_path):
    results = runs("node-multilabel", tmp_path_factory)["dgl"]
    shutil.copytree(results["run_dir"], tmp_path / "run")  # the other tests read the run as trained
    more = gnnbridge.run(resume=tmp_path / "run", overrides=["train.epochs=5"], progress=False)
    assert [h["epoch"] for h in more["history"]] == [0, 1, 2, 3, 4]
    assert [h["loss"] for h in more["history"][:4]] == [h["loss"] for h in results["history"]]
    assert "val_ap" in more["metrics"] and "train_label_acc" in more["history"][-1]


@pytest.mark.xdist_group("test_targets:node-multilabel")
def test_a_multilabel_run_moves_to_the_other_library_and_both_step_alike(tmp_path_factory, tmp_path):
    """``port`` and ``compare --same-batches`` hold for a target other than classes."""
    results = runs("node-multilabel", tmp_path_factory)["pyg"]
    gnnbridge.port(results["run_dir"], to="dgl", out=tmp_path / "ported")
    moved = gnnbridge.evaluate(tmp_path / "ported")["metrics"]
    assert moved == pytest.approx(gnnbridge.evaluate(results["run_dir"])["metrics"], rel=1e-5)
    dataset = yaml.safe_load((Path(results["run_dir"]) / "config.yaml").read_text())["dataset"]["path"]
    report = same_batches(dataset=dataset, epochs=1, overrides=["target=multilabel", "train.batch_size=64"])
    assert report["agree"], report


def test_a_prepared_folder_of_targets_trains_as_its_npz_and_says_which_target_reads_it(tmp_path):
    a = node_arrays(1, node_regression)
    np.savez(tmp_path / "values.npz", **a)
    (tmp_path / "values").mkdir()
    for key, value in a.items():
        np.save(tmp_path / "values" / f"{key}.npy", value)
    prepare(str(tmp_path / "values"), progress=False)
    runs = {
        name: gnnbridge.run(dataset=tmp_path / name, target="regression", nproc=1, out=tmp_path / f"run-{name}",
                            overrides=["train.epochs=2", "train.batch_size=64"], progress=False)
        for name in ("values.npz", "values")
    }  # fmt: skip
    assert [h["loss"] for h in runs["values"]["history"]] == [h["loss"] for h in runs["values.npz"]["history"]]
    assert runs["values"]["metrics"] == runs["values.npz"]["metrics"]
    refusals = {
        "class": "y holds 2 target value(s) per node, not classes; set target=regression.",
        "multilabel": "y holds values other than 0, 1 and NaN; target=multilabel reads 0/1 labels.",
    }
    for target, line in refusals.items():
        with pytest.raises(GnnBridgeError) as caught:
            gnnbridge.run(dataset=tmp_path / "values", target=target, out=tmp_path / "no", progress=False)
        assert str(caught.value) == f"Folder 'values': {line}" and not (tmp_path / "no").exists()


def hetero_arrays(seed: int, multilabel: bool) -> dict[str, np.ndarray]:
    """Papers (features, the labelled type) written by featureless authors and citing each other."""
    rng = np.random.default_rng(seed)
    papers, authors = 300, 200
    x = rng.normal(size=(papers, 6)).astype(np.float32)
    y = (x[:, :4] > 0).astype(np.int64) if multilabel else np.stack([2 * x[:, 0], x[:, 1] - x[:, 2]], 1)
    return {
        "x__paper": x,
        "num_nodes__author": np.array([authors]),
        "edge_index__author__writes__paper": np.stack([rng.integers(0, authors, 1500), rng.integers(0, papers, 1500)]),
        "edge_index__paper__cites__paper": rng.integers(0, papers, (2, 1200)),
        "y__paper": y.astype(np.int64 if multilabel else np.float32),
    }


@pytest.mark.parametrize("backend, target", [("pyg", "regression"), ("dgl", "multilabel")])
def test_a_heterogeneous_graphs_labelled_type_takes_the_targets_too(tmp_path, backend, target):
    np.savez(tmp_path / "typed.npz", **hetero_arrays(6, target == "multilabel"))
    results = gnnbridge.run(dataset=tmp_path / "typed.npz", backend=backend, target=target, nproc=1,
                            overrides=["model.arch=rgcn", "train.epochs=3", "train.batch_size=64"],
                            out=tmp_path / "run", progress=False)  # fmt: skip
    assert results["eval"]["final"] == "layerwise"  # the typed layer-wise pass scores it
    outputs = gnnbridge.predict(tmp_path / "run")
    test = outputs["test_idx"]
    scores = get_target(target).scores(outputs["y"].shape[1])
    scores.update(torch.from_numpy(outputs["logits"][test]), torch.from_numpy(outputs["y"][test]))
    assert scores.as_metrics("test") == pytest.approx({k: v for k, v in results["metrics"].items() if "test" in k})
    learned = (
        results["metrics"]["test_r2"] > 0.3 if target == "regression" else results["metrics"]["test_roc_auc"] > 0.8
    )
    assert learned, results["metrics"]
