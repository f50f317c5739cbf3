"""Named real datasets, fetched on first use: node classification on ``reddit``, ``ogbn-arxiv``,
``ogbn-products``; node multi-label ``ogbn-proteins``; graph classification on the TU datasets
``imdb-binary``, ``proteins``, ``mutag``; OGB's molecules ``ogbg-molhiv``, ``ogbg-molpcba``
(multi-label) and ``ogbg-molesol`` (regression). (OGB's link sets ``ogbl-collab`` and
``ogbl-citation2`` follow the same download rules: :mod:`gnnbridge.plugins.ogb_links`.)

They live in their own plugin because they need a network and a third-party reader, which the
built-in ``synthetic``, ``karate`` and ``npz`` datasets do not: Reddit is read by PyG's
``Reddit`` class, the OGB graphs by the library-neutral ``ogb`` package. Using those readers
means a folder downloaded by PyG or ogb for another project can be reused as it is.

Where files live: ``dataset.root``, else ``$GNNBRIDGE_DATA``, else
``~/.cache/gnnbridge/datasets``, with one sub-folder per dataset in the reader's own layout::

    <root>/reddit/raw/reddit_data.npz, reddit_graph.npz      (PyG)
    <root>/ogbn_arxiv/RELEASE_v1.txt, raw/*.csv.gz, split/time/*.csv.gz           (ogb)
    <root>/ogbn_products/RELEASE_v1.txt, raw/*.csv.gz, split/sales_ranking/*.csv.gz
    <root>/ogbn_proteins/RELEASE_v1.txt, raw/*.csv.gz (edge-feat, node_species), split/species/*.csv.gz
    <root>/TU/IMDB-BINARY/raw/IMDB-BINARY_A.txt, _graph_indicator.txt, _graph_labels.txt  (PyG)
    <root>/ogbg_molhiv/RELEASE_v1.txt, raw/*.csv.gz, split/scaffold/*.csv.gz      (ogb; molpcba, molesol alike)

Downloads: both readers fetch missing files themselves, but ogb asks with ``input()`` (before
a download over 1 GB, and whether to delete a folder that lacks its release marker), which hangs
or dies on EOF in a batch job. So the expected files are checked here first. When they are
present the reader only reads them and never asks. When they are absent, the reader may download
only if ``dataset.options.download`` is true (the default). With a terminal on stdin, ogb's
questions are the user's to answer. Without one (a batch job on a cluster), a folder without its
marker is refused up front (answering yes would delete it), and ogb's question about a large
download is answered: yes with ``dataset.options.assume_yes: true``, else one line saying so
(:func:`ogb_reader`); a download ogb does not ask about (under 1 GB: the molecules, ogbl-collab)
just runs. Every refusal is a one-line :class:`DataFileNotFoundError` naming the folder and the fix.

The OGB graphs are made undirected (both directions of every edge, each kept once), the usual
practice for GraphSAGE on the citation graph ogbn-arxiv; ogbn-products is already undirected,
so it only loses duplicates. Reddit is published with both directions stored.

TU datasets are read by PyG's ``TUDataset`` with its default features (one-hot node labels for
PROTEINS and MUTAG). IMDB-BINARY has no node features; its nodes get a one-hot of their degree
(capped at ``dataset.options.max_degree``), as PyG's and DGL's GIN examples do. Their 80/10/10
split is drawn from ``train.seed``.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnbridge.core import environ
from gnnbridge.core.contracts.hookspecs import hookimpl
from gnnbridge.core.contracts.loading import label_form_of
from gnnbridge.core.errors import BackendUnavailableError, ConfigError, DataError, DataFileNotFoundError, GnnBridgeError
from gnnbridge.core.interfaces import DatasetConfig, GraphCollection, GraphData, LoaderConfig, downloads_allowed
from gnnbridge.core.plugins import get_target
from gnnbridge.plugins.options import options

DEFAULTS = {"download": True}
# ogb's sets: also whether ogb's question before a download over 1 GB is answered yes when there
# is no terminal to ask (a batch job); with a terminal, the user answers it
OGB_DEFAULTS = {**DEFAULTS, "assume_yes": False}
OGB_RELEASE = "RELEASE_v1.txt"  # the marker ogb writes into a folder it downloaded


@hookimpl
def register_datasets(register):
    register("reddit", load_reddit, "Reddit posts: 232,965 nodes, 41 communities (PyG reader; downloads ~1.5 GB)")
    register("ogbn-arxiv", load_ogbn_arxiv, "OGB arXiv citations: 169,343 papers, 40 subjects (ogb package; ~80 MB)")
    register(
        "ogbn-products", load_ogbn_products, "OGB Amazon products: 2.4M nodes, 47 categories (ogb package; ~1.4 GB)"
    )
    register(
        "ogbn-proteins", load_ogbn_proteins, "OGB protein functions: 132,534 nodes, 112 labels, ROC-AUC (ogb package)"
    )
    for name, (_, about) in TU_DATASETS.items():
        register(name, _tu_loader(name), about)
    for name, mol in OGB_MOLECULES.items():
        register(name, _molecule_loader(name), mol.about)


def data_root(config: DatasetConfig) -> Path:
    """``dataset.root``, else ``$GNNBRIDGE_DATA``, else the user's cache (:func:`environ.data_root`)."""
    return environ.data_root(config.root)


def require_files(name: str, folder: Path, missing: list[Path], download: bool, asks: bool) -> None:
    """Return only when the reader can run without blocking; see the module docstring."""
    if not missing:
        return
    detail = f" (no {missing[0].relative_to(folder)})" if folder.is_dir() else ""
    where = f"Dataset '{name}' is not in '{folder}'{detail}"
    elsewhere = f"point dataset.root at the folder that holds an existing '{folder.name}' (--set dataset.root=DIR)"
    if not downloads_allowed():  # evaluate / predict: a checkpoint's config never makes us fetch or create
        raise DataFileNotFoundError(f"{where}, and evaluate/predict never download or create a dataset; {elsewhere}.")
    if not download:
        raise DataFileNotFoundError(f"{where}; set dataset.options.download: true to fetch it, or {elsewhere}.")
    if asks and not has_terminal() and folder.is_dir() and not (folder / OGB_RELEASE).is_file():
        raise DataFileNotFoundError(
            f"{where}, and ogb would ask whether to delete that folder (it lacks {OGB_RELEASE}) to download it "
            f"again, with no terminal to answer; move the folder away to fetch a fresh copy, or {elsewhere}."
        )


def has_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


class OgbAsked(Exception):
    """ogb asked a question where no terminal can answer it and the user said nothing."""


class Answers(io.TextIOBase):
    """stdin for ogb's ``input()`` without a terminal: yes (``assume_yes``), or :class:`OgbAsked`."""

    def __init__(self, yes: bool):
        super().__init__()
        self.yes = yes

    def readable(self) -> bool:
        return True

    def readline(self, size: int = -1) -> str:
        if not self.yes:
            raise OgbAsked
        return "y\n"


def read_ogb(cls: type, splits: str, name: str, folder: Path, opts: dict) -> tuple[Any, dict]:
    """``(dataset, split)``: ogb's ``cls`` for ``name`` in ``folder`` and its ``splits`` method's
    answer, read in :func:`ogb_reader`. ogb saves its processed cache into ``processed/`` without
    creating it, so the first read of a folder it has just downloaded fails there: the folder is
    made then, and the files just fetched are read again (no second download)."""
    with ogb_reader(name, folder, opts):
        try:
            dataset = cls(name=name, root=str(folder.parent))
        except (RuntimeError, OSError):
            if (folder / "processed").is_dir() or not (folder / OGB_RELEASE).is_file():
                raise
            (folder / "processed").mkdir()
            dataset = cls(name=name, root=str(folder.parent))
        return dataset, getattr(dataset, splits)()


@contextlib.contextmanager
def ogb_reader(name: str, folder: Path, opts: dict):
    """Run ogb's reader as :func:`reader` runs one, its cache trusted (:func:`trusted_ogb_cache`),
    and, without a terminal, its question before a large download answered (module docstring)."""
    with reader(name, folder), trusted_ogb_cache():
        if has_terminal():
            yield
            return
        stdin, sys.stdin = sys.stdin, Answers(opts["assume_yes"])
        try:
            yield
        except OgbAsked:
            raise DataFileNotFoundError(
                f"Dataset '{name}' is not in '{folder}' and ogb asks before downloading it (over 1 GB), with no "
                "terminal to answer; --set dataset.options.assume_yes=true downloads it without asking (or run once "
                "in a terminal, or point --set dataset.root=DIR at a folder that holds it)."
            ) from None
        finally:
            sys.stdin = stdin


@contextlib.contextmanager
def reader(name: str, folder: Path):
    """Run a third-party reader: its progress goes to stderr (the CLI keeps stdout for results),
    and its failures on a corrupt or truncated file become one line naming the folder."""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    except GnnBridgeError:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise DataError(
            f"Dataset '{name}' in '{folder}' could not be read or downloaded ({type(exc).__name__}: {first}); "
            "check the network, or delete the folder to fetch a fresh copy."
        ) from None


def build(name: str, folder: Path, edge_index, x, y, splits, num_classes=None) -> GraphData:
    """Cast to GraphData's dtypes and report a broken file with its folder."""
    try:
        tensors = [torch.as_tensor(s, dtype=torch.int64).reshape(-1) for s in splits]
        return GraphData.from_edges(
            torch.as_tensor(edge_index, dtype=torch.int64),
            torch.as_tensor(x, dtype=torch.float32),
            torch.as_tensor(y, dtype=torch.int64).reshape(-1),
            *tensors,
            num_classes=num_classes,
            name=name,
        )
    except DataError as exc:
        raise DataError(f"Dataset '{name}' in '{folder}': {exc}") from None


# --------------------------------------------------------------------------- reddit

REDDIT_RAW = ("reddit_data.npz", "reddit_graph.npz")


def load_reddit(config: DatasetConfig, seed: int) -> GraphData:
    opts = options(config, DEFAULTS)
    try:
        from torch_geometric.datasets import Reddit
    except ImportError:
        raise BackendUnavailableError("Dataset 'reddit' needs torch_geometric: pip install 'gnnbridge[pyg]'.") from None
    folder = data_root(config) / "reddit"
    missing = [folder / "raw" / f for f in REDDIT_RAW if not (folder / "raw" / f).is_file()]
    require_files("reddit", folder, missing, opts["download"], asks=False)  # PyG never asks
    with reader("reddit", folder):
        data = Reddit(str(folder))[0]
    splits = [mask.nonzero().view(-1) for mask in (data.train_mask, data.val_mask, data.test_mask)]
    return build("reddit", folder, data.edge_index, data.x, data.y, splits)


# --------------------------------------------------------------------------- ogb


@dataclass(frozen=True)
class OgbLayout:
    """What ogb 1.3.6 reads for one dataset (its ``master.csv``), so we can check before calling it."""

    folder: str
    split: str
    node_files: tuple[str, ...] = ()
    version: int = 1
    features: str = "node-feat"  # ogbn-proteins has none of its nodes', only its edges' (edge-feat)

    def missing(self, folder: Path) -> list[Path]:
        wanted = [folder / f"RELEASE_v{self.version}.txt"]
        wanted += [folder / "split" / self.split / f"{part}.csv.gz" for part in ("train", "valid", "test")]
        if not (folder / "processed" / "data_processed").is_file():  # ogb's cache replaces raw/
            raw = ("edge", "num-node-list", "num-edge-list", self.features, "node-label", *self.node_files)
            wanted += [folder / "raw" / f"{stem}.csv.gz" for stem in raw]
        return [path for path in wanted if not path.is_file()]


OGB_LAYOUTS = {
    "ogbn-arxiv": OgbLayout("ogbn_arxiv", "time", ("node_year",)),
    "ogbn-products": OgbLayout("ogbn_products", "sales_ranking"),
    "ogbn-proteins": OgbLayout("ogbn_proteins", "species", ("node_species",), features="edge-feat"),
}


def load_ogbn_arxiv(config: DatasetConfig, seed: int) -> GraphData:
    return load_ogb("ogbn-arxiv", config)


def load_ogbn_products(config: DatasetConfig, seed: int) -> GraphData:
    return load_ogb("ogbn-products", config)


def load_ogbn_proteins(config: LoaderConfig, seed: int) -> GraphData:
    """ogbn-proteins: 112 binary functions per protein (``target=multilabel``, ROC-AUC), split by
    species. Its nodes have no features, its edges eight (association scores); until models read
    edge features, a node's are the mean of its edges' (as PyG's example for this dataset does)."""
    if label_form_of(config) != "multilabel":
        raise ConfigError(
            "Dataset 'ogbn-proteins' has 112 binary labels per protein, which OGB scores by ROC-AUC; train it "
            "with target=multilabel (the experiment 'ogbn-proteins' sets it, with OGB's monitor)."
        )
    dataset, split, folder = read_ogb_node("ogbn-proteins", config)
    graph, labels = dataset[0]
    edge_index = torch.from_numpy(graph["edge_index"]).long()  # ogb stored both directions
    n = int(graph["num_nodes"])
    feats = torch.from_numpy(graph["edge_feat"]).float()
    total = torch.zeros(n, feats.shape[1]).index_add_(0, edge_index[1], feats)
    x = total / torch.bincount(edge_index[1], minlength=n).clamp(min=1).unsqueeze(1)
    splits = [torch.as_tensor(split[part], dtype=torch.int64) for part in ("train", "valid", "test")]
    try:
        return GraphData.from_edges(edge_index, x, torch.as_tensor(labels, dtype=torch.float32), *splits,
                                    name="ogbn-proteins", edge_attr=feats)  # fmt: skip
    except DataError as exc:
        raise DataError(f"Dataset 'ogbn-proteins' in '{folder}': {exc}") from None


def read_ogb_node(name: str, config: DatasetConfig) -> tuple[Any, dict, Path]:
    """``(dataset, split, folder)`` of an ogbn-* set through ogb's ``NodePropPredDataset``, never
    prompting (see the module docstring)."""
    opts = options(config, OGB_DEFAULTS)
    try:
        from ogb.nodeproppred import NodePropPredDataset
    except ImportError:
        raise BackendUnavailableError(f"Dataset '{name}' needs the ogb package: pip install ogb") from None
    root = data_root(config)
    folder = root / OGB_LAYOUTS[name].folder
    missing = OGB_LAYOUTS[name].missing(folder)
    require_files(name, folder, missing, opts["download"], asks=True)
    if not missing:
        (folder / "processed").mkdir(exist_ok=True)  # ogb saves its cache there without creating it
    return (*read_ogb(NodePropPredDataset, "get_idx_split", name, folder, opts), folder)


def load_ogb(name: str, config: DatasetConfig) -> GraphData:
    dataset, split, folder = read_ogb_node(name, config)
    graph, labels = dataset[0]
    if graph.get("node_feat") is None:
        raise DataError(f"Dataset '{name}' in '{folder}' has no node features (raw/node-feat.csv.gz).")
    edge_index = undirected(torch.from_numpy(graph["edge_index"]).long(), int(graph["num_nodes"]))
    splits = [split["train"], split["valid"], split["test"]]
    return build(name, folder, edge_index, graph["node_feat"], labels, splits, dataset.num_classes)


def ready_ogb_folder(name: str, folder: Path, split_files: list[Path], raw: tuple[str, ...], download: bool) -> None:
    """Return once ogb can read ``folder`` without asking (see the module docstring): its release
    marker and split files, and its raw CSVs unless ogb's processed cache replaces them."""
    wanted = [folder / OGB_RELEASE, *split_files]
    if not (folder / "processed" / "data_processed").is_file():
        wanted += [folder / "raw" / f"{stem}.csv.gz" for stem in raw]
    missing = [path for path in wanted if not path.is_file()]
    require_files(name, folder, missing, download, asks=True)
    if not missing:
        (folder / "processed").mkdir(exist_ok=True)  # ogb saves its cache there without creating it


@contextlib.contextmanager
def trusted_ogb_cache():
    """Let ogb re-read its own cache on torch >= 2.6.

    ogb 1.3.6 saves ``processed/data_processed`` as a pickle of numpy arrays (protocol 4), which
    torch's default weights-only loader refuses, so every load after the first would fail. For
    this call only, full unpickling is allowed: the file is the one ogb wrote from the raw CSVs
    in the dataset folder, so it is as trusted as that folder. A user's explicit
    ``TORCH_FORCE_WEIGHTS_ONLY_LOAD`` is left alone.
    """
    key = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"
    if key in os.environ or "TORCH_FORCE_WEIGHTS_ONLY_LOAD" in os.environ:
        yield
        return
    os.environ[key] = "1"
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD.*")
            yield
    finally:
        del os.environ[key]


def undirected(edge_index: torch.Tensor, n: int) -> torch.Tensor:
    """Both directions of every edge, each once, ordered by destination (as GraphData stores them).

    One int64 key per edge (``dst * n + src``) makes this a 1-D unique, far lighter than a
    column-wise unique on ogbn-products' 120M+ edges.
    """
    src, dst = edge_index[0], edge_index[1]
    keys = torch.unique(torch.cat([dst * n + src, src * n + dst]))
    return torch.stack([keys % n, keys // n])


# --------------------------------------------------------------------------- ogbg-mol*


@dataclass(frozen=True)
class Molecules:
    """One of OGB's molecule sets: its target, the metric OGB ranks it by, its description."""

    target: str  # the gnnbridge target that reads its labels as OGB scores them
    metric: str  # OGB's eval metric, a val_/test_ metric of that target
    about: str


OGB_MOLECULES = {
    "ogbg-molhiv": Molecules("multilabel", "roc_auc", "OGB HIV activity: 41,127 molecules, 1 label, ROC-AUC (ogb)"),
    "ogbg-molpcba": Molecules("multilabel", "ap", "OGB PCBA bioassays: 437,929 molecules, 128 labels, AP (ogb)"),
    "ogbg-molesol": Molecules("regression", "rmse", "OGB ESOL solubility: 1,128 molecules, 1 value, RMSE (ogb)"),
}
SPLIT_PARTS = ("train", "valid", "test")
MOLECULE_RAW = ("edge", "num-node-list", "num-edge-list", "node-feat", "edge-feat", "graph-label")


def _molecule_loader(name: str):
    def load(config: LoaderConfig, seed: int) -> GraphCollection:
        return load_molecules(name, config)

    return load


def load_molecules(name: str, config: LoaderConfig) -> GraphCollection:
    """An ogbg-mol* set through ogb's ``GraphPropPredDataset``, with its scaffold split. Atoms'
    nine categorical features become float columns (``x``), as gnnbridge's models read floats,
    and bonds' three the edge features (``edge_attr``, read by ``model.arch=gine``)."""
    opts = options(config, OGB_DEFAULTS)
    try:
        from ogb.graphproppred import GraphPropPredDataset
    except ImportError:
        raise BackendUnavailableError(f"Dataset '{name}' needs the ogb package: pip install ogb") from None
    root = data_root(config)
    folder = root / name.replace("-", "_")
    splits = [folder / "split" / "scaffold" / f"{p}.csv.gz" for p in ("train", "valid", "test")]
    ready_ogb_folder(name, folder, splits, MOLECULE_RAW, opts["download"])
    dataset, split = read_ogb(GraphPropPredDataset, "get_idx_split", name, folder, opts)
    return molecule_collection(
        name, folder, dataset, [split["train"], split["valid"], split["test"]], label_form_of(config)
    )


def molecule_collection(name: str, folder: Path, dataset, splits, form: str) -> GraphCollection:
    """The collection of ogb's molecules, read for a run whose labels take ``form``."""
    graphs = dataset.graphs
    sizes = torch.tensor([int(g["num_nodes"]) for g in graphs], dtype=torch.int64)
    node_ptr = torch.cat([torch.zeros(1, dtype=torch.int64), sizes.cumsum(0)])
    edge_index = torch.cat([torch.from_numpy(g["edge_index"]).long() + node_ptr[i] for i, g in enumerate(graphs)], 1)
    x = torch.cat([torch.from_numpy(g["node_feat"]) for g in graphs]).float()
    bonds = [g.get("edge_feat") for g in graphs]  # three categorical columns per bond, as floats
    edge_attr = torch.cat([torch.from_numpy(b) for b in bonds]).float() if all(b is not None for b in bonds) else None
    y = torch.as_tensor(np.asarray(dataset.labels, dtype=np.float32))  # [G, T], NaN where unmeasured
    mol = OGB_MOLECULES[name]
    if form != get_target(mol.target).labels:
        raise ConfigError(
            f"Dataset '{name}' has {y.shape[1]} {'value' if mol.target == 'regression' else 'binary label'}(s) per "
            f"molecule, which OGB scores by {mol.metric}; train it with target={mol.target} (the experiment "
            f"'{name}' sets it, with OGB's monitor)."
        )
    try:
        tensors = [torch.as_tensor(s, dtype=torch.int64) for s in splits]
        return GraphCollection.from_edges(x, edge_index, node_ptr, y, tuple(tensors), name=name, edge_attr=edge_attr)
    except DataError as exc:
        raise DataError(f"Dataset '{name}' in '{folder}': {exc}") from None


# --------------------------------------------------------------------------- TU graph collections

TU_DATASETS = {  # our name: (TU name, description)
    "imdb-binary": ("IMDB-BINARY", "Graph classification: 1,000 movie ego-networks, 2 genres (PyG TUDataset; <1 MB)"),
    "proteins": ("PROTEINS", "Graph classification: 1,113 proteins, enzyme or not (PyG TUDataset; ~1 MB)"),
    "mutag": ("MUTAG", "Graph classification: 188 molecules, mutagenic or not (PyG TUDataset; <1 MB)"),
}
TU_DEFAULTS = {"download": True, "max_degree": 135}  # IMDB-BINARY's largest degree


def _tu_loader(name: str):
    def load(config: DatasetConfig, seed: int) -> GraphCollection:
        return load_tu(name, config, seed)

    return load


def load_tu(name: str, config: DatasetConfig, seed: int) -> GraphCollection:
    opts = options(config, TU_DEFAULTS)
    if opts["max_degree"] < 1:
        raise ConfigError(f"dataset.options.max_degree={opts['max_degree']} must be >= 1.")
    try:
        from torch_geometric.datasets import TUDataset
    except ImportError:
        raise BackendUnavailableError(
            f"Dataset '{name}' needs torch_geometric: pip install 'gnnbridge[pyg]'."
        ) from None
    tu_name = TU_DATASETS[name][0]
    root = data_root(config) / "TU"
    folder = root / tu_name
    raw = [folder / "raw" / f"{tu_name}_{part}.txt" for part in ("A", "graph_indicator", "graph_labels")]
    require_files(name, folder, [p for p in raw if not p.is_file()], opts["download"], asks=False)
    with reader(name, folder):
        dataset = TUDataset(str(root), tu_name)
        graphs = [dataset.get(i) for i in range(len(dataset))]
    return tu_collection(name, folder, graphs, dataset.num_classes, opts["max_degree"], seed)


def tu_collection(
    name: str, folder: Path, graphs: list, num_classes: int, max_degree: int, seed: int
) -> GraphCollection:
    """One packed collection from PyG's per-graph ``Data`` (local node ids per graph)."""
    sizes = torch.tensor([g.num_nodes for g in graphs], dtype=torch.int64)
    node_ptr = torch.cat([torch.zeros(1, dtype=torch.int64), sizes.cumsum(0)])
    edge_index = torch.cat([g.edge_index + node_ptr[i] for i, g in enumerate(graphs)], dim=1)
    if graphs[0].x is not None:
        x = torch.cat([g.x for g in graphs]).float()
    else:  # no node features: one-hot degree, capped
        degree = torch.bincount(edge_index[1], minlength=int(node_ptr[-1])).clamp(max=max_degree)
        x = torch.nn.functional.one_hot(degree, max_degree + 1).float()
    y = torch.cat([g.y.view(-1) for g in graphs]).long()
    try:
        return GraphCollection.from_edges(x, edge_index, node_ptr, y, num_classes=num_classes, seed=seed, name=name)
    except DataError as exc:
        raise DataError(f"Dataset '{name}' in '{folder}': {exc}") from None
