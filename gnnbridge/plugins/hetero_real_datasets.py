"""Named real heterogeneous datasets, fetched on first use: link prediction on ``taobao`` and
``movielens``, node classification on ``ogbn-mag``.

All three are read by PyG's own classes (``Taobao``, ``MovieLens100K``, ``OGB_MAG``), so a
folder PyG downloaded for another project is reused as it is, and the parsing (id remapping,
PyG's feature encoding) is the one PyG users know. PyG's readers parse CSV files with pandas.
The shared machinery (data root, download checks, one-line read errors, options) is
:mod:`gnnbridge.plugins.real_datasets`'s; see its docstring for where files live.

Folder layout under the data root, as PyG writes it (a ``processed/`` folder with PyG's cache
appears beside ``raw/`` after the first read)::

    <root>/taobao/raw/UserBehavior.csv
    <root>/movielens/raw/u.item, u.user, u1.base, u1.test      (the files of GroupLens' ml-100k/)
    <root>/mag/raw/num-node-dict.csv.gz                         (PyG's OGB_MAG, not ogb's ogbn_mag/)
                   node-feat/paper/node-feat.csv.gz, node_year.csv.gz
                   node-label/paper/node-label.csv.gz
                   relations/<src>___<relation>___<dst>/edge.csv.gz   (the 4 edge types)
                   split/time/paper/train.csv.gz, valid.csv.gz, test.csv.gz

What is kept:

* ``taobao``: users, items and categories, all featureless; ``(user, to, item)`` edges for the
  behaviours in ``dataset.options.behaviors`` (``all``, or some of ``pv,cart,buy,fav``), each
  (user, item) pair once; ``(item, to, category)``. PyG keeps only behaviours dated 2017-11-25 to
  2017-12-03. The target is ``(user, to, item)``, split by ``link.val_fraction``/``test_fraction``.
* ``movielens``: users (age, gender, occupation: 24 features) and movies (18 genres) as PyG
  encodes them; every rating, whatever its value, is a ``(user, rates, movie)`` edge. The test
  edges are GroupLens' ``u1.test``; the validation edges a seeded ``dataset.options.val_fraction``
  of ``u1.base``. PyG's ``(movie, rated_by, user)`` mirror is dropped: it would show validation
  edges to the model; ``dataset.reverse_edges`` rebuilds it from the train edges only.
* ``ogbn-mag``: papers (128 word2vec features, labelled with one of 349 venues), authors,
  institutions and fields of study (featureless, PyG's ``preprocess=None``); the 4 directed edge
  types as published; OGB's time split of the papers (train up to 2017, val 2018, test 2019).
"""

from __future__ import annotations

from pathlib import Path

import torch

from gnnbridge.core.contracts.hookspecs import hookimpl
from gnnbridge.core.errors import BackendUnavailableError, ConfigError
from gnnbridge.core.interfaces import DatasetConfig
from gnnbridge.core.records.hetero import HeteroSource
from gnnbridge.plugins.ogb_links import OGB_LINKS, link_loader
from gnnbridge.plugins.options import options
from gnnbridge.plugins.real_datasets import data_root, reader, require_files

BEHAVIORS = ("pv", "cart", "buy", "fav")  # PyG's codes 0, 1, 2, 3
TAOBAO_DEFAULTS = {"download": True, "behaviors": "all"}
MOVIELENS_DEFAULTS = {"download": True, "val_fraction": 0.1}
MAG_DEFAULTS = {"download": True}

MOVIELENS_RAW = ("u.item", "u.user", "u1.base", "u1.test")
MAG_EDGES = (
    ("author", "affiliated_with", "institution"),
    ("author", "writes", "paper"),
    ("paper", "cites", "paper"),
    ("paper", "has_topic", "field_of_study"),
)
MAG_RAW = (
    "num-node-dict.csv.gz",
    "node-feat/paper/node-feat.csv.gz",
    "node-feat/paper/node_year.csv.gz",
    "node-label/paper/node-label.csv.gz",
    *(f"relations/{'___'.join(et)}/edge.csv.gz" for et in MAG_EDGES),
    *(f"split/time/paper/{part}.csv.gz" for part in ("train", "valid", "test")),
)


@hookimpl
def register_datasets(register):
    register(
        "taobao",
        load_taobao,
        "Taobao behaviour: ~1M users, 4.2M items, 9.4k categories, ~100M clicks/buys; task=link on "
        "(user, to, item) (PyG reader; downloads ~1 GB)",
    )
    register(
        "movielens",
        load_movielens,
        "MovieLens 100K: 943 users, 1,682 movies (features), 100k ratings; task=link on (user, rates, movie) "
        "(PyG reader; ~5 MB)",
    )
    register(
        "ogbn-mag",
        load_ogbn_mag,
        "OGB MAG: 736,389 papers (349 venues), 1.1M authors, 8,740 institutions, 59,965 fields; task=node on "
        "papers (PyG reader; downloads ~400 MB)",
    )
    for name, links in OGB_LINKS.items():  # (their loaders: gnnbridge.plugins.ogb_links)
        register(name, link_loader(name), links.about)


def pyg_reader(name: str, cls: str, processed: Path):
    """PyG's dataset class ``cls``; pandas is needed too unless PyG's cache is already there."""
    try:
        import torch_geometric.datasets as pyg_datasets
    except ImportError:
        raise BackendUnavailableError(
            f"Dataset '{name}' needs torch_geometric: pip install 'gnnbridge[pyg]'."
        ) from None
    if not processed.is_file():
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise BackendUnavailableError(
                f"Dataset '{name}' needs pandas, which PyG's {cls} parses its files with: pip install pandas."
            ) from None
    return getattr(pyg_datasets, cls)


def read_pyg(name: str, cls: str, root: Path, folder: Path, raw: tuple[str, ...], download: bool, **kwargs):
    """PyG's ``HeteroData`` of ``cls(root)``, once its raw files in ``folder/raw`` are there or may be
    fetched (PyG downloads without asking, so nothing can hang)."""
    dataset_cls = pyg_reader(name, cls, folder / "processed" / "data.pt")
    missing = [folder / "raw" / f for f in raw if not (folder / "raw" / f).is_file()]
    require_files(name, folder, missing, download, asks=False)
    with reader(name, folder):
        return dataset_cls(str(root), **kwargs)[0]


def graph_of(data, edge_types) -> tuple[dict, dict, dict]:
    """(num_nodes, x, edges) of a PyG ``HeteroData`` in HeteroSource's dtypes; only ``edge_types``."""
    num_nodes = {t: int(data[t].num_nodes) for t in data.node_types}
    x = {t: data[t].x.to(torch.float32) for t in data.node_types if "x" in data[t]}
    edges = {tuple(et): data[tuple(et)].edge_index.to(torch.int64) for et in edge_types}
    return num_nodes, x, edges


def distinct_pairs(edge_index: torch.Tensor, n_dst: int) -> torch.Tensor:
    """Each (src, dst) pair once, by one int64 key per edge (far lighter than a column unique)."""
    keys = torch.unique(edge_index[0] * n_dst + edge_index[1])
    return torch.stack([keys // n_dst, keys % n_dst])


# --------------------------------------------------------------------------- taobao


def load_taobao(config: DatasetConfig, seed: int) -> HeteroSource:
    opts = options(config, TAOBAO_DEFAULTS)
    codes = behavior_codes(opts["behaviors"])
    folder = data_root(config) / "taobao"
    data = read_pyg("taobao", "Taobao", folder, folder, ("UserBehavior.csv",), opts["download"])
    target = ("user", "to", "item")
    with reader("taobao", folder):
        num_nodes, x, edges = graph_of(data, [target, ("item", "to", "category")])
        kept = torch.isin(data[target].behavior, torch.tensor(codes))
        edges[target] = distinct_pairs(edges[target][:, kept], num_nodes["item"])
    return HeteroSource(num_nodes, x, edges, target_edge=target, name="taobao")


def behavior_codes(text: str) -> list[int]:
    """PyG's codes of the behaviours ``dataset.options.behaviors`` names."""
    if text.strip() == "all":
        return list(range(len(BEHAVIORS)))
    names = [part.strip() for part in text.split(",")]
    bad = [n for n in names if n not in BEHAVIORS]
    if bad:
        raise ConfigError(
            f"dataset.options.behaviors={text!r} names {bad[0]!r}, not a Taobao behaviour; use all, "
            f"or some of {','.join(BEHAVIORS)} (e.g. buy)."
        )
    return [BEHAVIORS.index(n) for n in names]


# --------------------------------------------------------------------------- movielens


def load_movielens(config: DatasetConfig, seed: int) -> HeteroSource:
    opts = options(config, MOVIELENS_DEFAULTS)
    if not 0 < opts["val_fraction"] < 0.5:
        raise ConfigError(
            f"dataset.options.val_fraction={opts['val_fraction']} must be in (0, 0.5), e.g. 0.1 "
            "(the share of u1.base held out for validation)."
        )
    folder = data_root(config) / "movielens"
    data = read_pyg("movielens", "MovieLens100K", folder, folder, MOVIELENS_RAW, opts["download"])
    target = ("user", "rates", "movie")
    with reader("movielens", folder):
        num_nodes, x, edges = graph_of(data, [target])  # without the (movie, rated_by, user) mirror
        n_movies = num_nodes["movie"]
        test = distinct_pairs(data[target].edge_label_index.to(torch.int64), n_movies)
        base = distinct_pairs(edges[target], n_movies)
        base = base[:, ~torch.isin(base[0] * n_movies + base[1], test[0] * n_movies + test[1])]
        val = base[:, seeded_share(base.shape[1], opts["val_fraction"], seed)]
    return HeteroSource(num_nodes, x, {target: base}, target_edge=target, held_out=(val, test), name="movielens")


def seeded_share(n: int, fraction: float, seed: int) -> torch.Tensor:
    """``fraction`` of ``range(n)`` (at least one), drawn from ``seed`` alone, sorted."""
    count = min(n - 1, max(1, round(fraction * n)))
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:count].sort().values


# --------------------------------------------------------------------------- ogbn-mag


def load_ogbn_mag(config: DatasetConfig, seed: int) -> HeteroSource:
    opts = options(config, MAG_DEFAULTS)
    root = data_root(config)
    folder = root / "mag"
    data = read_pyg("ogbn-mag", "OGB_MAG", root, folder, MAG_RAW, opts["download"], preprocess=None)
    with reader("ogbn-mag", folder):
        num_nodes, x, edges = graph_of(data, MAG_EDGES)
        paper = data["paper"]
        splits = tuple(paper[f"{s}_mask"].nonzero().view(-1) for s in ("train", "val", "test"))
        y = paper.y.to(torch.int64).view(-1)
    return HeteroSource(num_nodes, x, edges, target_node="paper", y=y, splits=splits, name="ogbn-mag")
