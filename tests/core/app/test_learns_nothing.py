"""A run that could learn nothing is refused before it starts, in one line, with nothing written:
a model with no parameter to train (torch's optimizer said "got an empty parameter list"), and a
split whose labels are all missing (NaN, under ``target=regression`` or ``multilabel``), which
would train on a loss of 0 every step, or report figures of no labelled entry, and exit 0 with a
checkpoint of untrained weights. The refusal of labels is one line with every split's counts,
from an ``.npz``, a PyG ``Data``, a ``HeteroData``, a collection of graphs and an edge task
alike; and a figure over no labelled entry is absent (None), never 0."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import in_process, one_line
from torch import nn
from torch_geometric.data import Data, HeteroData

import gnnbridge
from gnnbridge.core.errors import DataError, GnnBridgeError
from gnnbridge.core.inference.metrics import MultilabelScores, RegressionScores
from gnnbridge.core.plugins import get_target

N = 120


@pytest.fixture(autouse=True)
def data_root(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNBRIDGE_DATA", str(tmp_path / "data-root"))


def graph(y: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    """N nodes with features, random edges, the labels ``y`` and a fixed 60/20/20 split."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(N)
    return {
        "x": rng.normal(size=(N, 4)).astype(np.float32),
        "edge_index": rng.integers(0, N, (2, 4 * N)).astype(np.int64),
        "y": y.astype(np.float32),
        "train_idx": np.sort(order[:72]),
        "val_idx": np.sort(order[72:96]),
        "test_idx": np.sort(order[96:]),
    }


def values(missing: str | None = None) -> np.ndarray:
    """A value per node, every one missing (``missing="all"``) or those of one split."""
    y = np.random.default_rng(1).normal(size=N).astype(np.float32)
    if missing == "all":
        y[:] = np.nan
    elif missing is not None:
        y[graph(y)[f"{missing}_idx"]] = np.nan
    return y


@pytest.mark.parametrize(
    ("missing", "target", "needle"),
    [
        ("all", "regression", "the train split's 72 node(s) have no label (every value NaN; labelled entries per "
         "split: train 0 of 72, val 0 of 24, test 0 of 24), so nothing would be learned"),
        ("train", "regression", "labelled entries per split: train 0 of 72, val 24 of 24, test 24 of 24"),
        ("val", "multilabel", "the val split's 24 node(s) have no label (every value NaN; labelled entries per "
         "split: train 144 of 144, val 0 of 48, test 48 of 48), so it would have no figure to report"),
        ("test", "regression", "the test split's 24 node(s) have no label"),
    ],
)  # fmt: skip
def test_an_npz_whose_split_has_no_label_is_refused_in_one_line_and_leaves_no_run(tmp_path, missing, target, needle):
    y = values(missing)
    if target == "multilabel":  # two 0/1 labels per node, NaN where the split is missing
        y = np.stack([y > 0, y < 0.5], axis=1).astype(np.float32)
        y[graph(y[:, 0])["val_idx"]] = np.nan
    np.savez(tmp_path / "g.npz", **graph(y))
    settings = ["--set", f"target={target}", "--set", "train.epochs=1"]
    if target == "multilabel":  # the monitor that reported 0.0 over a split of no labelled entry
        settings += ["--set", "train.monitor=val_label_acc"]
    proc = in_process("train", "--dataset", "g.npz", *settings, "--out", "run", "--quiet", cwd=tmp_path)
    one_line(proc, needle)
    assert not (tmp_path / "run").exists()


def test_objects_in_memory_whose_labels_are_all_missing_are_refused_alike(tmp_path):
    """A ``Data``, a ``HeteroData``, a collection of graphs and an edge task's ``edge_label``."""
    a = graph(values("all"))
    data = Data(**{k: torch.from_numpy(v) for k, v in a.items() if not k.endswith("_idx")})
    hetero = HeteroData()
    hetero["user"].x, hetero["user"].y = torch.from_numpy(a["x"]), torch.from_numpy(a["y"])
    hetero["user", "knows", "user"].edge_index = torch.from_numpy(a["edge_index"])
    rng = np.random.default_rng(2)
    molecules = [
        Data(x=torch.randn(n, 3), edge_index=torch.randint(0, n, (2, 2 * n)), y=torch.tensor([[float("nan")]]))
        for n in rng.integers(5, 9, 30).tolist()
    ]
    rated = Data(x=data.x, edge_index=data.edge_index, edge_label=torch.full((4 * N,), float("nan")))
    for dataset, task, needle in (
        (data, "node", "the train split's 72 node(s) have no label"),
        (hetero, "node", "node(s) have no label"),
        (molecules, "graph", "graph(s) have no label"),
        (rated, "edge", "edge(s) have no label"),
    ):
        with pytest.raises(DataError, match="so nothing would be learned") as caught:
            arch = ["model.arch=gin"] if task == "graph" else []
            gnnbridge.run(dataset=dataset, target="regression", overrides=[f"task={task}", "train.epochs=1", *arch],
                          out=tmp_path / f"run-{task}", progress=False)  # fmt: skip
        assert needle in str(caught.value) and not (tmp_path / f"run-{task}").exists()


def test_a_figure_over_no_labelled_entry_is_absent_never_zero():
    """A training epoch's running figures and an evaluation's, where every label is missing."""
    nan = torch.full((5, 2), float("nan"))
    for name in ("regression", "multilabel"):
        target = get_target(name)
        sums = target.running(2, torch.device("cpu"))
        target.add_running(sums, torch.randn(5, 2), nan)
        assert set(target.running_metrics(sums, "train").values()) == {None}, name
    for scores in (MultilabelScores(2), RegressionScores(2)):
        scores.update(torch.randn(5, 2), nan)
        assert set(scores.as_metrics("val").values()) == {None}, type(scores).__name__


class Slice(nn.Module):
    """PyG's idiom, and no weights: the first columns of the features as logits."""

    def forward(self, x, edge_index):
        return x[:, :3]


def frozen() -> nn.Module:
    class Frozen(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3).requires_grad_(False)

        def forward(self, x, edge_index):
            return self.lin(x)

    return Frozen()


@pytest.mark.parametrize(("model", "needle"), [(Slice, "(none)"), (frozen, "(all 2 have requires_grad=False)")])
def test_a_model_with_no_parameter_to_train_is_one_line_naming_it(tmp_path, model, needle):
    a = graph(np.random.default_rng(3).integers(0, 3, N))
    data = Data(**{k: torch.from_numpy(v) for k, v in a.items() if not k.endswith("_idx")})
    data.y = data.y.long()
    with pytest.raises(GnnBridgeError) as caught:
        gnnbridge.run(dataset=data, model=model(), overrides=["train.epochs=1"], out=tmp_path / "run", progress=False)
    assert str(caught.value).startswith(
        f"your model (class '{type(model()).__qualname__}') has no parameter to train {needle}"
    )
    assert not (tmp_path / "run").exists()


def test_a_named_architecture_with_no_parameter_is_one_line_from_the_command_line(tmp_path, monkeypatch):
    (tmp_path / "weightless.py").write_text(
        "import torch\n\nclass Mean(torch.nn.Module):\n"
        "    def __init__(self, in_dim, out_dim, **kw):\n        super().__init__()\n        self.out_dim = out_dim\n"
        "    def forward(self, x, edge_index):\n        return x[:, : self.out_dim]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    proc = in_process("train", "--set", "model.arch=weightless:Mean", "--out", "run", "--quiet", cwd=tmp_path)
    one_line(proc, "class 'weightless:Mean' has no parameter to train (none, built with model.hidden=")
    assert not (tmp_path / "run").exists()
