"""The real-dataset loaders, run offline on tiny graphs written in each reader's on-disk layout.

Nothing is downloaded: every test writes the raw files PyG or ogb would have fetched, so the
readers' real processing code runs, and checks what a user would notice (sizes, labels, splits,
dtypes), plus the guarantee that a run without the files fails with one line instead of hanging.
"""

from __future__ import annotations

import http.server
import io
import sys
import threading
import urllib.request
import zipfile

import numpy as np
import pytest
import torch
import yaml

import gnnbridge
from gnnbridge.core.config import DatasetConfig
from gnnbridge.core.contracts.loading import LoaderConfig
from gnnbridge.core.errors import BackendUnavailableError, ConfigError, DataFileNotFoundError
from gnnbridge.core.plugins import datasets
from gnnbridge.core.records.reading import Reading

N, F, C = 40, 6, 3


def load(name: str, root, form: str = "class", **options):
    """The loader of ``name`` as core calls it: told the labels' form (``config.reading``), which
    the records it builds read them in too."""
    return datasets.get(name)(LoaderConfig(name=name, root=str(root), options=options, reading=Reading(form)), 0)


def ring(n: int) -> np.ndarray:
    """Directed ring i -> i+1: its undirected view has exactly 2n edges."""
    src = np.arange(n)
    return np.stack([src, (src + 1) % n])


def edge_set(edge_index: torch.Tensor) -> set[tuple[int, int]]:
    return set(map(tuple, edge_index.t().tolist()))


@pytest.fixture
def graph():
    rng = np.random.default_rng(0)
    perm = rng.permutation(N)
    return {
        "x": rng.standard_normal((N, F)),
        "y": rng.integers(0, C, N),
        "splits": (np.sort(perm[:20]), np.sort(perm[20:30]), np.sort(perm[30:])),
    }


def check(data, graph, num_edges: int) -> None:
    assert data.num_nodes == N and data.num_edges == num_edges
    assert data.edge_index.dtype == torch.int64 and data.x.dtype == torch.float32 and data.y.dtype == torch.int64
    assert edge_set(data.edge_index) == edge_set(data.edge_index.flip(0))  # undirected
    torch.testing.assert_close(data.x, torch.from_numpy(graph["x"]).float())
    assert data.y.tolist() == graph["y"].tolist()
    for got, want in zip((data.train_idx, data.val_idx, data.test_idx), graph["splits"]):
        assert got.dtype == torch.int64 and got.tolist() == want.tolist()


# --------------------------------------------------------------------------- reddit


def write_reddit(folder, graph) -> None:
    sp = pytest.importorskip("scipy.sparse")
    raw = folder / "raw"
    raw.mkdir(parents=True)
    node_types = np.zeros(N, dtype=np.int32)
    for code, ids in enumerate(graph["splits"], start=1):
        node_types[ids] = code
    np.savez(
        raw / "reddit_data.npz",
        feature=graph["x"].astype(np.float32),
        label=graph["y"].astype(np.int32),
        node_types=node_types,
        node_ids=np.arange(N),
    )
    edges = ring(N)
    both = np.concatenate([edges, edges[::-1], edges[:, :3]], axis=1)  # both directions, plus duplicates
    adj = sp.coo_matrix((np.ones(both.shape[1], dtype=np.float32), (both[0], both[1])), shape=(N, N))
    sp.save_npz(raw / "reddit_graph.npz", adj)


def test_reddit_reads_pyg_layout(tmp_path, graph):
    pytest.importorskip("torch_geometric")
    write_reddit(tmp_path / "reddit", graph)
    check(load("reddit", tmp_path, download=False), graph, num_edges=2 * N)
    check(load("reddit", tmp_path, download=False), graph, num_edges=2 * N)  # from PyG's processed cache


# --------------------------------------------------------------------------- ogb

OGB = {"ogbn-arxiv": ("ogbn_arxiv", "time", 40), "ogbn-products": ("ogbn_products", "sales_ranking", 47)}


def write_csv(path, array) -> None:
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(np.asarray(array)).to_csv(path, header=False, index=False, compression="gzip")


def write_ogb(folder, split_kind: str, graph) -> None:
    folder.mkdir(parents=True)
    (folder / "RELEASE_v1.txt").write_text("tiny test copy\n")
    edges = ring(N)
    edges = np.concatenate([edges, edges[::-1, :5], edges[:, :2]], axis=1)  # some reversed, some repeated
    write_csv(folder / "raw" / "edge.csv.gz", edges.T)
    write_csv(folder / "raw" / "num-node-list.csv.gz", [N])
    write_csv(folder / "raw" / "num-edge-list.csv.gz", [edges.shape[1]])
    write_csv(folder / "raw" / "node-feat.csv.gz", graph["x"])
    write_csv(folder / "raw" / "node-label.csv.gz", graph["y"][:, None])
    write_csv(folder / "raw" / "node_year.csv.gz", np.full((N, 1), 2020))
    for part, ids in zip(("train", "valid", "test"), graph["splits"]):
        write_csv(folder / "split" / split_kind / f"{part}.csv.gz", ids)


@pytest.mark.parametrize("name", sorted(OGB))
def test_ogb_reads_ogb_layout_and_symmetrises(tmp_path, graph, name, monkeypatch):
    pytest.importorskip("ogb")
    monkeypatch.setattr("builtins.input", never_asked)
    folder_name, split_kind, num_classes = OGB[name]
    write_ogb(tmp_path / folder_name, split_kind, graph)
    first = load(name, tmp_path, download=False)
    check(first, graph, num_edges=2 * N)
    assert first.num_classes == num_classes
    check(load(name, tmp_path, download=False), graph, num_edges=2 * N)  # from ogb's processed cache


def test_ogbn_proteins_reads_its_edge_features_into_its_nodes_and_112_labels(tmp_path, monkeypatch):
    """ogbn-proteins' layout (edge-feat, no node-feat, node_species, a species split): ogb adds
    every edge's other direction, and a node's features are the mean of its edges'."""
    pytest.importorskip("ogb")
    monkeypatch.setattr("builtins.input", never_asked)
    folder = tmp_path / "ogbn_proteins"
    folder.mkdir()
    (folder / "RELEASE_v1.txt").write_text("tiny test copy\n")
    edges = ring(N)
    feats = np.random.default_rng(1).random((N, 8))
    labels = np.random.default_rng(2).integers(0, 2, (N, 112))
    write_csv(folder / "raw" / "edge.csv.gz", edges.T)
    write_csv(folder / "raw" / "edge-feat.csv.gz", feats)
    write_csv(folder / "raw" / "num-node-list.csv.gz", [N])
    write_csv(folder / "raw" / "num-edge-list.csv.gz", [N])
    write_csv(folder / "raw" / "node-label.csv.gz", labels)
    write_csv(folder / "raw" / "node_species.csv.gz", np.zeros((N, 1), dtype=np.int64))
    parts = np.split(np.arange(N), [20, 30])
    for part, ids in zip(("train", "valid", "test"), parts):
        write_csv(folder / "split" / "species" / f"{part}.csv.gz", ids)
    data = load("ogbn-proteins", tmp_path, "multilabel", download=False)
    assert data.num_nodes == N and data.num_edges == 2 * N and data.num_classes == 112
    assert data.edge_attr.shape == (2 * N, 8)  # the edges' own features too (read by model.arch=gine)
    # node v's edges: v-1 -> v (ring edge v-1) and, reversed, v+1 -> v (ring edge v): both carry their features
    expected = (feats + np.roll(feats, 1, axis=0)) / 2
    np.testing.assert_allclose(data.x.numpy(), expected, rtol=1e-5)
    np.testing.assert_array_equal(data.y.numpy(), labels.astype(np.float32))
    assert [s.tolist() for s in (data.train_idx, data.val_idx, data.test_idx)] == [p.tolist() for p in parts]
    with pytest.raises(ConfigError, match="train it with target=multilabel"):
        load("ogbn-proteins", tmp_path, download=False)


# --------------------------------------------------------------------------- ogbg-mol*

MOLECULES = {"ogbg-molhiv": (1, "multilabel"), "ogbg-molpcba": (128, "multilabel"), "ogbg-molesol": (1, "regression")}


def write_molecules(folder, tasks: int, regression: bool, graphs: int = 30):
    """A tiny copy of an ogbg-mol* set in ogb's raw layout: chains of 3-6 atoms with OGB's nine
    integer atom features and three bond features, labels with gaps (NaN, as molpcba's), a scaffold split."""
    rng = np.random.default_rng(5)
    folder.mkdir(parents=True)
    (folder / "RELEASE_v1.txt").write_text("tiny test copy\n")
    sizes = rng.integers(3, 7, graphs)
    edges = [np.stack([np.arange(n - 1), np.arange(1, n)]) for n in sizes]  # one direction: ogb adds the other
    write_csv(folder / "raw" / "edge.csv.gz", np.concatenate(edges, axis=1).T)
    write_csv(folder / "raw" / "num-node-list.csv.gz", sizes)
    write_csv(folder / "raw" / "num-edge-list.csv.gz", sizes - 1)
    write_csv(folder / "raw" / "node-feat.csv.gz", rng.integers(0, 5, (int(sizes.sum()), 9)))
    write_csv(folder / "raw" / "edge-feat.csv.gz", rng.integers(0, 3, (int((sizes - 1).sum()), 3)))
    labels = rng.normal(size=(graphs, tasks)) if regression else rng.integers(0, 2, (graphs, tasks)).astype(float)
    labels[rng.random(labels.shape) < 0.3] = np.nan
    labels[:2] = [[0.0] * tasks, [1.0] * tasks]  # every task has both classes (and a value) somewhere
    write_csv(folder / "raw" / "graph-label.csv.gz", labels)
    parts = np.split(rng.permutation(graphs), [20, 25])
    for part, ids in zip(("train", "valid", "test"), parts):
        write_csv(folder / "split" / "scaffold" / f"{part}.csv.gz", np.sort(ids))
    return sizes, labels, [np.sort(p) for p in parts]


@pytest.mark.parametrize("name", sorted(MOLECULES))
def test_ogbs_molecules_read_with_their_scaffold_split_and_missing_labels(tmp_path, name, monkeypatch):
    pytest.importorskip("ogb")
    monkeypatch.setattr("builtins.input", never_asked)
    tasks, target = MOLECULES[name]
    folder = tmp_path / name.replace("-", "_")
    sizes, labels, parts = write_molecules(folder, tasks, target == "regression")
    bonds_written = np.loadtxt(folder / "raw" / "edge-feat.csv.gz", delimiter=",", ndmin=2)
    for _ in range(2):  # from the raw files, then from ogb's processed cache
        data = load(name, tmp_path, target, download=False)
        assert data.num_graphs == len(sizes) and data.num_nodes == sizes.sum()
        assert data.num_edges == 2 * (sizes - 1).sum()  # ogb adds every bond's other direction
        assert data.x.shape == (sizes.sum(), 9) and data.x.dtype == torch.float32
        assert data.y.shape == (len(sizes), tasks) and data.num_classes == tasks
        np.testing.assert_array_equal(data.y.numpy(), labels.astype(np.float32))  # NaN where missing
        for got, want in zip((data.train_idx, data.val_idx, data.test_idx), parts):
            assert got.tolist() == want.tolist()
        # each bond's three features, on both of its directions (edge_attr follows the sorted edges)
        assert data.edge_attr.shape == (data.num_edges, 3)
        bonds = np.concatenate([bonds_written] * 2).astype(np.float32)
        np.testing.assert_array_equal(np.sort(data.edge_attr.numpy(), axis=0), np.sort(bonds, axis=0))
    with pytest.raises(ConfigError) as err:  # the default target=class cannot score it as OGB does
        load(name, tmp_path, download=False)
    assert f"train it with target={target}" in str(err.value) and f"experiment '{name}'" in str(err.value)


def test_an_ogb_molecule_experiment_trains_as_ogb_scores_it(tmp_path, monkeypatch):
    pytest.importorskip("ogb")
    monkeypatch.setattr("builtins.input", never_asked)
    write_molecules(tmp_path / "ogbg_molpcba", 128, regression=False)
    results = gnnbridge.run(
        "ogbg-molpcba",
        overrides=[f"dataset.root={tmp_path}", "train.epochs=2", "model.hidden=16", "model.layers=2"],
        out=tmp_path / "run",
        progress=False,
    )
    assert results["best"]["monitor"] == "val_ap" and {"test_ap", "test_roc_auc"} <= set(results["metrics"])
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["model"]["arch"] == "gine"  # bonds read


# --------------------------------------------------------------------------- missing files


def never_asked(*args):
    raise AssertionError("the loader let its reader prompt with input()")


def skip_without_reader(name: str) -> None:
    pytest.importorskip("torch_geometric" if name == "reddit" else "ogb")


@pytest.mark.parametrize("name", ["reddit", *sorted(OGB), *sorted(MOLECULES)])
def test_missing_folder_without_download_is_one_line(tmp_path, name, monkeypatch):
    skip_without_reader(name)
    monkeypatch.setattr("builtins.input", never_asked)
    with pytest.raises(DataFileNotFoundError) as err:
        load(name, tmp_path / "empty", download=False)
    message = str(err.value)
    assert "\n" not in message and str(tmp_path / "empty") in message and "download" in message


@pytest.mark.parametrize("name", [*sorted(OGB), *sorted(MOLECULES)])
def test_ogb_never_asks_to_delete_a_folder_without_a_terminal(tmp_path, name, monkeypatch):
    """A folder without ogb's release marker would make ogb ask whether to delete it: without a
    terminal to answer, that is one line up front, and the folder is left as it was."""
    skip_without_reader(name)
    monkeypatch.setattr("builtins.input", never_asked)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    folder = tmp_path / name.replace("-", "_")
    (folder / "raw").mkdir(parents=True)
    (folder / "raw" / "notes.txt").write_text("mine")
    with pytest.raises(DataFileNotFoundError, match="no terminal to answer; move the folder away") as err:
        load(name, tmp_path)  # download defaults to true
    assert "\n" not in str(err.value) and "RELEASE_v1.txt" in str(err.value)
    assert (folder / "raw" / "notes.txt").read_text() == "mine"


class Mirror(http.server.BaseHTTPRequestHandler):
    """OGB's download server, reached as an HTTP proxy on 127.0.0.1: every address serves the zip
    ``files[0]``, its first request announced as ``claimed`` bytes (ogb asks before a download of
    more than 1 GB on that figure, reading no data) unless that is the zip's own size."""

    files: list = []
    claimed: int = 0
    seen: list = []

    def do_GET(self):
        data, first = self.files[0], self.path not in self.seen
        self.seen.append(self.path)
        size = self.claimed if first and self.claimed else len(data)
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        if size == len(data):
            self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    """A tiny ogbg-molesol as OGB publishes it (``esol.zip``), served through a local proxy that
    urllib (ogb's downloader) is pointed at; yields the handler class (``claimed``, ``seen``)."""
    pytest.importorskip("ogb")
    write_molecules(tmp_path / "published" / "esol", 1, regression=True)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted((tmp_path / "published").rglob("*")):
            archive.write(path, path.relative_to(tmp_path / "published"))
    handler = type("Served", (Mirror,), {"files": [buffer.getvalue()], "claimed": 0, "seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proxy = urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{server.server_address[1]}"})
    monkeypatch.setattr(urllib.request, "_opener", urllib.request.build_opener(proxy))
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # a batch job: no terminal
    yield handler
    server.shutdown()
    server.server_close()


def test_ogb_downloads_without_a_terminal_what_it_does_not_ask_about(tmp_path, mirror, monkeypatch):
    monkeypatch.setattr("builtins.input", never_asked)
    data = load("ogbg-molesol", tmp_path / "root", "regression")
    assert data.num_graphs == 30 and len(mirror.seen) == 2  # ogb's size check, then the download
    assert (tmp_path / "root" / "ogbg_molesol" / "RELEASE_v1.txt").is_file()


def test_ogbs_question_before_a_large_download_is_answered_by_assume_yes(tmp_path, mirror, capsys):
    mirror.claimed = 3 * 2**30  # ogb asks: "This will download 3.00GB. Will you proceed? (y/N)"
    with pytest.raises(DataFileNotFoundError) as err:
        load("ogbg-molesol", tmp_path / "root", "regression")
    assert str(err.value) == (
        f"Dataset 'ogbg-molesol' is not in '{tmp_path / 'root' / 'ogbg_molesol'}' and ogb asks before downloading "
        "it (over 1 GB), with no terminal to answer; --set dataset.options.assume_yes=true downloads it without "
        "asking (or run once in a terminal, or point --set dataset.root=DIR at a folder that holds it)."
    )
    assert not (tmp_path / "root").exists() or not list((tmp_path / "root").iterdir())  # nothing half-fetched
    mirror.seen.clear()
    data = load("ogbg-molesol", tmp_path / "root", "regression", assume_yes=True)
    assert data.num_graphs == 30 and "This will download 3.00GB" in capsys.readouterr().err


def test_default_root_comes_from_environment(tmp_path, monkeypatch):
    skip_without_reader("reddit")
    monkeypatch.setenv("GNNBRIDGE_DATA", str(tmp_path / "shared"))
    config = DatasetConfig(name="reddit", options={"download": False})
    with pytest.raises(DataFileNotFoundError, match="shared"):
        datasets.get("reddit")(config, 0)


def test_missing_ogb_package_names_the_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ogb.nodeproppred", None)  # import now raises ImportError
    with pytest.raises(BackendUnavailableError, match="pip install ogb"):
        load("ogbn-arxiv", tmp_path)


# --------------------------------------------------------------------------- TU collections


def write_tu(folder, tu_name: str, node_labels: bool, num_graphs: int = 20):
    """The raw TU layout PyG's TUDataset reads: 1-based node ids, one line per directed edge,
    raw class labels (-1 / 1 here, as MUTAG ships them). Graph g is a cycle of 3 + g % 4 nodes
    (both directions) whose label is whether its size is odd."""
    raw = folder / tu_name / "raw"
    raw.mkdir(parents=True)
    edges, indicator, labels, kinds, start = [], [], [], [], 1
    for g in range(num_graphs):
        n = 3 + g % 4
        for i in range(n):
            a, b = start + i, start + (i + 1) % n
            edges += [(a, b), (b, a)]
        indicator += [g + 1] * n
        kinds += [i % 3 for i in range(n)]
        labels.append(1 if n % 2 else -1)
        start += n
    (raw / f"{tu_name}_A.txt").write_text("".join(f"{a}, {b}\n" for a, b in edges))
    (raw / f"{tu_name}_graph_indicator.txt").write_text("".join(f"{g}\n" for g in indicator))
    (raw / f"{tu_name}_graph_labels.txt").write_text("".join(f"{y}\n" for y in labels))
    if node_labels:
        (raw / f"{tu_name}_node_labels.txt").write_text("".join(f"{k}\n" for k in kinds))
    return edges


@pytest.mark.parametrize(
    "name, tu_name, node_labels",
    [
        ("imdb-binary", "IMDB-BINARY", False),
        ("proteins", "PROTEINS", True),
        ("mutag", "MUTAG", True),
    ],
)
def test_tu_datasets_are_read_by_pyg_into_a_collection(tmp_path, name, tu_name, node_labels):
    edges = write_tu(tmp_path / "TU", tu_name, node_labels)
    data = load(name, tmp_path, download=False, max_degree=3)
    sizes = [3 + g % 4 for g in range(20)]
    assert data.num_graphs == 20 and data.node_ptr.diff().tolist() == sizes
    assert data.y.tolist() == [n % 2 for n in sizes]  # -1 / 1 became 0 / 1
    assert edge_set(data.edge_index) == {(a - 1, b - 1) for a, b in edges}
    if node_labels:  # one-hot node labels
        assert data.num_features == 3 and data.x[:3].argmax(1).tolist() == [0, 1, 2]
    else:  # one-hot degree (every node of a cycle has degree 2), capped at max_degree
        assert data.num_features == 4 and bool((data.x.argmax(1) == 2).all())
    assert [data.split(s).numel() for s in ("train", "val", "test")] == [16, 2, 2]


def test_tu_dataset_without_files_and_no_download_is_one_line(tmp_path):
    with pytest.raises(DataFileNotFoundError, match=r"Dataset 'mutag' is not in .*MUTAG'.*download: true"):
        load("mutag", tmp_path, download=False)


@pytest.mark.slow
def test_gin_trains_on_a_tu_dataset_and_reports_roc_auc(tmp_path):
    from gnnbridge.core.app.train import run

    write_tu(tmp_path / "TU", "MUTAG", node_labels=True, num_graphs=40)
    results = run(
        "mutag",
        backend="dgl",
        out=tmp_path / "run",
        progress=False,
        overrides=[
            f"dataset.root={tmp_path}",
            "dataset.options.download=false",
            "train.epochs=2",
            "train.batch_size=8",
        ],
    )
    assert results["dataset"]["name"] == "mutag" and results["task"] == "graph"
    assert 0.0 <= results["metrics"]["test_roc_auc"] <= 1.0


# --------------------------------------------------------------------------- ogbl-*

LINK_NODES = 120


def write_links(folder, per_edge: bool, negatives: int):
    """A tiny copy of ogbl-collab (shared negatives) or ogbl-citation2 (per-edge negatives) in ogb's
    layout: raw CSVs, and the time split's ``.pt`` files as ogb reads them. Returns the split."""
    rng = np.random.default_rng(11)
    folder.mkdir(parents=True)
    (folder / "RELEASE_v1.txt").write_text("tiny test copy\n")
    pairs = np.unique(rng.integers(0, LINK_NODES, (900, 2)), axis=0)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    pairs = pairs[rng.permutation(len(pairs))]
    write_csv(folder / "raw" / "edge.csv.gz", pairs)
    write_csv(folder / "raw" / "num-node-list.csv.gz", [LINK_NODES])
    write_csv(folder / "raw" / "num-edge-list.csv.gz", [len(pairs)])
    write_csv(folder / "raw" / "node-feat.csv.gz", rng.normal(size=(LINK_NODES, 8)))
    for stem in ("edge_weight", "edge_year") if not per_edge else ():
        write_csv(folder / "raw" / f"{stem}.csv.gz", np.ones((len(pairs), 1), dtype=np.int64))
    if per_edge:
        write_csv(folder / "raw" / "node_year.csv.gz", np.ones((LINK_NODES, 1), dtype=np.int64))
    parts = dict(zip(("train", "valid", "test"), np.split(pairs, [len(pairs) - 80, len(pairs) - 40])))
    split = {}
    for part, edges in parts.items():
        t = torch.from_numpy(edges)
        if per_edge:
            split[part] = {"source_node": t[:, 0], "target_node": t[:, 1]}
            if part != "train":
                split[part]["target_node_neg"] = torch.from_numpy(rng.integers(0, LINK_NODES, (len(edges), negatives)))
        else:
            split[part] = {"edge": t}
            if part != "train":
                split[part]["edge_neg"] = torch.from_numpy(rng.integers(0, LINK_NODES, (negatives, 2)))
        (folder / "split" / "time").mkdir(parents=True, exist_ok=True)
        torch.save(split[part], folder / "split" / "time" / f"{part}.pt")
    return split


@pytest.mark.parametrize("name", ["ogbl-collab", "ogbl-citation2"])
def test_ogbs_link_sets_are_ranked_against_ogbs_own_negatives_as_ogb_scores_them(tmp_path, name, monkeypatch):
    """Trained by their experiments (a small model), the run's validation figure is what OGB's
    ``Evaluator`` computes from the scores ``predict --pairs`` gives the held-out edges and OGB's
    negatives: Hits@50 against the shared negatives of ogbl-collab, MRR against each citation's
    own negatives for ogbl-citation2."""
    from ogb.linkproppred import Evaluator

    monkeypatch.setattr("builtins.input", never_asked)
    per_edge = name == "ogbl-citation2"
    split = write_links(tmp_path / name.replace("-", "_"), per_edge, negatives=20 if per_edge else 60)
    settings = [f"dataset.root={tmp_path}", "train.epochs=2", "model.hidden=16", "model.layers=2",
                "sampler.fanouts=[5,5]", "train.batch_size=256"]  # fmt: skip
    if per_edge:
        settings.append("link.hits_at=[1,10]")
    results = gnnbridge.run(name, overrides=settings, out=tmp_path / "run", progress=False)
    valid = split["valid"]
    if per_edge:
        src, dst, neg = valid["source_node"], valid["target_node"], valid["target_node_neg"]
        pairs = (torch.cat([src, src.repeat_interleave(neg.shape[1])]), torch.cat([dst, neg.flatten()]))
    else:
        pairs = (
            torch.cat([valid["edge"][:, 0], valid["edge_neg"][:, 0]]),
            torch.cat([valid["edge"][:, 1], valid["edge_neg"][:, 1]]),
        )
    np.savez(tmp_path / "pairs.npz", src=pairs[0].numpy(), dst=pairs[1].numpy())
    scores = torch.from_numpy(gnnbridge.predict(tmp_path / "run", pairs=tmp_path / "pairs.npz")["scores"])
    positives = len(dst) if per_edge else len(valid["edge"])
    pos, neg_scores = scores[:positives], scores[positives:]
    if per_edge:
        ogb = Evaluator(name).eval({"y_pred_pos": pos, "y_pred_neg": neg_scores.view(positives, -1)})
        assert results["metrics"]["val_mrr"] == pytest.approx(float(ogb["mrr_list"].mean()), abs=1e-6)
    else:
        ogb = Evaluator(name).eval({"y_pred_pos": pos, "y_pred_neg": neg_scores})
        assert results["metrics"]["val_hits@50"] == pytest.approx(ogb["hits@50"], abs=1e-6)
