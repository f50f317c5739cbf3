"""The command line, end to end, in a process of its own, as a user runs it."""

import json
import os

import helpers
import numpy as np
import pytest


def gnnbridge(*args, cwd=None, timeout=300):
    return helpers.gnnbridge(*args, cwd=cwd or os.getcwd(), timeout=timeout)


def assert_one_line_error(proc, *needles):
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0]


# Explicit splits (train 0-249, val 250-299, test 300-399), for the split checks.
SPLITS = {
    "train_idx": np.arange(250, dtype=np.int64),
    "val_idx": np.arange(250, 300, dtype=np.int64),
    "test_idx": np.arange(300, 400, dtype=np.int64),
}


def write_npz(path, n=400, classes=3, seed=0, **overrides):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n).astype(np.int64)
    src = rng.integers(0, n, 6 * n)
    # Homophilous edges: mostly to a node with the same label.
    same = np.array([rng.choice(np.flatnonzero(y == y[s])) for s in src])
    dst = np.where(rng.random(6 * n) < 0.85, same, rng.integers(0, n, 6 * n))
    arrays = {
        "edge_index": np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])]).astype(np.int64),
        "x": (rng.normal(size=(n, 8)) + 0.3 * np.eye(classes, 8)[y]).astype(np.float32),
        "y": y,
    }
    arrays.update(overrides)
    np.savez(path, **arrays)
    return path


@pytest.mark.slow
def test_train_end_to_end_two_ranks(tmp_path):
    out = tmp_path / "a"
    proc = gnnbridge("train", "--backend", "dgl", "--nproc", "2", "--out", str(out), "--set", "train.epochs=2")
    assert proc.returncode == 0, proc.stderr
    assert "test_acc" in proc.stdout
    results = json.loads((out / "results.json").read_text())
    assert results["backend"] == "dgl" and results["world_size"] == 2
    assert (out / "config.yaml").exists()


@pytest.mark.slow
def test_train_on_an_npz_file_with_fanouts_override(tmp_path):
    path = write_npz(tmp_path / "graph.npz")
    out = tmp_path / "run"
    proc = gnnbridge(
        "train",
        "--dataset",
        str(path),
        "--backend",
        "pyg",
        "--nproc",
        "2",
        "--out",
        str(out),
        "--set",
        "sampler.fanouts=[15,5]",
        "--set",
        "train.epochs=6",
        "--set",
        "train.batch_size=32",
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["dataset"]["num_nodes"] == 400
    assert results["dataset"]["train"] == 240  # random 60/20/20 split when the file has none
    assert results["metrics"]["test_acc"] > 0.6


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--backend", "dlg"], ["Unknown backend 'dlg'", "Available: dgl, pyg"]),
        (
            ["--set", "model.arch=gta"],
            [
                "Unknown model.arch 'gta' (did you mean 'gat'?)",
                "gat, gcn, gine, hgt, rgcn, sage",
                "--set model.arch=my_lab.models:DeepSAGE",
            ],
        ),
        (
            ["--set", "model.arch=gat", "--set", "model.hidden=10"],
            ["model.hidden=10 is not divisible by model.heads=4"],
        ),
        (["--set", "sampler.kind=fast"], ["Unknown sampler.kind 'fast'", "Available: auto, core, native"]),
        (["--dataset", "reddt"], ["Unknown dataset 'reddt'", "synthetic"]),
        (["--dataset", "IMDB-BINARY"], ["Unknown dataset 'IMDB-BINARY' (did you mean 'imdb-binary'?)"]),
        (["--set", "model.hiden=3"], ["did you mean 'hidden'"]),
        (["--set", "train.batch_size=0"], ["train.batch_size=0"]),
        (["--dataset", "missing.npz"], ["missing.npz' does not exist"]),
        (["no-such-experiment"], ["Unknown experiment 'no-such-experiment'"]),
        (["--nproc", "two"], ["'two' is not a valid integer"]),
        (["--set", "train.seed=99999999999999999999"], ["train.seed=99999999999999999999 is too large"]),
        (["--nproc", "64"], ["nproc=64 but this process may use", "use --nproc"]),
        (["--set", "model.hidden=0"], ["model.hidden=0 is out of range; expected a positive integer"]),
        (["--set", "model.hidden=big"], ["model.hidden='big' has the wrong type: expected int, got str"]),
        (["--set", "sampler.fanouts=[10,0]"], ["sampler.fanouts=[10, 0] has 0", "-1 for all neighbours"]),
        (["--set", "sampler.fanouts=[10,-2]"], ["has -2"]),
        (["--set", "train.patience=-1"], ["train.patience=-1 is out of range; expected an integer >= 0"]),
        (["--set", "train.monitor=val_accuracy"], ["(did you mean 'val_acc'?)", "val_macro_f1"]),
        (["--set", "train.monitor=val_roc_auc"], ["needs two classes but the dataset has 8"]),
        (["--set", "train.checkpoint_every=2.5"], ["expected int, got float"]),
        (["--timeout", "0"], ["timeout=0.0 is out of range; expected 0 < timeout <= 604800 (seconds)"]),
        (["missing.yaml"], ["Config file 'missing.yaml' does not exist"]),
        (["--set", "target=regression"], ["y holds a class per node (8 classes), but target=regression reads float32"]),
        (["--set", "target=regresion"], ["Unknown target 'regresion' (did you mean 'regression'?)", "multilabel"]),
        (
            ["--set", "target=regression", "--set", "train.loss=bce"],
            ["train.loss=bce does not apply to target=regression; choose one of: mse, l1, huber"],
        ),
        (
            ["--set", "target=regression", "--set", "train.monitor=val_acc"],
            ["train.monitor=val_acc does not score task=node and target=regression", "val_rmse, val_mae, val_r2"],
        ),
        (
            ["--set", "task=link", "--set", "target=multilabel"],
            ["target=multilabel applies to task=node, edge or graph"],
        ),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, refused, args, needles):
    proc = refused("train", *args, "--out", str(tmp_path / "new" / "out"))
    assert_one_line_error(proc, *needles)
    assert not (tmp_path / "new").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "y, target, needles",
    [
        (np.zeros((400, 2), np.float32), "class", ["y is float32 [400, 2]", "set target=regression or"]),
        (np.full((400, 3), 2, np.int64), "multilabel", ["y holds 2; multilabel targets are 0 or 1"]),
        (np.full(400, np.inf, np.float32), "regression", ["y holds an infinite value (first at node 0)"]),
        (np.zeros(400, np.float32), "multilabel", ["y is float32 [400]; target=multilabel reads [items, L]"]),
    ],
)
def test_labels_that_do_not_suit_the_target_are_one_line(tmp_path, refused, y, target, needles):
    path = write_npz(tmp_path / "graph.npz", y=y)
    proc = refused("train", "--dataset", str(path), "--set", f"target={target}", "--out", str(tmp_path / "new"))
    assert_one_line_error(proc, *needles)
    assert not (tmp_path / "new").exists()


def test_native_pyg_sampler_without_its_extension_is_refused_before_anything_runs(tmp_path):
    import torch_geometric.typing as pyg_typing

    if pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE:
        pytest.skip("pyg-lib or torch-sparse is installed: the native sampler can run")
    proc = gnnbridge(
        "train", "--backend", "pyg", "--nproc", "2", "--set", "sampler.kind=native", "--out", str(tmp_path / "out")
    )
    assert_one_line_error(proc, "needs pyg-lib or torch-sparse", "sampler.kind=core")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "overrides, needle",
    [
        ({"x": np.zeros((400, 8), dtype=np.float64)}, "x has dtype float64; expected float32"),
        ({"edge_index": np.array([[0, 400], [1, 2]], dtype=np.int64)}, "node id 400, outside [0, 400)"),
        ({"y": np.zeros(5, dtype=np.int64)}, "y has 5 labels but x has 400 rows"),
        ({"train_idx": np.arange(10, dtype=np.int64)}, "give all three splits or none"),
        ({"x": np.zeros((400, 0), dtype=np.float32)}, "x has 0 feature columns"),
        (
            {"x": np.where(np.arange(400)[:, None] == 7, np.nan, 0).astype(np.float32)},
            "x holds NaN or inf values (first at node 7)",
        ),
        ({"x": np.full((400, 8), np.inf, dtype=np.float32)}, "x holds NaN or inf values"),
        ({"edge_index": np.zeros((3, 5), dtype=np.int64)}, "edge_index has shape [3, 5]; expected [2, E]"),
        ({"edge_index": np.array([[-1], [0]], dtype=np.int64)}, "node id -1, outside [0, 400)"),
        (
            {"y": np.zeros((400, 2), dtype=np.int64)},
            "y is int64 [400, 2]; target=class reads int64 [items], a class per item (a 0/1 column per label",
        ),
        ({"y": np.arange(400, dtype=np.int32)}, "y has dtype int32; expected int64"),
        (SPLITS | {"val_idx": np.array([], dtype=np.int64)}, "The val split is empty"),
        (SPLITS | {"test_idx": np.arange(250, 400, dtype=np.int64)}, "The test split overlaps an earlier split"),
        (SPLITS | {"test_idx": np.arange(300, 401, dtype=np.int64)}, "test_idx holds node id 400, outside [0, 400)"),
    ],
)
def test_malformed_npz_is_refused(tmp_path, refused, overrides, needle):
    path = write_npz(tmp_path / "bad.npz", **overrides)
    proc = refused("train", "--dataset", str(path), "--out", str(tmp_path / "out"))
    assert_one_line_error(proc, needle)
    assert not (tmp_path / "out").exists()


def test_missing_keys_unreadable_files_and_tiny_splits_are_refused(tmp_path, refused):
    np.savez(tmp_path / "nox.npz", edge_index=np.zeros((2, 1), dtype=np.int64), y=np.zeros(3, dtype=np.int64))
    (tmp_path / "text.npz").write_text("edge_index,x,y")
    (tmp_path / "folder.npz").mkdir()
    write_npz(tmp_path / "tiny-val.npz", **(SPLITS | {"val_idx": np.array([299], dtype=np.int64)}))
    cases = [
        (["--dataset", "nox.npz"], "nox.npz: missing array(s) x; a graph .npz needs edge_index int64 [2,E], x float32"),
        (["--dataset", "text.npz"], "text.npz: cannot be read as a numpy .npz file"),
        (["--dataset", "folder.npz"], "folder.npz' is a folder, not a file"),
        (["--dataset", "tiny-val.npz", "--nproc", "2"], "The val split has 1 node(s), fewer than nproc=2"),
    ]
    if os.geteuid() != 0:  # root reads any file
        write_npz(tmp_path / "locked.npz").chmod(0)
        cases.append((["--dataset", "locked.npz"], "locked.npz: cannot be read"))
    for args, needle in cases:
        assert_one_line_error(refused("train", *args, "--out", "out"), needle)
        assert not (tmp_path / "out").exists()


def write_graphs_npz(path, **overrides):
    """A collection in the documented .npz layout (from the built-in generator)."""
    from gnnbridge.plugins.datasets import family_graphs

    data = family_graphs(90, 6, 14, seed=0)
    arrays = {
        "x": data.x.numpy(),
        "edge_index": data.edge_index.numpy(),
        "node_ptr": data.node_ptr.numpy(),
        "y": data.y.numpy(),
    }
    arrays.update(overrides)
    np.savez(path, **arrays)
    return path


GIN = ["--set", "task=graph", "--set", "model.arch=gin"]


@pytest.mark.slow
def test_train_gin_on_a_graph_collection_npz(tmp_path):
    path = write_graphs_npz(tmp_path / "graphs.npz")
    out = tmp_path / "run"
    proc = gnnbridge(
        "train",
        "--dataset",
        str(path),
        *GIN,
        "--set",
        "model.layers=3",
        "--set",
        "train.epochs=3",
        "--set",
        "train.batch_size=16",
        "--backend",
        "pyg",
        "--nproc",
        "2",
        "--out",
        str(out),
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["task"] == "graph" and results["sampler"] == "PygGraphLoader"
    assert results["experiment"] == "graphs"  # named after the file, not the default experiment
    assert "graphs on pyg (2 x cpu)" in proc.stdout
    assert results["dataset"]["num_graphs"] == 90 and results["dataset"]["train"] == 72  # seeded 80/10/10
    assert {"test_acc", "test_macro_f1"} <= set(results["metrics"])
    assert (out / "curves.png").exists()


@pytest.mark.parametrize(
    "overrides, needle",
    [
        ({"edge_index": np.array([[0, 1], [1, 20]], dtype=np.int64)}, "edge_index joins two graphs"),
        ({"node_ptr": np.array([0, 10, 20], dtype=np.int64)}, "node_ptr must cover every row of x"),
        ({"node_ptr": np.array([0, 10, 5, 30], dtype=np.int64)}, "every graph needs at least one node"),
        ({"y": np.arange(4, dtype=np.int64) % 3}, "y has 4 labels but node_ptr describes 90 graphs"),
        ({"y": np.ones(90, dtype=np.int64)}, "y holds one class only"),
        ({"node_ptr": np.zeros(91, dtype=np.int32)}, "node_ptr has dtype int32; expected int64"),
    ],
)
def test_malformed_graph_collection_is_refused(tmp_path, refused, overrides, needle):
    path = write_graphs_npz(tmp_path / "bad.npz", **overrides)
    proc = refused("train", "--dataset", str(path), *GIN, "--out", str(tmp_path / "out"))
    assert_one_line_error(proc, "bad.npz", needle)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args, needles",
    [
        (
            ["--set", "task=graph"],
            ["model.arch='sage' is a model for task=node, link, edge, not task=graph", "model.arch=gin"],
        ),
        (
            ["gin-synthetic", "--set", "task=node", "--set", "sampler.fanouts=[5,5,5]"],
            ["model.arch='gin' is a model for task=graph, not task=node"],
        ),
        (["gin-synthetic", "--set", "model.pooling=max"], ["model.pooling='max' is not supported", "sum, mean"]),
        (["gin-synthetic", "--dataset", "karate"], ["one graph with a label per node but task=graph"]),
        (["--dataset", "gin-synthetic"], ["collection of 1000 graphs", "--set task=graph --set model.arch=gin"]),
        # Heterogeneous graphs and link prediction.
        (
            ["--set", "task=link", "--set", "model.arch=gcn"],
            ["model.arch='gcn' is a model for task=node, not task=link", "use one of: hgt, rgcn, sage"],
        ),
        (["mag-synthetic", "--set", "model.arch=gat"], ["dataset 'mag-synthetic' is heterogeneous", "sage"]),
        (
            ["rec-synthetic", "--set", "link.edge_type=sells"],
            ["link.edge_type='sells' is not an edge type", "user,buys,item"],
        ),
        (["mag-synthetic", "--set", "task=link"], ["has 3 edge types", "--set link.edge_type=RELATION"]),
        (["rec-synthetic", "--set", "task=node"], ["no node labels", "task=link"]),
        (["--dataset", "rec-synthetic", "--set", "task=graph", "--set", "model.arch=gin"], ["task=graph classifies"]),
        (  # the experiment's fanouts would be ignored: said before the data is read
            ["rec-synthetic", "--set", "task=graph", "--set", "model.arch=gin"],
            ["sampler.fanouts=[10, 5] applies to task=node, link or edge only, but it is 'graph'"],
        ),
        (["rec-synthetic", "--set", "sampler.kind=native"], ["LinkNeighborLoader", "sampler.kind=core or auto"]),
        (["rec-synthetic", "--set", "sampler.kind=example-nope"], ["plugin samplers sample homogeneous graphs"]),
        (["rec-synthetic", "--set", "train.monitor=val_acc"], ["does not score task=link", "val_mrr"]),
        (
            ["rec-synthetic", "--set", "link.protocol=ogb"],
            ["link.protocol='ogb' is not an evaluation protocol", "per-edge, shared"],
        ),
        (
            ["rec-synthetic", "--set", "link.protocol=shared", "--set", "train.monitor=val_mrr"],
            ["does not score task=link with link.protocol=shared", "val_hits@10"],
        ),
        (
            ["rec-synthetic", "--set", "link.protocol=shared", "--set", "link.eval_negatives=3000"]
            + ["--set", "dataset.options.num_users=50", "--set", "dataset.options.num_items=40"],
            ["link.eval_negatives=3000 shared negatives per split", "has 2,000 possible pairs"],
        ),
        (
            ["rec-synthetic", "--set", "sampler.edge_fanouts={sells: [5, 5]}"],
            ["sampler.edge_fanouts key='sells' is not an edge type"],
        ),
        (
            ["--set", "sampler.edge_fanouts={to: [5, 5]}"],
            ["sampler.edge_fanouts sets fanouts per edge type", "use sampler.fanouts"],
        ),
    ],
)
def test_task_model_and_dataset_must_match(tmp_path, refused, args, needles):
    proc = refused("train", *args, "--out", str(tmp_path / "out"))
    assert_one_line_error(proc, *needles)
    assert not (tmp_path / "out").exists()


def test_existing_run_folder_is_never_overwritten(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("{}")
    proc = gnnbridge("train", "--out", str(out))
    assert_one_line_error(proc, "already exists and is not empty")
    assert (out / "results.json").read_text() == "{}"


def test_backends_plugins_experiments_commands():
    rows = {row["name"]: row for row in json.loads(gnnbridge("backends", "--json").stdout)}
    assert rows["pyg"]["available"] and rows["dgl"]["available"], rows  # the pinned stack runs both
    assert rows["dgl"]["versions"]["dgl"] == "2.1.0"
    table = gnnbridge("backends").stdout.splitlines()
    assert any(line.split()[:2] == ["dgl", "available"] for line in table), table
    plugins = json.loads(gnnbridge("plugins").stdout)
    pyg = next(p for p in plugins if p["name"] == "pyg")
    assert pyg["module"] == "gnnbridge.backends.pyg.plugin"
    assert pyg["hooks"] == [
        "register_backends",
        "register_dataset_libraries",
        "register_graph_readers",
        "register_models",
    ]
    assert pyg["registers"] == {
        "backends": ["pyg"],
        "models": [
            *("EdgeCNN", "GAT", "GCN", "GIN", "GraphSAGE", "PNA"),
            *("gat", "gcn", "gin", "gine", "hgt", "rgcn", "sage"),
        ],
        "graph_readers": ["pyg"],
        "dataset_libraries": ["pyg"],
    }
    proc = gnnbridge("experiments")
    assert "sage-synthetic" in proc.stdout and "reddit-sage" in proc.stdout
    assert "gin-synthetic" in proc.stdout and "imdb-binary" in proc.stdout


def test_help_shows_examples():
    proc = gnnbridge("train", "--help")
    assert proc.returncode == 0 and "gnnbridge train --backend dgl --nproc 2" in proc.stdout


ENDS_LATE = """
import atexit, concurrent.futures, os, threading, time

def later(name, wait=0.0):
    time.sleep(wait)
    with open(os.path.join(os.environ["MARKS"], name), "w") as f:
        f.write("done")

atexit.register(later, "atexit")
threading.Thread(target=later, args=("thread", 1.0)).start()  # not a daemon: the exit waits for it
# A pool left open, its worker idle once its task is done: a normal exit tells it to stop first.
POOL = concurrent.futures.ThreadPoolExecutor(1)  # held, as a module's reader pool is
POOL.submit(later, "pool", 0.5)
"""


def test_the_program_ends_without_teardown_but_after_what_an_exit_waits_for(tmp_path):
    """``gnnbridge`` skips Python's teardown of its modules (seconds with torch imported), not
    what a normal exit does first: a plugin's non-daemon thread, its idle thread pool and its
    atexit function run to their end (a pool left open once hung the exit), and the output
    reaches the pipe whole."""
    marks = tmp_path / "marks"
    marks.mkdir()
    env = helpers.hooked_env(tmp_path, ENDS_LATE, MARKS=str(marks))
    shown = helpers.gnnbridge("config", "schema", cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["properties"]  # all of it, parsed
    assert sorted(p.name for p in marks.iterdir()) == ["atexit", "pool", "thread"]
    refused = helpers.gnnbridge("train", "--set", "train.epochs=0", cwd=tmp_path, env=env)
    assert refused.returncode == 1 and refused.stderr.startswith("Error: ")


def test_targets_lists_each_target_with_its_losses_and_monitors_and_each_family_with_its_kind(tmp_path):
    proc = helpers.in_process("targets", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    targets, families = proc.stdout.split("\ntask families (task=NAME):\n")
    names = [line.split()[0] for line in targets.splitlines() if not line.startswith(" ")]
    assert names == ["class", "multilabel", "regression"]
    assert "losses: mse, l1, huber; monitors: val_rmse, val_mae, val_r2" in targets
    names = [line.split()[0] for line in families.splitlines() if not line.startswith(" ")]
    assert names == ["edge", "graph", "link", "node"]
    assert "runs as: link; targets: class" in families
