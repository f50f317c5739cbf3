"""Folder datasets: a folder of .npy files, prepared once with ``gnnbridge prepare``, trains as
the same graph in one .npz does; what prepare derives equals what a run derives in memory; a
folder that is not prepared, or changed since, is refused in one line."""

from __future__ import annotations

import json
import math
import os
import pickle
import subprocess

import helpers
import numpy as np
import pytest
import torch

import gnnbridge
from gnnbridge.core.errors import DataError
from gnnbridge.core.records.csc import csc_from_coo
from gnnbridge.core.records.reading import Reading
from gnnbridge.core.storage.folder import MANIFEST, open_prepared
from gnnbridge.core.storage.prepare import build_csc, prepare_folder
from gnnbridge.core.tasks import for_node_task
from gnnbridge.plugins.folder_datasets import prepare
from gnnbridge.plugins.npz import load_hetero_npz
from gnnbridge.testing.conformance import small_graph

SPLITS = ("train_idx", "val_idx", "test_idx")
TINY = ["train.epochs=1", "sampler.fanouts=[5,5]", "train.batch_size=64", "model.hidden=16"]


def graph_arrays(n: int = 120) -> dict:
    g = small_graph(n=n)
    return {"x": g.x.numpy(), "edge_index": g.edge_index.numpy(), "y": g.y.numpy()}


def save_folder(folder, arrays: dict):
    folder.mkdir()
    for key, value in arrays.items():
        np.save(folder / f"{key}.npy", value)
    return folder


def hetero_arrays() -> dict:
    rng = np.random.default_rng(0)
    users, items = 30, 20
    return {
        "num_nodes__user": np.array([users], dtype=np.int64),
        "x__item": rng.normal(size=(items, 5)).astype(np.float32),
        "y__item": (np.arange(items) % 3).astype(np.int64),
        "edge_index__user__buys__item": np.stack(
            [np.repeat(np.arange(users), 4), rng.integers(0, items, users * 4)]
        ).astype(np.int64),
    }


def test_the_prepared_topology_is_csc_from_coo_exactly(tmp_path):
    """Chunks of 7 edges, many duplicates and empty destinations: the counting sort over chunks
    keeps each destination's edges in input order, as the in-memory build does."""
    from tqdm import tqdm

    rng = np.random.default_rng(1)
    n = 40
    ei = np.stack([rng.integers(0, n, 500), rng.integers(0, n // 2, 500)]).astype(np.int64)
    (tmp_path / "prepared").mkdir()
    with tqdm(disable=True) as bar:
        spec = build_csc(tmp_path, ei, n, bar, edges_per_chunk=7)
    indptr, indices = csc_from_coo(torch.from_numpy(ei[0]), torch.from_numpy(ei[1]), n)
    assert np.array_equal(np.load(tmp_path / spec["indptr"]["file"]), indptr.numpy())
    assert np.array_equal(np.load(tmp_path / spec["indices"]["file"]), indices.numpy())


def test_a_folder_opens_as_the_npz_graph_mapped_from_its_files(tmp_path):
    arrays = graph_arrays()
    np.savez(tmp_path / "g.npz", **arrays)
    folder = save_folder(tmp_path / "g", arrays)
    prepare(str(folder), progress=False)
    opened = open_prepared(folder, seed=3)
    from gnnbridge.core.interfaces import LoaderConfig
    from gnnbridge.plugins.datasets import load_npz

    loaded = load_npz(LoaderConfig(name="npz", path=str(tmp_path / "g.npz")), 3)
    for key in ("indptr", "indices", "x", "y", "train_idx", "val_idx", "test_idx"):
        assert torch.equal(getattr(opened, key), getattr(loaded, key)), key
    assert opened.num_classes == loaded.num_classes
    # ranks reopen it in its label form, taking edge labels where the run is an edge task and node
    # labels where its family reads them
    assert opened.mapped_from == (open_prepared, (str(folder), 3, Reading()))
    assert isinstance(np.load(folder / "x.npy", mmap_mode="r"), np.memmap)
    maps = open(f"/proc/{os.getpid()}/maps").read()
    assert str(folder / "x.npy") in maps and str(folder / "prepared" / "indices.npy") in maps


def _advised_random(path) -> bool:
    """Whether this process maps ``path`` with ``MADV_RANDOM`` (``rr`` among its VmFlags)."""
    mapping, advised = None, False
    for line in open(f"/proc/{os.getpid()}/smaps"):
        if line[:1] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:  # a mapping's first line
            mapping = line.split()[-1]
        elif line.startswith("VmFlags:") and mapping == str(path):
            advised |= "rr" in line.split()
    return advised


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads the mappings' flags from /proc")
def test_a_folder_too_large_for_the_page_cache_is_read_without_read_around(tmp_path, monkeypatch):
    """Past half of RAM, the large arrays are advised MADV_RANDOM: a fault reads its page, not
    megabytes around a row (measured: 1.5 MB read per 3 KB row on a 31 GB file). A folder that
    fits keeps the kernel's read-around."""
    from gnnbridge.core.storage import folder as folders

    folder = save_folder(tmp_path / "g", graph_arrays())
    prepare(str(folder), progress=False)
    fits = open_prepared(folder)
    assert not _advised_random(folder / "x.npy")
    del fits
    monkeypatch.setattr(folders, "physical_memory", lambda: 1 << 12)  # a machine of 4 KiB
    monkeypatch.setattr(folders, "RANDOM_MIN_BYTES", 1 << 12)
    large = open_prepared(folder)
    assert large.x.nbytes >= 1 << 12 and _advised_random(folder / "x.npy")
    assert not _advised_random(folder / "train_idx.npy")  # too small to matter: left as it was


def test_an_npz_is_streamed_into_a_folder_beside_it(tmp_path):
    arrays = graph_arrays()
    np.savez(tmp_path / "g.npz", **arrays)
    result = prepare(str(tmp_path / "g.npz"), progress=False)
    assert result["out"] == str(tmp_path / "g") and not result["already"]
    for key, value in arrays.items():
        assert np.array_equal(np.load(tmp_path / "g" / f"{key}.npy"), value)
    assert prepare(str(tmp_path / "g.npz"), progress=False)["already"]


def test_an_npz_of_targets_is_streamed_as_a_folder_of_them_is(tmp_path):
    """Float ``y`` (regression, or 0/1 rows for multi-label) and float edge labels are checked as
    the labels they are, not refused as classes of the wrong dtype."""
    arrays = {**graph_arrays(), "y": np.linspace(0, 1, 120, dtype=np.float32)}
    arrays["edge_label"] = np.linspace(0, 1, arrays["edge_index"].shape[1], dtype=np.float32)
    np.savez(tmp_path / "g.npz", **arrays)
    summary = prepare(str(tmp_path / "g.npz"), progress=False)["summary"]
    assert (summary["labels"], summary["edge_labels"], summary["edge_classes"]) == ("targets", "targets", 1)


def test_a_named_datasets_edge_features_and_edge_labels_are_written_into_its_folder(tmp_path):
    """``prepare NAME`` writes what the loader gives: a graph's edge features (in its edge order),
    a typed graph's edge labels, splits and features; each opens as the loader's record."""
    from gnnbridge import hookimpl
    from gnnbridge.core.records.data import GraphData, random_split
    from gnnbridge.core.records.hetero import HeteroSource
    from gnnbridge.testing import registered_plugin

    rng = np.random.default_rng(0)
    ei = torch.from_numpy(rng.integers(0, 30, (2, 200)))
    rows = torch.from_numpy(rng.normal(size=(200, 2)).astype(np.float32))
    plain = GraphData.from_edges(ei, torch.ones(30, 2), torch.arange(30) % 2, *random_split(30, 0), edge_attr=rows)
    rates = ("user", "rates", "item")
    x = {"user": torch.ones(30, 2), "item": torch.ones(30, 2)}
    typed = HeteroSource({"user": 30, "item": 30}, x, {rates: ei}, target_edge=rates, edge_y=torch.arange(200) % 3,
                         edge_attr={rates: rows})  # fmt: skip

    class Named:
        @hookimpl
        def register_datasets(self, register):
            register("edged-plain", lambda config, seed: plain, "a graph with edge features")
            register("edged-typed", lambda config, seed: typed, "a typed graph with edge labels")

    with registered_plugin(Named(), "edged"):
        prepare("edged-plain", out=tmp_path / "plain", progress=False)
        prepare("edged-typed", out=tmp_path / "typed", progress=False)
    assert torch.equal(open_prepared(tmp_path / "plain").edge_attr, plain.edge_attr)
    source = open_prepared(tmp_path / "typed")
    assert torch.equal(source.edge_y, typed.edge_y) and torch.equal(source.edge_attr[rates], rows)


def test_an_npz_changed_after_prepare_is_streamed_again_not_reported_prepared(tmp_path):
    arrays = graph_arrays()
    np.savez(tmp_path / "g.npz", **arrays)
    assert not prepare(str(tmp_path / "g.npz"), progress=False)["already"]
    assert prepare(str(tmp_path / "g.npz"), progress=False)["already"]  # unchanged: nothing to do
    arrays["y"] = (arrays["y"] + 1) % 4
    np.savez(tmp_path / "g.npz", **arrays)
    os.utime(tmp_path / "g.npz", ns=(1, 1))  # a changed file within the old one's mtime granularity
    assert not prepare(str(tmp_path / "g.npz"), progress=False)["already"]
    assert np.array_equal(open_prepared(tmp_path / "g").y.numpy(), arrays["y"])


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["pyg", "dgl"])
@pytest.mark.parametrize("task", ["node", "link"])
def test_training_from_a_folder_gives_the_npz_metrics(tmp_path, backend, task):
    """A link task also maps its topology, from the link cache its run built in the folder."""
    arrays = graph_arrays()
    np.savez(tmp_path / "g.npz", **arrays)
    folder = save_folder(tmp_path / "folder", arrays)
    prepare(str(folder), progress=False)
    runs = {
        name: gnnbridge.run(
            dataset=str(src),
            backend=backend,
            nproc=1,
            overrides=[*TINY, f"task={task}"],
            out=tmp_path / name,
            progress=False,
        )
        for name, src in (("npz", tmp_path / "g.npz"), ("dir", folder))
    }
    assert runs["dir"]["metrics"] == runs["npz"]["metrics"]
    saved = json.loads((tmp_path / "dir" / "results.json").read_text())
    assert saved["metrics"] == runs["npz"]["metrics"]
    caches = list((folder / "prepared").glob("link-*"))
    assert len(caches) == (task == "link") and all((c / "manifest.json").is_file() for c in caches)


def test_an_npz_and_its_folder_without_labels_train_evaluate_and_predict_a_link_task(tmp_path):
    """A link task reads no node labels: prepare takes a graph of features and edges alone, and
    the .npz and its folder each train task=link to the same numbers, evaluate to them and
    write top-k lists; node classification on either is refused in the line it always was."""
    a = graph_arrays()
    np.savez(tmp_path / "g.npz", x=a["x"], edge_index=a["edge_index"])
    helpers.ok(helpers.in_process("prepare", "g.npz", "--quiet", cwd=tmp_path))
    metrics = {}
    for name, dataset in (("npz", "g.npz"), ("folder", "g")):
        link = ("--set", "task=link", "--set", "train.epochs=1", "--out", name)
        helpers.ok(helpers.in_process("train", "--dataset", dataset, *link, cwd=tmp_path))
        metrics[name] = json.loads((tmp_path / name / "results.json").read_text())["metrics"]
        assert gnnbridge.evaluate(tmp_path / name)["metrics"] == metrics[name]
        helpers.ok(helpers.in_process("predict", name, "--top-k", "5", "--out", f"{name}.npz", cwd=tmp_path))
        with np.load(tmp_path / f"{name}.npz") as lists:
            assert lists["top_dst"].shape == (120, 5)
        proc = helpers.in_process("train", "--dataset", dataset, "--out", f"{name}-node", cwd=tmp_path)
        assert proc.returncode == 1 and proc.stderr.splitlines() == [
            f"Error: {tmp_path / dataset}: no y (int64, a class per node, or per graph of a collection); training "
            "and evaluation need labels (predict takes a graph without them)."
        ]
        assert not (tmp_path / f"{name}-node").exists()
    assert metrics["npz"] == metrics["folder"] and "test_mrr" in metrics["npz"]


@pytest.mark.slow
def test_a_run_from_a_folder_evaluates_predicts_resumes_ports_and_compares(tmp_path, tmpdir_layers):
    """Every command that reads a run's data takes the folder; sampled predict with its logits
    forced to disk (eval.layer_store=disk) writes what it writes from memory."""
    arrays = graph_arrays()
    folder = save_folder(tmp_path / "g", arrays)
    prepare(str(folder), progress=False)
    run = tmp_path / "run"
    sampled = ["eval.mode=sampled", "sampler.kind=core"]
    gnnbridge.run(dataset=str(folder), backend="pyg", nproc=1, overrides=[*TINY, *sampled], out=run, progress=False)
    scored = gnnbridge.evaluate(run)
    assert scored["metrics"]["test_acc"] == json.loads((run / "results.json").read_text())["metrics"]["test_acc"]
    for store in ("memory", "disk"):
        gnnbridge.predict(run, tmp_path / f"{store}.npz", overrides=[f"eval.layer_store={store}"])
    memory, disk = np.load(tmp_path / "memory.npz"), np.load(tmp_path / "disk.npz")
    assert sorted(disk) == sorted(memory) and disk["logits"].shape == (120, arrays["y"].max() + 1)
    for key in memory:
        np.testing.assert_array_equal(disk[key], memory[key], err_msg=key)
    assert list(tmpdir_layers.glob("gnnbridge-layers-*")) == []
    resumed = gnnbridge.run(resume=run, overrides=["train.epochs=2"], progress=False)
    assert len(resumed["history"]) == 2
    gnnbridge.port(run, "dgl", tmp_path / "moved")
    assert gnnbridge.evaluate(tmp_path / "moved")["metrics"]["test_acc"] == pytest.approx(
        gnnbridge.evaluate(run)["metrics"]["test_acc"], abs=1e-6
    )
    args = ("compare", "--dataset", folder, "--same-batches", "--epochs", "1", *[f"--set={o}" for o in TINY[1:]])
    both = helpers.gnnbridge(*args, cwd=tmp_path, timeout=600)
    assert both.returncode == 0, both.stderr[-2000:]
    assert "dgl vs pyg: agree" in both.stdout


@pytest.fixture
def tmpdir_layers(tmp_path, monkeypatch):
    """$TMPDIR for this test (in-process commands): where layer files would be left over."""
    import tempfile

    layers = tmp_path / "tmp"
    layers.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(layers))
    return layers


def test_a_run_whose_folder_moved_is_pointed_at_the_set_fix_as_an_npz_run_is(tmp_path, refused):
    """evaluate, predict and --resume read the run's config.yaml, which names the folder it was
    prepared in; once the folder moves, each says how to point the run at its new place."""
    folder = save_folder(tmp_path / "g", graph_arrays())
    prepare(str(folder), progress=False)
    run = tmp_path / "run"
    steps = [*TINY, "train.batch_size=16"]  # enough steps an epoch that train warns of nothing
    gnnbridge.run(dataset=str(folder), backend="pyg", nproc=1, overrides=steps, out=run, progress=False)
    folder.rename(tmp_path / "moved")
    fix = "(a run or checkpoint whose data moved: --set dataset.path=NEW)"
    for command in (
        ["evaluate", str(run)],
        ["predict", str(run), "--out", "p.npz"],
        ["train", "--resume", str(run), "--set", "train.epochs=2"],
    ):
        seen = refused(*command)
        lines = seen.stderr.strip().splitlines()
        assert len(lines) == 1 and f"Dataset folder '{folder}' does not exist" in lines[0], seen.stderr
        assert lines[0].endswith(f"{fix}."), lines[0]
    assert not (tmp_path / "p.npz").exists()
    scored = gnnbridge.evaluate(run, overrides=[f"dataset.path={tmp_path / 'moved'}"])
    assert scored["metrics"]["test_acc"] == json.loads((run / "results.json").read_text())["metrics"]["test_acc"]


def test_a_folder_changed_after_prepare_is_refused_naming_the_file(tmp_path, refused):
    arrays = graph_arrays()
    folder = save_folder(tmp_path / "g", arrays)
    prepare(str(folder), progress=False)
    np.save(folder / "y.npy", arrays["y"][::-1].copy())
    os.utime(folder / "y.npy", ns=(1, 1))  # a change must show even within one clock tick
    seen = refused("train", "--dataset", str(folder))
    assert seen.returncode == 1
    assert seen.stderr.strip() == (
        f"Error: {folder / 'y.npy'} changed since `gnnbridge prepare` (size/modified time); "
        f"run gnnbridge prepare {folder} again"
    )


def test_a_folder_that_is_not_prepared_is_refused_with_the_command(tmp_path, refused):
    folder = save_folder(tmp_path / "g", graph_arrays())
    for command in (["train"], ["config", "show"]):
        seen = refused(*command, "--dataset", str(folder))
        assert seen.returncode == 1 and seen.stdout == ""
        assert seen.stderr.strip() == f"Error: {folder} is not prepared; run: gnnbridge prepare {folder}"
    assert not (tmp_path / "runs").exists()


def test_config_show_names_a_prepared_folder_as_the_folder_dataset(tmp_path):
    folder = save_folder(tmp_path / "g", graph_arrays())
    prepare(str(folder), progress=False)
    shown = helpers.gnnbridge("config", "show", "--dataset", folder, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    section = shown.stdout.split("dataset:", 1)[1]
    assert "name: folder" in section and f"path: {folder}" in section


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder of the graph's files that this process cannot write: chmod 555, or for root (who
    writes anyway) a tmpfs mounted read-only."""
    folder = save_folder(tmp_path / "ro", graph_arrays())
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    mount = ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)]
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    if subprocess.run(mount, capture_output=True).returncode != 0:
        pytest.skip("root writes into chmod-read-only folders, and no read-only file system can be mounted here")
    try:
        for name, content in files.items():
            (folder / name).write_bytes(content)
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


def test_a_read_only_folder_is_refused_with_the_out_fix_and_out_works(tmp_path, read_only_folder, refused):
    folder = read_only_folder
    seen = refused("prepare", str(folder), "--quiet")
    assert seen.returncode == 1 and len(seen.stderr.strip().splitlines()) == 1
    assert f"{folder} is not writable" in seen.stderr and f"gnnbridge prepare {folder} --out DIR" in seen.stderr
    out = tmp_path / "elsewhere"
    result = prepare(str(folder), out=str(out), progress=False)
    assert result["out"] == str(out)
    assert open_prepared(out).num_nodes == 120
    assert sorted(p.name for p in folder.iterdir()) == ["edge_index.npy", "x.npy", "y.npy"]


def test_two_prepares_at_once_end_with_one_valid_manifest(tmp_path):
    folder = save_folder(tmp_path / "g", graph_arrays(n=2000))
    procs = [helpers.start("prepare", folder, "--quiet", cwd=tmp_path) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sum("already prepared" in out for out, _ in outs) == 1, outs
    assert not [p.name for p in (folder / "prepared").iterdir() if p.name.endswith(".partial")]
    assert open_prepared(folder).num_nodes == 2000


def test_a_prepare_whose_write_probe_another_prepare_swept_up_goes_on(tmp_path, monkeypatch):
    """The second of two prepares probes the folder before it waits for the lock; the first,
    holding it, removes leftover temporary files, the probe among them (a race seen in a full
    suite run: the second prepare then failed with exit code 2)."""
    import pathlib

    from gnnbridge.core.files import remove_partial

    folder = save_folder(tmp_path / "g", graph_arrays())
    touch = pathlib.Path.touch

    def touch_then_swept(self, *args, **kwargs):
        touch(self, *args, **kwargs)
        remove_partial(self.parent)  # what the prepare holding the lock does meanwhile

    monkeypatch.setattr(pathlib.Path, "touch", touch_then_swept)
    assert not prepare(str(folder), progress=False)["already"]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_width_features_are_recorded_and_opened_as_such(tmp_path, dtype):
    arrays = graph_arrays()
    folder = save_folder(tmp_path / "g", arrays)
    prepare(str(folder), dtype=dtype, progress=False)
    manifest = json.loads((folder / MANIFEST).read_text())
    x = manifest["arrays"]["x"]
    assert {k: x[k] for k in ("file", "dtype", "shape")} == {
        "file": f"prepared/x.{dtype}.npy",
        "dtype": dtype,
        "shape": [120, 12],
    }
    assert x["size"] == (folder / x["file"]).stat().st_size  # a derived file is checked at open like an input
    x = open_prepared(folder).x
    assert x.dtype == getattr(torch, dtype) and torch.equal(x, torch.from_numpy(arrays["x"]).to(x.dtype))


def test_float16_refuses_features_it_cannot_hold(tmp_path, refused):
    arrays = graph_arrays()
    arrays["x"][7, 0] = 1e6
    folder = save_folder(tmp_path / "g", arrays)
    seen = refused("prepare", str(folder), "--dtype", "float16", "--quiet")
    assert seen.returncode == 1 and "beyond float16's range" in seen.stderr and "first at node 7" in seen.stderr
    assert not (folder / "prepared").exists()  # nothing derived, and no lock either


@pytest.mark.parametrize(
    "change, needle",
    [
        (
            {"edge_index": np.array([[0, 1], [1, 500]], dtype=np.int64)},
            "edge_index holds node id 500, outside [0, 120)",
        ),
        ({"x": np.full((120, 12), np.nan, dtype=np.float32)}, "x holds NaN or inf values (first at node 0)"),
        ({"y": np.arange(120, dtype=np.int64) % 3 + 1}, "y has labels up to 3 but no 0"),
        ({"x": np.zeros((120, 12), dtype=np.float64)}, "x has dtype float64; expected float32"),
        ({"train_idx": np.arange(5, dtype=np.int64)}, "has train_idx but not test_idx, val_idx"),
    ],
)
def test_bad_arrays_are_refused_in_the_npz_wording(tmp_path, change, needle):
    folder = save_folder(tmp_path / "g", {**graph_arrays(), **change})
    with pytest.raises(DataError) as err:
        prepare_folder(folder, progress=False)
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert not (folder / MANIFEST).exists()


def test_a_heterogeneous_folder_opens_as_the_npz_source(tmp_path):
    arrays = hetero_arrays()
    np.savez(tmp_path / "shop.npz", **arrays)
    folder = save_folder(tmp_path / "shop", arrays)
    prepare(str(folder), progress=False)
    opened, loaded = open_prepared(folder), load_hetero_npz(tmp_path / "shop.npz")
    assert opened.num_nodes == loaded.num_nodes and opened.target_node == loaded.target_node == "item"
    assert torch.equal(opened.x["item"], loaded.x["item"]) and torch.equal(opened.y, loaded.y)
    assert opened.edges.keys() == loaded.edges.keys()
    assert all(torch.equal(opened.edges[et], loaded.edges[et]) for et in loaded.edges)


def shop_with_views() -> dict:
    """The shop with a second relation, saved in an order that is not by name: views before
    buys, items before users."""
    arrays = hetero_arrays()
    rng = np.random.default_rng(5)
    views = np.stack([rng.integers(0, 30, 50), rng.integers(0, 20, 50)]).astype(np.int64)
    return {"x__item": arrays.pop("x__item"), "edge_index__user__views__item": views, **arrays}


def test_a_heterogeneous_graphs_types_come_in_name_order_however_it_was_stored(tmp_path):
    """The types' order sets the sampler's draws and the model's parameters: an .npz written
    with 'views' first and the folder streamed from it (files list by name) both give the
    types sorted by name (tests/integration/test_storage_order.py trains them)."""
    np.savez(tmp_path / "shop.npz", **shop_with_views())
    prepare(str(tmp_path / "shop.npz"), progress=False)
    opened, loaded = open_prepared(tmp_path / "shop"), load_hetero_npz(tmp_path / "shop.npz")
    assert list(opened.edges) == list(loaded.edges) == [("user", "buys", "item"), ("user", "views", "item")]
    assert list(opened.num_nodes) == list(loaded.num_nodes) == ["item", "user"]


def two_relation_arrays() -> dict:
    """The shop with a second relation ending at users, so destinations of both types have no
    in-edges, several in-edges, and in-edges in no particular order."""
    rng = np.random.default_rng(2)
    return {
        **hetero_arrays(),
        "edge_index__item__likes__user": np.stack([rng.integers(0, 20, 90), rng.integers(0, 25, 90)]).astype(np.int64),
    }


@pytest.mark.parametrize("reverse", [False, True])
def test_a_heterogeneous_folder_prepares_the_node_task_topology_the_npz_builds(tmp_path, monkeypatch, reverse):
    """prepare sorts every relation (and every rev_ relation, which dataset.reverse_edges adds)
    by destination through the disk, in chunks of two edges here: the node task's topology is
    the one the same arrays in an .npz give, edge type for edge type, in the same order."""
    import gnnbridge.core.storage.prepare as preparing

    arrays = two_relation_arrays()
    np.savez(tmp_path / "shop.npz", **arrays)
    folder = save_folder(tmp_path / "shop", arrays)
    monkeypatch.setattr(preparing, "chunk_bytes", lambda: 100)
    prepare(str(folder), progress=False)
    built = for_node_task(load_hetero_npz(tmp_path / "shop.npz"), reverse, 0)
    opened = for_node_task(open_prepared(folder), reverse, 0)
    assert sorted(opened.edge_types) == sorted(built.edge_types) and len(built.edge_types) == (4 if reverse else 2)
    for et in built.edge_types:
        assert torch.equal(opened.indptr[et], built.indptr[et]), et
        assert torch.equal(opened.edge_index[et], built.edge_index[et]), et
    for name in ("train", "val", "test"):
        assert torch.equal(opened.split(name), built.split(name))
    assert opened.summary() == built.summary()
    recorded = json.loads((folder / MANIFEST).read_text())["arrays"]
    edges = recorded["csc_edges__item__rev_buys__user"]
    assert {k: edges[k] for k in ("file", "dtype", "shape")} == {
        "file": "prepared/edges__item__rev_buys__user.npy",
        "dtype": "int64",
        "shape": [2, 120],
    }
    assert recorded["csc_indptr__item__rev_buys__user"]["shape"] == [31]


def test_a_heterogeneous_node_task_maps_its_topology_from_the_folder_in_every_rank(tmp_path):
    """From a prepared folder the node task's topology is the folder's files (page cache, shared
    by a machine's ranks), also after travelling to a rank (which reopens and derives again);
    from an .npz it is built in memory. A folder prepared before topology was prepared (its
    manifest lists none) still trains: its topology is built in memory, as from the .npz."""
    from gnnbridge.core.app.preflight import for_task
    from gnnbridge.core.config import from_dict
    from gnnbridge.core.records.features import file_backed

    arrays = two_relation_arrays()
    np.savez(tmp_path / "shop.npz", **arrays)
    folder = save_folder(tmp_path / "shop", arrays)
    prepare(str(folder), progress=False)
    config = from_dict({"task": "node", "dataset": {"reverse_edges": True}})

    def topology(record) -> list:
        return [t for et in sorted(record.edge_types) for t in (record.indptr[et], record.edge_index[et])]

    derived = for_task(config, open_prepared(folder))
    again = pickle.loads(pickle.dumps(derived))
    assert len(pickle.dumps(derived)) < 4000  # the opener and the config, not the topology
    assert all(file_backed(t) for record in (derived, again) for t in topology(record))
    built = for_task(config, load_hetero_npz(tmp_path / "shop.npz"))
    assert not any(file_backed(t) for t in topology(built))
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["arrays"] = {k: v for k, v in manifest["arrays"].items() if not k.startswith("csc_")}
    (folder / MANIFEST).write_text(json.dumps(manifest))
    older = for_task(config, open_prepared(folder))
    assert not any(file_backed(t) for t in topology(older)) and older.edge_types == derived.edge_types
    assert all(torch.equal(a, b) for a, b in zip(topology(older), topology(derived), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(topology(older), topology(built), strict=True))
    assert not prepare(str(folder), progress=False)["already"]  # preparing it again adds the topology
    assert all(file_backed(t) for t in topology(for_task(config, open_prepared(folder))))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["pyg", "dgl"])
@pytest.mark.parametrize("task", ["node", "link"])
def test_a_heterogeneous_folder_trains_node_and_link_tasks_as_its_npz(tmp_path, task, backend):
    arrays = shop_with_views()
    if task == "link":  # one target relation: the shop's purchases
        arrays.pop("edge_index__user__views__item")
    np.savez(tmp_path / "shop.npz", **arrays)
    prepare(str(tmp_path / "shop.npz"), progress=False)
    runs = [
        gnnbridge.run(
            dataset=str(tmp_path / name),
            backend=backend,
            nproc=1,
            out=tmp_path / f"run-{i}",
            overrides=["train.epochs=1", f"task={task}", "dataset.reverse_edges=true"],
            progress=False,
        )
        for i, name in enumerate(("shop", "shop.npz"))
    ]
    assert runs[0]["history"][-1]["epoch"] == 0 and math.isfinite(runs[0]["history"][-1]["loss"])
    assert runs[0]["metrics"] == runs[1]["metrics"]


@pytest.mark.slow
def test_float16_features_train(tmp_path):
    folder = save_folder(tmp_path / "g", graph_arrays())
    prepare(str(folder), dtype="float16", progress=False)
    results = gnnbridge.run(
        dataset=str(folder), backend="pyg", nproc=1, overrides=TINY, out=tmp_path / "run", progress=False
    )
    assert results["history"][-1]["epoch"] == 0 and math.isfinite(results["history"][-1]["loss"])


def test_a_bad_npz_leaves_no_folder_behind(tmp_path, refused):
    np.savez(tmp_path / "g.npz", **{**graph_arrays(), "edge_index": np.array([[0, 1], [1, 500]], dtype=np.int64)})
    seen = refused("prepare", str(tmp_path / "g.npz"), "--quiet")
    assert seen.returncode == 1
    assert (
        seen.stderr.strip()
        == f"Error: {tmp_path / 'g.npz'}: edge_index holds node id 500, outside [0, 120) for 120 nodes."
    )
    assert not (tmp_path / "g").exists()


@pytest.fixture
def small_disk(tmp_path):
    """A real 64 KiB file system (tmpfs), where this test process may mount one (root)."""
    disk = tmp_path / "small"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small file system here (needs root)")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=True)


def test_a_full_disk_is_one_line_and_leaves_nothing_half_written(tmp_path, small_disk, refused):
    folder = save_folder(tmp_path / "g", graph_arrays(n=2000))  # 16k edges: 128 KiB of indices, 24 KiB x16
    out = small_disk / "g"
    seen = refused("prepare", str(folder), "--out", str(out), "--dtype", "float16", "--quiet")
    assert seen.returncode == 1 and len(seen.stderr.strip().splitlines()) == 1, seen.stderr
    assert "the disk is full" in seen.stderr and "--out DIR on another disk" in seen.stderr
    assert not (out / "prepared").exists()  # nothing derived, and no lock either


def test_doctor_checks_a_prepared_folder_and_sizes_it_from_the_manifest(tmp_path):
    from gnnbridge.core.app.doctor import diagnose
    from gnnbridge.core.app.resolve import resolve_config
    from gnnbridge.core.host import format_bytes

    folder = save_folder(tmp_path / "g", graph_arrays())
    prepare(str(folder), progress=False)
    config = resolve_config(dataset=str(folder), nproc=2)
    assert (config.dataset.name, config.dataset.path) == ("folder", str(folder))
    findings = {f.what: f for f in diagnose(config)}
    assert not [f for f in findings.values() if f.status == "fail"]
    size = 120 * 12 * 4 + 121 * 8 + open_prepared(folder).num_edges * 8 + 120 * 8  # x, indptr, indices, y
    assert findings["shared memory"].detail.startswith(f"not used: a {format_bytes(size)} folder dataset is mapped")


def test_a_named_dataset_is_written_as_a_folder_and_opens_as_itself(tmp_path):
    from gnnbridge.core.config import DatasetConfig
    from gnnbridge.plugins.datasets import load_karate
    from gnnbridge.plugins.hetero_datasets import load_rec_synthetic

    assert prepare("karate", progress=False)["out"] == "karate"
    opened, loaded = open_prepared(tmp_path / "karate"), load_karate(DatasetConfig(name="karate"), 0)
    for key in ("indptr", "indices", "x", "y", "train_idx", "val_idx", "test_idx"):
        assert torch.equal(getattr(opened, key), getattr(loaded, key)), key
    prepare("rec-synthetic", out=str(tmp_path / "rec"), progress=False)
    rec = load_rec_synthetic(DatasetConfig(name="rec-synthetic"), 0)
    assert open_prepared(tmp_path / "rec").target_edge == rec.target_edge == ("user", "buys", "item")


def test_tiny_chunks_derive_the_same_files(tmp_path, monkeypatch):
    """Every pass reads its array a chunk at a time: with chunks of a few rows (many chunks per
    array) prepare writes the same files as with one chunk per array."""
    import gnnbridge.core.storage.prepare as preparing

    arrays = {
        **graph_arrays(),
        "train_idx": np.arange(0, 40),
        "val_idx": np.arange(40, 80),
        "test_idx": np.arange(80, 120),
    }
    whole, tiny = save_folder(tmp_path / "whole", arrays), save_folder(tmp_path / "tiny", arrays)
    prepare(str(whole), dtype="bfloat16", progress=False)
    monkeypatch.setattr(preparing, "chunk_bytes", lambda: 100)
    prepare(str(tiny), dtype="bfloat16", progress=False)
    for name in ("indptr.npy", "indices.npy", "x.bfloat16.npy"):
        assert np.array_equal(np.load(whole / "prepared" / name), np.load(tiny / "prepared" / name)), name
    manifests = [json.loads((f / MANIFEST).read_text()) for f in (whole, tiny)]
    assert [m["summary"] for m in manifests] == [manifests[0]["summary"]] * 2
    bad = save_folder(tmp_path / "bad", {**arrays, "y": np.r_[np.arange(119) % 4, 9]})
    with pytest.raises(DataError, match="y has labels up to 9 but no 4, 5, 6, 7, 8"):
        prepare_folder(bad, progress=False)


@pytest.mark.parametrize(
    "change, needle",
    [
        (
            {"edge_index__user__buys__item": np.array([[0], [99]], dtype=np.int64)},
            "edge_index[user,buys,item] destination holds 'item' node id 99, outside [0, 20)",
        ),
        ({"x__item": np.full((20, 5), np.inf, dtype=np.float32)}, "x__item holds NaN or inf values (first at node 0)"),
        ({"y__user": np.zeros(30, dtype=np.int64)}, "labels are given for 2 node types"),
    ],
)
def test_a_bad_heterogeneous_folder_is_refused_in_one_line(tmp_path, change, needle):
    folder = save_folder(tmp_path / "shop", {**hetero_arrays(), **change})
    with pytest.raises(DataError) as err:
        prepare_folder(folder, progress=False)
    assert needle in str(err.value) and "\n" not in str(err.value) and str(folder) in str(err.value)
    assert not (folder / MANIFEST).exists()


HELD = np.array([[0, 1, 2], [3, 4, 5]], dtype=np.int64)


@pytest.mark.parametrize(
    "base, change, needle",
    [
        (  # gave "unexpected KeyError: 'gadget' (gnnbridge bug)" from a folder
            "hetero",
            {"edge_index__user__likes__gadget": np.array([[0], [0]], dtype=np.int64)},
            "edge_index__user__likes__gadget has destination type 'gadget', which is not declared",
        ),
        (  # x.npy beside typed files was silently dropped
            "hetero",
            {"x": np.zeros((20, 5), dtype=np.float32)},
            "mixes the homogeneous format's x with heterogeneous arrays",
        ),
        (  # a stray typed file in a homogeneous folder turned it heterogeneous
            "graph",
            {"x__weird": np.zeros((3, 2), dtype=np.float32)},
            "mixes the homogeneous format's edge_index, x, y with heterogeneous arrays (x__weird)",
        ),
        (  # passed prepare; only train refused it
            "hetero",
            {"val_edges__user__buys__item": HELD, "test_edges__user__buys__item": HELD[:, :1]},
            "The val and test edges overlap; splits must be disjoint.",
        ),
    ],
)
def test_a_bad_folder_is_refused_as_its_npz_is(tmp_path, refused, base, change, needle):
    """A folder and an .npz of the same arrays are one format: the same refusal, in one line,
    from prepare and from a run of the .npz, and nothing derived is left."""
    arrays = {**(hetero_arrays() if base == "hetero" else graph_arrays()), **change}
    folder = save_folder(tmp_path / "g", arrays)
    np.savez(tmp_path / "g.npz", **arrays)
    for args, path in (
        (("prepare", str(folder), "--quiet"), folder),
        (("train", "--dataset", str(tmp_path / "g.npz"), "--nproc", "1", "--set", "task=link"), tmp_path / "g.npz"),
    ):
        if "val_edges__user__buys__item" not in change and args[0] == "train":
            args = args[:-2]  # the node task refuses it as well
        seen = refused(*args)
        lines = seen.stderr.strip().splitlines()
        assert seen.returncode == 1 and len(lines) == 1, seen.stderr
        assert needle in lines[0] and str(path) in lines[0], lines[0]
    assert not (folder / "prepared").exists()


def test_prepare_of_an_unknown_name_lists_the_names_and_what_else_it_takes(tmp_path, refused, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seen = refused("prepare", "no-such-graph", "--quiet")
    assert seen.returncode == 1 and "Unknown dataset 'no-such-graph'" in seen.stderr and "karate" in seen.stderr
    assert "a folder of .npy files or an .npz file" in seen.stderr and "--dataset PATH.npz" not in seen.stderr
    assert not (tmp_path / "no-such-graph").exists()


def test_prepare_shows_a_progress_bar_on_stderr_and_nothing_else(tmp_path):
    folder = save_folder(tmp_path / "g", graph_arrays())
    command = ("prepare", folder, "--dtype", "bfloat16")
    shown = helpers.gnnbridge(*command, cwd=tmp_path)
    assert shown.returncode == 0 and "prepared (node, 120 nodes" in shown.stdout, shown
    assert "prepare g" in shown.stderr and "Warning" not in shown.stderr, shown.stderr
    quiet = helpers.gnnbridge(*command[:-2], "--dtype", "float16", "--quiet", cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


def test_bfloat16_rounds_as_torch_does_ties_included():
    from gnnbridge.core.storage.prepare import to_bfloat16

    ties = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 3.0e38, -1e-40, 0.0, 65504.0], dtype=np.float32)
    values = np.concatenate([ties, np.random.default_rng(0).normal(scale=1e3, size=1000).astype(np.float32)])
    values.setflags(write=False)  # as a mapped file's block is
    expected = torch.from_numpy(values.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(to_bfloat16(values.reshape(-1, 1)).ravel(), expected)


SPLIT_CASES = {
    "overlap": (np.arange(0, 40), np.arange(30, 60), np.arange(60, 120), "The val split overlaps an earlier split"),
    "repeat": (
        np.concatenate([np.arange(0, 40), [3]]),
        np.arange(40, 80),
        np.arange(80, 120),
        "The train split lists a node twice",
    ),
    "range": (np.arange(0, 40), np.arange(40, 80), np.arange(80, 121), "test_idx holds node id 120, outside [0, 120)"),
    "empty": (np.arange(0, 40), np.arange(0), np.arange(80, 120), "The val split is empty"),
}


@pytest.mark.parametrize("case", SPLIT_CASES)
def test_bad_splits_are_refused_chunk_by_chunk_as_the_npz_refuses_them(tmp_path, monkeypatch, case):
    import gnnbridge.core.storage.prepare as preparing
    from gnnbridge.core.interfaces import LoaderConfig
    from gnnbridge.plugins.datasets import load_npz

    *splits, needle = SPLIT_CASES[case]
    arrays = {**graph_arrays(), **{k: np.asarray(v, dtype=np.int64) for k, v in zip(SPLITS, splits)}}
    np.savez(tmp_path / "g.npz", **arrays)
    with pytest.raises(DataError) as npz:
        load_npz(LoaderConfig(name="npz", path=str(tmp_path / "g.npz")), 0)
    monkeypatch.setattr(preparing, "chunk_bytes", lambda: 96)  # 3 split ids a chunk: the repeat spans chunks
    folder = save_folder(tmp_path / "g", arrays)
    with pytest.raises(DataError) as err:
        prepare_folder(folder, progress=False)
    assert needle in str(npz.value) and needle in str(err.value) and "\n" not in str(err.value)
    assert not (folder / MANIFEST).exists() and not list((folder / "prepared").glob("*splits*"))


# --------------------------------------------------------------------------- a link task's topology


def _link_cases() -> dict:
    """{case: (arrays, link.edge_type)}: a homogeneous graph; heterogeneous ones with one relation,
    with a second relation (and its rev_ type), with a relation that mirrors the target, with
    held-out edges the dataset brings, and with one node type (twin edges)."""
    rng = np.random.default_rng(3)
    shop = hetero_arrays()
    buys = shop["edge_index__user__buys__item"]
    return {
        "homogeneous": (graph_arrays(), ""),
        "one relation": (shop, "buys"),
        "two relations": (two_relation_arrays(), "buys"),
        "a mirror": (
            {
                **shop,
                "edge_index__item__bought__user": np.concatenate(
                    [buys[::-1], rng.integers(0, 20, (2, 5))], axis=1
                ).astype(np.int64),
            },
            "buys",
        ),
        "held out": (
            {
                **shop,
                "val_edges__user__buys__item": np.array([[0, 1, 2], [3, 4, 5]]),
                "test_edges__user__buys__item": np.array([[5, 6], [7, 8]]),
            },
            "buys",
        ),
        "one node type": (
            {
                "x__paper": rng.normal(size=(30, 4)).astype(np.float32),
                "y__paper": np.arange(30) % 3,
                "edge_index__paper__cites__paper": rng.integers(0, 30, (2, 150)),
            },
            "cites",
        ),
    }


LINK_CASES = _link_cases()


def link_config(edge_type: str, reverse: bool = True, seed: int = 0, protocol: str = "per-edge"):
    """10 evaluation negatives: drawn without repeats among the shop's 20 items, with among more
    (or 10 shared negative pairs per split)."""
    from gnnbridge.core.config import from_dict

    return from_dict(
        {
            "task": "link",
            "dataset": {"reverse_edges": reverse},
            "train": {"seed": seed},
            "link": {"edge_type": edge_type, "eval_negatives": 10, "hits_at": 3, "protocol": protocol},
        }
    )


def load_any_npz(path):
    from gnnbridge.core.interfaces import LoaderConfig
    from gnnbridge.plugins.datasets import load_npz

    return load_npz(LoaderConfig(name="npz", path=str(path)), 0)


def link_tensors(record) -> dict:
    """Every tensor of a link record, by name, in the record's order of edge types."""
    out = {f"{kind}[{et}]": getattr(record, kind)[et] for et in record.edge_types for kind in ("edge_index", "indptr")}
    names = ("val_edges", "test_edges", "val_negatives", "test_negatives", "reverse_eid", "twin_eid")
    names += ("val_negative_pairs", "test_negative_pairs")
    return {**out, **{name: getattr(record, name) for name in names if getattr(record, name) is not None}}


@pytest.mark.parametrize("reverse, protocol", [(False, "per-edge"), (True, "per-edge"), (True, "shared")])
@pytest.mark.parametrize("case", list(LINK_CASES))
def test_a_link_task_maps_from_its_folder_the_topology_the_npz_builds(tmp_path, monkeypatch, case, reverse, protocol):
    """A link task on a prepared folder is built through the disk, in chunks of two edges here
    (distinct pairs, split, train pairs, mirror detection, CSC, reverse and twin ids), and
    mapped: tensor for tensor the record the same arrays in an .npz give in memory. Under the
    shared protocol that includes each split's negative pairs, drawn against the sorted keys on
    disk (and no per-edge negatives: [E, 0], held in memory)."""
    import gnnbridge.core.storage.linkcache as linkcache
    import gnnbridge.core.storage.prepare as preparing
    from gnnbridge.core.app.preflight import for_task
    from gnnbridge.core.records.features import file_backed

    arrays, edge_type = LINK_CASES[case]
    np.savez(tmp_path / "g.npz", **arrays)
    monkeypatch.setattr(preparing, "chunk_bytes", lambda: 100)
    monkeypatch.setattr(linkcache, "FAN_IN", 3)  # sorted runs merged in several rounds
    prepare(str(tmp_path / "g.npz"), progress=False)
    config = link_config(edge_type, reverse, protocol=protocol)
    built = for_task(config, load_any_npz(tmp_path / "g.npz"))
    mapped = for_task(config, open_prepared(tmp_path / "g"))
    got, want = link_tensors(mapped), link_tensors(built)
    assert list(got) == list(want) and mapped.reverse_edge == built.reverse_edge
    for name, tensor in want.items():
        assert torch.equal(got[name], tensor), name
    assert mapped.summary() == built.summary() and mapped.protocol == protocol
    assert ("val_negative_pairs" in want) == (protocol == "shared")
    got = {k: t for k, t in got.items() if t.numel()}  # a shared task's [E, 0] negatives are no file
    assert all(file_backed(t) for t in got.values()) and not any(file_backed(t) for t in want.values())
    if protocol == "shared":  # the protocol is part of the cache's key: the per-edge task has its own
        assert for_task(link_config(edge_type, reverse), open_prepared(tmp_path / "g")).protocol == "per-edge"
        assert len(list((tmp_path / "g" / "prepared").glob("link-*"))) == 2


def test_a_link_task_is_built_into_its_folder_once_then_mapped_by_later_runs_and_ranks(tmp_path):
    """The first process builds FOLDER/prepared/link-KEY/ (removing what a killed build left); a
    rank (which gets the record as "reopen and derive again") and a later run map it, rebuilding
    nothing. Another seed holds
    out other edges: its own cache. Preparing the folder again drops the caches of what it was."""
    from gnnbridge.core.app.preflight import for_task
    from gnnbridge.core.records.features import file_backed

    folder = save_folder(tmp_path / "g", graph_arrays())
    prepare(str(folder), progress=False)
    killed = [folder / "prepared" / "link-0123456789abcdef", folder / "prepared" / ".link-0123456789abcdef.7.partial"]
    for leftover in killed:  # what a build killed midway leaves: no manifest
        leftover.mkdir()
        (leftover / "edges__node__to__node.npy").write_bytes(b"half")
    first = for_task(link_config(""), open_prepared(folder))
    assert not any(leftover.exists() for leftover in killed)
    caches = sorted((folder / "prepared").glob("link-*"))
    assert len(caches) == 1 and (caches[0] / "manifest.json").is_file()
    stamps = {p.name: p.stat().st_mtime_ns for p in caches[0].iterdir()}
    assert len(pickle.dumps(first)) < 4000  # the opener and the config, not the topology
    for record in (pickle.loads(pickle.dumps(first)), for_task(link_config(""), open_prepared(folder))):
        got, want = link_tensors(record), link_tensors(first)
        assert all(file_backed(t) for t in got.values())
        assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)
    assert {p.name: p.stat().st_mtime_ns for p in caches[0].iterdir()} == stamps
    for_task(link_config("", seed=1), open_prepared(folder))
    assert len(list((folder / "prepared").glob("link-*"))) == 2
    (folder / "x.npy").touch()
    prepare(str(folder), progress=False)
    assert not list((folder / "prepared").glob("link-*"))


@pytest.fixture
def read_only():
    """Make a folder read-only for this process: chmod 555, or for root (who writes anyway) a
    read-only bind mount of it onto itself."""
    made = []

    def make(folder):
        if os.geteuid() != 0:
            made.append(lambda: folder.chmod(0o755))
            folder.chmod(0o555)
            return
        if subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True).returncode != 0:
            pytest.skip("root writes into chmod-read-only folders, and no read-only bind mount can be made here")
        made.append(lambda: subprocess.run(["umount", "--lazy", str(folder)], check=True))
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True)

    yield make
    for undo in reversed(made):
        undo()


def test_a_read_only_folder_maps_a_built_link_task_and_builds_others_in_memory(tmp_path, read_only):
    from gnnbridge.core.app.preflight import for_task
    from gnnbridge.core.records.features import file_backed

    arrays, edge_type = LINK_CASES["two relations"]
    np.savez(tmp_path / "shop.npz", **arrays)
    prepare(str(tmp_path / "shop.npz"), progress=False)
    folder = tmp_path / "shop"
    for_task(link_config(edge_type), open_prepared(folder))  # built while the folder was writable
    read_only(folder / "prepared")
    mapped = for_task(link_config(edge_type), open_prepared(folder))
    assert all(file_backed(t) for t in link_tensors(mapped).values())
    in_memory = for_task(link_config(edge_type, seed=1), open_prepared(folder))
    built = for_task(link_config(edge_type, seed=1), load_any_npz(tmp_path / "shop.npz"))
    got, want = link_tensors(in_memory), link_tensors(built)
    assert not any(file_backed(t) for t in got.values())
    assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)
    assert len(list((folder / "prepared").glob("link-*"))) == 1
