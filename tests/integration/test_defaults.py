"""Defaults that learn: each task family and target, trained with gnnbridge's defaults (only the
task, the target and, for molecules, ``model.arch=gine`` are named) on a standard shape of its
data, on both libraries, beats predicting the mean (the majority class, each label's rate, a
random score) and the features alone (a linear fit on the items' own features: a node's, both
ends' of an edge, a graph's mean atom) by a clear margin. The baselines are computed here, on the
same splits, and scored by the target's own metrics.

The shapes: a random graph whose node values, labels and classes read the node and its
neighbours; molecules (``molecule_graphs``: 10-30 atoms, bond types as edge features) whose
targets are shares of bond types, which the atoms explain only in part; directed edges labelled
from both ends and their in-neighbours; the built-in synthetic graph for node classes (the
default experiment) and for links. One run per family and library, one process each; each
family's tests share one xdist worker (``--dist loadgroup``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

import gnnbridge
from gnnbridge.core.inference.metrics import roc_auc
from gnnbridge.core.plugins import get_target
from gnnbridge.plugins.datasets import molecule_graphs, synthetic_graph

pytestmark = pytest.mark.slow
BACKENDS = ("pyg", "dgl")
DOUBLE = 1  # the bond type whose share molecules' values and classes are made of


@dataclass
class Shape:
    """A family's data: the ``.npz`` arrays gnnbridge trains on (``None``: a built-in dataset),
    and what the baselines read: each item's own features, its labels, the splits."""

    arrays: dict | None
    features: np.ndarray
    y: np.ndarray
    train: np.ndarray
    test: np.ndarray


def splits(items: int, seed: int) -> dict[str, np.ndarray]:
    """An 80/10/10 split of ``items``, as the .npz format names them."""
    order = np.random.default_rng(seed).permutation(items)
    a, b = items * 8 // 10, items * 9 // 10
    return {"train_idx": order[:a], "val_idx": order[a:b], "test_idx": order[b:]}


def around(edge_index: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Each node's mean in-neighbour features (zeros without in-edges)."""
    total, degree = np.zeros_like(x, dtype=np.float64), np.zeros(len(x))
    np.add.at(total, edge_index[1], x[edge_index[0]])
    np.add.at(degree, edge_index[1], 1)
    return total / np.maximum(degree, 1)[:, None]


def node_shape(target: str) -> Shape:
    """1,500 nodes of 8 features, 10 neighbours on average; values, labels or classes of the node
    and its neighbours together. Values are in their own units (a mean of 50, a spread of 14)."""
    n, rng = 1500, np.random.default_rng(11)
    src, dst = rng.integers(0, n, 5 * n), rng.integers(0, n, 5 * n)
    edge_index = np.stack([np.r_[src, dst], np.r_[dst, src]]).astype(np.int64)
    x = rng.normal(size=(n, 8)).astype(np.float32)
    near = 3 * around(edge_index, x)
    if target == "regression":
        y = 50 + 10 * (x[:, 0] + near[:, 1])
    elif target == "multilabel":
        y = np.c_[x, near] @ np.random.default_rng(7).normal(size=(16, 12)) > 1.0
    else:
        y = (x[:, 0] + near[:, 1] > 0).astype(np.int64) + (x[:, 2] - near[:, 3] > 0.5)
    y = y.astype(np.int64 if target == "class" else np.float32)
    split = splits(n, 1)
    return Shape({"x": x, "edge_index": edge_index, "y": y, **split}, x, y, split["train_idx"], split["test_idx"])


def molecule_shape(target: str) -> Shape:
    """600 molecules; the value: the share of double bonds (scaled to a mean about 5), the
    classes: its thirds, the labels: whether each bond type's share is in its top quarter."""
    arrays, shares = molecule_graphs(600, seed=5)
    if target == "regression":
        y = (17 * shares[:, DOUBLE]).astype(np.float32)
    elif target == "multilabel":
        y = (shares > np.quantile(shares, 0.75, axis=0)).astype(np.float32)
    else:
        y = np.searchsorted(np.quantile(shares[:, DOUBLE], [1 / 3, 2 / 3]), shares[:, DOUBLE]).astype(np.int64)
    ptr = arrays["node_ptr"]
    atoms = np.stack([arrays["x"][a:b].mean(0) for a, b in zip(ptr[:-1], ptr[1:])])  # each molecule's mean atom
    split = splits(len(y), 2)
    return Shape({**arrays, "y": y, **split}, atoms, y, split["train_idx"], split["test_idx"])


def edge_shape(target: str) -> Shape:
    """4,000 directed edges among 500 nodes, each labelled from both ends' features and their
    in-neighbours' (which an edge's own ends do not carry)."""
    n, e, rng = 500, 4000, np.random.default_rng(13)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    edge_index = np.stack([src, dst]).astype(np.int64)
    near = 2 * around(edge_index, x)
    score = x[src, 0] + x[dst, 1] + near[src, 2] - near[dst, 3]
    if target == "regression":
        y = 5 + score
    elif target == "multilabel":
        y = np.c_[x[src], x[dst], near[src], near[dst]] @ np.random.default_rng(7).normal(size=(24, 8)) > 1.0
    else:
        y = (score > 0).astype(np.int64) + (score > 1.5)
    y = y.astype(np.int64 if target == "class" else np.float32)
    split = {f"edge_{k}": v for k, v in splits(e, 3).items()}
    arrays = {"x": x, "edge_index": edge_index, "edge_label": y, **split}
    return Shape(arrays, np.c_[x[src], x[dst]], y, split["edge_train_idx"], split["edge_test_idx"])


SYNTHETIC = {"num_nodes": 1500}  # the built-in synthetic graph (the default experiment's), smaller


def synthetic_shape(target: str) -> Shape:
    """The default experiment's graph at 1,500 nodes, as its loader makes it (``train.seed`` 0)."""
    g = synthetic_graph(1500, 8, 32, 12.0, 0.65, 0.25, 0)
    return Shape(None, g.x.numpy(), g.y.numpy(), g.train_idx.numpy(), g.test_idx.numpy())


@dataclass
class Family:
    task: str
    target: str
    shape: Callable[[str], Shape]
    metric: str  # the test metric that is compared
    margin: float  # by how much gnnbridge must beat each baseline
    settings: tuple[str, ...] = ()  # besides task and target: what a user of this shape must name


FAMILIES = {
    "node-class": Family("node", "class", synthetic_shape, "acc", 0.1, (f"dataset.options={SYNTHETIC}",)),
    "node-regression": Family("node", "regression", node_shape, "r2", 0.15),
    "node-multilabel": Family("node", "multilabel", node_shape, "ap", 0.1),
    "graph-class": Family("graph", "class", molecule_shape, "acc", 0.1, ("model.arch=gine",)),
    "graph-regression": Family("graph", "regression", molecule_shape, "r2", 0.15, ("model.arch=gine",)),
    "graph-multilabel": Family("graph", "multilabel", molecule_shape, "ap", 0.2, ("model.arch=gine",)),
    "edge-class": Family("edge", "class", edge_shape, "acc", 0.1),
    "edge-regression": Family("edge", "regression", edge_shape, "r2", 0.15),
    "edge-multilabel": Family("edge", "multilabel", edge_shape, "ap", 0.1),
    "link": Family("link", "class", synthetic_shape, "roc_auc", 0.1, (f"dataset.options={SYNTHETIC}",)),
}

_RUNS: dict[str, dict[str, dict]] = {}  # family -> backend -> results, trained once per worker


def family(*names: str) -> list:
    return [pytest.param(name, marks=pytest.mark.xdist_group(f"test_defaults:{name}")) for name in names]


def trained(name: str, root: Path) -> dict[str, dict]:
    """``name`` trained with the defaults on both libraries, one process each."""
    if name not in _RUNS:
        fam = FAMILIES[name]
        shape = fam.shape(fam.target)
        dataset = None
        if shape.arrays is not None:
            dataset = root / f"{name}.npz"
            np.savez(dataset, **shape.arrays)
        settings = [f"task={fam.task}", f"target={fam.target}", *fam.settings]
        _RUNS[name] = {
            backend: gnnbridge.run(dataset=dataset, backend=backend, nproc=1, overrides=settings,
                                   out=root / backend, progress=False)
            for backend in BACKENDS
        }  # fmt: skip
    return _RUNS[name]


def scored(target: str, outputs: np.ndarray, y: np.ndarray, metric: str) -> float:
    """``metric`` of ``outputs`` against ``y``, as the target computes it for a run."""
    width = 1 if y.ndim == 1 and target != "class" else int(outputs.shape[1])
    scores = get_target(target).scores(width)
    scores.update(torch.from_numpy(np.asarray(outputs, np.float64)), torch.from_numpy(y))
    return scores.as_metrics("test")[f"test_{metric}"]


def baselines(fam: Family, shape: Shape) -> dict[str, float]:
    """What predicting the mean and a linear fit on the features alone score on the test split."""
    if fam.task == "link":
        return link_baselines()
    tr, te = shape.train, shape.test
    y = shape.y
    if fam.target == "class":
        onehot = np.eye(int(y.max()) + 1)[y]
        mean = np.broadcast_to(onehot[tr].mean(0), (len(te), onehot.shape[1]))  # the majority class, always
        fit_to = onehot
    else:
        fit_to = y.reshape(len(y), -1).astype(np.float64)
        mean = np.broadcast_to(fit_to[tr].mean(0), (len(te), fit_to.shape[1]))
    design = np.c_[shape.features, np.ones(len(shape.features))]
    weights = np.linalg.lstsq(design[tr], fit_to[tr], rcond=None)[0]
    return {
        "mean": scored(fam.target, mean.copy(), y[te], fam.metric),
        "features": scored(fam.target, design[te] @ weights, y[te], fam.metric),
    }


def link_baselines() -> dict[str, float]:
    """A random score (ROC-AUC 0.5), and the dot product of two nodes' features: every edge
    against as many uniform pairs."""
    g = synthetic_graph(1500, 8, 32, 12.0, 0.65, 0.25, 0)
    dst = torch.repeat_interleave(torch.arange(g.num_nodes), g.indptr.diff())
    fake = torch.randint(0, g.num_nodes, (dst.numel(),), generator=torch.Generator().manual_seed(0))
    scores = torch.cat([(g.x[g.indices] * g.x[dst]).sum(1), (g.x[g.indices] * g.x[fake]).sum(1)])
    labels = torch.cat([torch.ones(dst.numel()), torch.zeros(dst.numel())]).long()
    return {"mean": 0.5, "features": roc_auc(scores, labels)}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", family(*FAMILIES))
def test_the_defaults_beat_the_mean_and_the_features_alone(tmp_path_factory, name, backend):
    fam = FAMILIES[name]
    results = trained(name, tmp_path_factory.mktemp(name))[backend]
    ours = results["metrics"][f"test_{fam.metric}"]
    base = baselines(fam, fam.shape(fam.target))
    for which, value in base.items():
        assert ours > value + fam.margin, (name, backend, fam.metric, ours, which, base)
    if fam.target == "regression":  # its figures are in the labels' units (the run learnt standard ones)
        assert results["metrics"]["test_r2"] > 0.5, results["metrics"]


# ---------------------------------------------------------------------------- values in their units

REGRESSIONS = ("node-regression", "graph-regression", "edge-regression")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", family(*REGRESSIONS))
def test_predict_and_evaluate_give_a_regressions_figures_in_the_labels_units(tmp_path_factory, name, backend):
    """The run learnt standardised values; what predict writes and evaluate reports is in the
    labels' units, the run's own figures (a node's value around 50, a molecule's around 5)."""
    fam = FAMILIES[name]
    results = trained(name, tmp_path_factory.mktemp(name))[backend]
    shape = fam.shape(fam.target)
    outputs = gnnbridge.predict(results["run_dir"])  # best.pt: the checkpoint results' metrics are of
    test = outputs["test_idx"]
    assert np.array_equal(outputs["y"], shape.y) and np.array_equal(np.sort(test), np.sort(shape.test))
    for metric in ("mae", "rmse", "r2"):
        figure = scored("regression", outputs["logits"][test], outputs["y"][test], metric)
        assert figure == pytest.approx(results["metrics"][f"test_{metric}"], rel=1e-5), metric
    assert abs(outputs["logits"].mean() - shape.y.mean()) < 0.5 * shape.y.std()  # standard units would be near 0
    assert gnnbridge.evaluate(results["run_dir"])["metrics"] == pytest.approx(results["metrics"], rel=1e-5)
    state = torch.load(Path(results["run_dir"]) / "checkpoints" / "latest.pt", weights_only=True)
    train = shape.y[shape.train].astype(np.float64)
    assert state["target"]["scale"]["mean"].item() == pytest.approx(train.mean(), rel=1e-9)  # the train split's alone
    assert state["target"]["scale"]["std"].item() == pytest.approx(train.std(), rel=1e-6)


@pytest.mark.xdist_group("test_defaults:node-regression")
def test_the_model_handed_back_answers_in_the_labels_units_and_can_give_standard_ones(tmp_path_factory):
    from torch_geometric.data import Data

    results = trained("node-regression", tmp_path_factory.mktemp("node-regression"))["pyg"]
    shape = node_shape("regression")
    outputs = gnnbridge.predict(results["run_dir"])
    model = gnnbridge.load(results["run_dir"])
    x, edge_index = torch.from_numpy(shape.arrays["x"]), torch.from_numpy(shape.arrays["edge_index"])
    with torch.no_grad():
        values = model(Data(edge_index=edge_index, batch_size=len(x)), x)
        assert torch.allclose(values, torch.from_numpy(outputs["logits"]), atol=1e-4)
        scale = model.target_units.scale
        model.target_units.remove()
        standard = model(Data(edge_index=edge_index, batch_size=len(x)), x)
    assert torch.allclose(standard.double(), (values.double() - scale.mean) / scale.std, atol=1e-5)
    assert abs(float(standard.mean())) < 0.2 and abs(float(values.mean()) - 50) < 2


@pytest.mark.xdist_group("test_defaults:node-regression")
def test_a_checkpoint_without_a_scale_is_scored_as_its_outputs_are(tmp_path_factory, tmp_path):
    """A checkpoint written before regression was standardised keeps no scale: its model learnt
    the values themselves, so evaluate scores its outputs as they are (here, a copy of a scaled
    run's checkpoint with the scale taken out: its outputs, in standard units, are then scored
    as values, far from the labels)."""
    results = trained("node-regression", tmp_path_factory.mktemp("node-regression"))["dgl"]
    state = torch.load(Path(results["run_dir"]) / "checkpoints" / "latest.pt", weights_only=True)
    scale = state.pop("target")["scale"]
    torch.save(state, tmp_path / "old.pt")
    outputs = gnnbridge.predict(results["run_dir"], kind="latest")
    raw = (outputs["logits"].astype(np.float64) - scale["mean"].item()) / scale["std"].item()
    test = outputs["test_idx"]
    old = gnnbridge.evaluate(tmp_path / "old.pt")["metrics"]
    assert old["test_rmse"] == pytest.approx(scored("regression", raw[test], outputs["y"][test], "rmse"), rel=1e-5)
    assert old["test_r2"] < 0 < results["metrics"]["test_r2"]
    assert not hasattr(gnnbridge.load(tmp_path / "old.pt"), "target_units")


@pytest.mark.xdist_group("test_defaults:node-regression")
def test_a_resumed_or_ported_regression_keeps_its_scale(tmp_path_factory, tmp_path):
    import shutil

    results = trained("node-regression", tmp_path_factory.mktemp("node-regression"))["pyg"]
    shutil.copytree(results["run_dir"], tmp_path / "run")  # the other tests read the run as trained
    more = gnnbridge.run(resume=tmp_path / "run", overrides=["train.epochs=9"], progress=False)
    losses = [h["loss"] for h in more["history"]]
    assert losses[:8] == [h["loss"] for h in results["history"]]
    assert losses[8] < 0.5  # standard units still: without the scale the loss would be the values' (about 2,500)
    gnnbridge.port(results["run_dir"], to="dgl", out=tmp_path / "ported")
    moved = gnnbridge.evaluate(tmp_path / "ported")["metrics"]
    assert moved == pytest.approx(gnnbridge.evaluate(results["run_dir"])["metrics"], rel=1e-5)


@pytest.mark.xdist_group("test_defaults:node-regression")
def test_target_scaling_none_learns_the_values_as_they_are(tmp_path):
    np.savez(tmp_path / "values.npz", **node_shape("regression").arrays)
    settings, out = ["train.epochs=1", "train.target_scaling=none"], tmp_path / "run"
    results = gnnbridge.run(
        dataset=tmp_path / "values.npz", target="regression", nproc=1, progress=False, overrides=settings, out=out
    )
    state = torch.load(Path(results["run_dir"]) / "checkpoints" / "latest.pt", weights_only=True)
    assert state["target"] is None and results["history"][0]["loss"] > 100  # the values' own squared errors
    assert not hasattr(gnnbridge.load(results["run_dir"]), "target_units")
