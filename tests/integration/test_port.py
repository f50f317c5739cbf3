"""``gnnbridge port``: a run trained on one library, moved to the other, evaluates and predicts the
same, and resumes as if it had never moved; what cannot move is refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import one_line

import gnnbridge
from gnnbridge.core.inference import checkpoint

pytestmark = pytest.mark.slow  # every test trains and evaluates real runs

NODE = ["dataset.options.num_nodes=400", "train.batch_size=64", "train.epochs=2"]
CASES = {  # name: (experiment, trained on, moved to, extra overrides)
    "sage": ("sage-synthetic", "dgl", "pyg", ["sampler.kind=core", "model.dropout=0"]),
    "gcn": ("gcn-synthetic", "dgl", "pyg", []),
    "gat": ("gat-synthetic", "pyg", "dgl", []),
    "gin": ("gin-synthetic", "pyg", "dgl", ["dataset.options.num_graphs=80", "train.batch_size=16", "train.epochs=2"]),
    "rec": (
        "rec-synthetic",
        "dgl",
        "pyg",
        ["dataset.options.num_users=150", "dataset.options.num_items=100", "train.epochs=2", "link.eval_negatives=20"],
    ),
    "rec-sparse": (  # model.embeddings=sparse: SparseAdam's state moves with the tables
        "rec-synthetic",
        "pyg",
        "dgl",
        ["dataset.options.num_users=150", "dataset.options.num_items=100", "train.epochs=2", "link.eval_negatives=20"]
        + ["model.embeddings=sparse", "sampler.kind=core", "model.dropout=0"],
    ),
    "rec-shared": (  # OGB's ogbl-collab protocol: Hits@K against shared negative pairs
        "rec-synthetic",
        "pyg",
        "dgl",
        ["dataset.options.num_users=150", "dataset.options.num_items=100", "train.epochs=2"]
        + ["link.protocol=shared", "link.eval_negatives=500", "link.hits_at=[10,50]"],
    ),
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("port")
    runs = {}
    for name, (experiment, backend, _, extra) in CASES.items():
        overrides = (NODE if name in ("sage", "gcn", "gat") else []) + extra
        runs[name] = root / name
        gnnbridge.run(experiment, backend=backend, nproc=1, overrides=overrides, out=runs[name], progress=False)
    return runs


@pytest.mark.parametrize("name", list(CASES))
def test_a_ported_run_evaluates_and_predicts_as_the_original(tmp_path, trained, name):
    _, source_backend, to, _ = CASES[name]
    report = gnnbridge.port(trained[name], to, tmp_path / "moved")
    assert report["from_backend"] == source_backend and report["backend"] == to
    assert report["checkpoints"] == ["best", "latest"]
    moved = checkpoint.load(checkpoint.path_in(tmp_path / "moved", "best"))
    assert moved["config"]["backend"] == to and moved["ported_from"]["backend"] == source_backend
    original = checkpoint.load(checkpoint.path_in(trained[name], "best"))["config"]
    assert {**moved["config"], "backend": None, "sampler": None} == {**original, "backend": None, "sampler": None}
    assert json.loads((tmp_path / "moved" / "results.json").read_text())["backend"] == to

    before, after = gnnbridge.evaluate(trained[name]), gnnbridge.evaluate(tmp_path / "moved")
    assert after["backend"] == to
    assert after["metrics"].keys() == before["metrics"].keys()
    for key, value in before["metrics"].items():
        assert after["metrics"][key] == pytest.approx(value, abs=1e-6), key
    gnnbridge.predict(trained[name], tmp_path / "a.npz")
    gnnbridge.predict(tmp_path / "moved", tmp_path / "b.npz")
    a, b = np.load(tmp_path / "a.npz"), np.load(tmp_path / "b.npz")
    assert sorted(a) == sorted(b)
    for key in a:  # logits and probs (node, graph), or each source's top scores (link): within 1e-5
        np.testing.assert_allclose(b[key], a[key], atol=1e-5, rtol=0, err_msg=key)


@pytest.mark.parametrize("name", ["sage", "rec-sparse"])
def test_a_ported_run_resumes_with_its_optimizer_as_if_it_had_never_moved(tmp_path, trained, name):
    # Core's sampler on both libraries and no dropout: the same batches, so the extended runs
    # agree step for step only if the Adam (SparseAdam) moments moved with the weights.
    _, source, to, _ = CASES[name]
    gnnbridge.port(trained[name], to, tmp_path / "moved")
    extend = ["train.epochs=4"]
    there = gnnbridge.run(resume=trained[name], overrides=extend, progress=False)
    here = gnnbridge.run(resume=tmp_path / "moved", overrides=extend, progress=False)
    assert here["backend"] == to and there["backend"] == source
    np.testing.assert_allclose([h["loss"] for h in here["history"]], [h["loss"] for h in there["history"]], rtol=1e-4)


def test_a_ported_sgd_run_moves_its_momentum_and_schedule(tmp_path):
    """SGD's momentum buffers move by neutral name as Adam's moments do, the schedule's state with them."""
    sgd = ["train.optimizer=sgd", "train.momentum=0.9", "train.lr=0.05", "train.schedule=step", "train.step_size=1"]
    overrides = [*NODE, "sampler.kind=core", "model.dropout=0", *sgd, "train.gamma=0.5"]
    gnnbridge.run("sage-synthetic", backend="dgl", nproc=1, overrides=overrides, out=tmp_path / "run", progress=False)
    gnnbridge.port(tmp_path / "run", "pyg", tmp_path / "moved")
    moved = checkpoint.load(checkpoint.path_in(tmp_path / "moved", "latest"))
    assert moved["scheduler"]["last_epoch"] == 2
    assert all("momentum_buffer" in s for s in moved["optimizer"]["state"].values())
    extend = ["train.epochs=4"]
    there = gnnbridge.run(resume=tmp_path / "run", overrides=extend, progress=False)
    here = gnnbridge.run(resume=tmp_path / "moved", overrides=extend, progress=False)
    assert [h["lr"] for h in here["history"]] == [h["lr"] for h in there["history"]]
    np.testing.assert_allclose([h["loss"] for h in here["history"]], [h["loss"] for h in there["history"]], rtol=1e-4)


def test_what_cannot_be_ported_is_one_line_and_writes_nothing(tmp_path, trained, refused):
    gnnbridge.run(overrides=["model.arch=GraphSAGE", *NODE], backend="pyg", out=tmp_path / "zoo", progress=False)
    gat = str(trained["gat"])
    for args, needle in [
        (["zoo", "--to", "dgl"], "GraphSAGE"),
        ([gat, "--to", "pyg"], "was trained on pyg already"),
        ([gat, "--to", "mxnet"], "mxnet"),
        ([gat, "--to", ""], "needs a backend to move to"),
        ([gat, "--to", "dgl", "--set", "model.hidden=8"], "port keeps task, model as trained"),
        (["nowhere", "--to", "dgl"], "is not a run folder"),
        ([gat, "--to", "dgl", "--out", "taken"], "not empty"),
    ]:
        if "taken" in args:
            (tmp_path / "taken").mkdir()
            (tmp_path / "taken" / "notes.txt").write_text("mine")
        out = [] if "--out" in args else ["--out", "new"]
        one_line(refused("port", *args, *out), needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken", "zoo"]
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["notes.txt"]
