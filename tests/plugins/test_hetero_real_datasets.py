"""The real heterogeneous dataset loaders, run offline on tiny files in each PyG reader's raw layout.

Nothing is downloaded (PyG's ``download_url`` is replaced by a failure): every test writes the raw
files PyG would have fetched, so PyG's own processing runs, and checks what a user would notice
(node and edge counts, features, dtypes, the target, the splits, that core builds the task's
record), plus the guarantee that a run without the files fails with one line.
"""

from __future__ import annotations

import gzip
import sys

import pytest
import torch

from gnnbridge.core.config import DatasetConfig
from gnnbridge.core.errors import BackendUnavailableError, ConfigError, DataError, DataFileNotFoundError
from gnnbridge.core.plugins import datasets

pytest.importorskip("torch_geometric", reason="the heterogeneous real datasets are read by torch_geometric")
pytest.importorskip("pandas", reason="PyG's Taobao, MovieLens100K and OGB_MAG readers parse their files with pandas")

NAMES = ("taobao", "movielens", "ogbn-mag")


def load(name: str, root, seed: int = 0, **options):
    return datasets.get(name)(DatasetConfig(name=name, root=str(root), options=options), seed)


def pairs(edge_index: torch.Tensor) -> set[tuple[int, int]]:
    return set(map(tuple, edge_index.t().tolist()))


def no_download(*args, **kwargs):
    raise AssertionError("a PyG reader tried to download in an offline test")


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Each reader module imported ``download_url`` itself, so it is replaced there."""
    for module in ("taobao", "movie_lens_100k", "ogb_mag"):
        monkeypatch.setattr(f"torch_geometric.datasets.{module}.download_url", no_download)


def link_record(source, **kwargs):
    args = {
        "edge_type": "",
        "reverse": True,
        "seed": 0,
        "val_fraction": 0.2,
        "test_fraction": 0.2,
        "eval_negatives": 2,
    } | kwargs
    return source.for_link_task(**args)


# --------------------------------------------------------------------------- taobao

T = 1511600000  # inside PyG's window, 2017-11-25 .. 2017-12-03
TAOBAO_ROWS = [  # userId, itemId, categoryId, behaviorType, timestamp
    (1, 10, 100, "pv", T),
    (1, 10, 100, "buy", T + 5),  # one pair, two behaviours
    (1, 11, 100, "pv", T),
    (2, 11, 100, "cart", T),
    (2, 12, 101, "fav", T),
    (3, 13, 101, "buy", T),
    (3, 13, 101, "buy", T),  # an exact duplicate row
    (4, 14, 102, "pv", T),
    (4, 10, 100, "pv", T),
    (9, 19, 109, "buy", 1500000000),  # before the window: PyG drops it, and user 9 with it
]


def write_taobao(root) -> None:
    raw = root / "taobao" / "raw"
    raw.mkdir(parents=True)
    (raw / "UserBehavior.csv").write_text("".join(",".join(map(str, row)) + "\n" for row in TAOBAO_ROWS))


def test_taobao_reads_pyg_layout(tmp_path):
    write_taobao(tmp_path)
    source = load("taobao", tmp_path, download=False)
    assert source.num_nodes == {"user": 4, "item": 5, "category": 3} and source.x == {}
    target = ("user", "to", "item")
    assert source.target_edge == target and set(source.edges) == {target, ("item", "to", "category")}
    assert all(e.dtype == torch.int64 for e in source.edges.values())
    # raw ids become 0-based in sorted order; each (user, item) pair once, whatever the behaviours
    assert pairs(source.edges[target]) == {(0, 0), (0, 1), (1, 1), (1, 2), (2, 3), (3, 4), (3, 0)}
    assert pairs(source.edges["item", "to", "category"]) == {(0, 0), (1, 0), (2, 1), (3, 1), (4, 2)}
    record = link_record(source)
    assert record.reverse_edge == ("item", "rev_to", "user")
    assert sum(record.split(s).numel() for s in ("train", "val", "test")) == 7
    again = load("taobao", tmp_path, download=False)  # from PyG's processed cache
    assert torch.equal(again.edges[target], source.edges[target])


def test_taobao_keeps_only_the_behaviours_asked_for(tmp_path):
    write_taobao(tmp_path)
    source = load("taobao", tmp_path, download=False, behaviors="buy, fav")
    assert pairs(source.edges["user", "to", "item"]) == {(0, 0), (1, 2), (2, 3)}
    assert source.num_nodes["user"] == 4  # nodes stay: they still have other behaviours in PyG's graph


def test_taobao_refuses_an_unknown_behaviour(tmp_path):
    with pytest.raises(ConfigError, match=r"behaviors='buy,click' names 'click'.*pv,cart,buy,fav"):
        load("taobao", tmp_path, behaviors="buy,click")


# --------------------------------------------------------------------------- movielens

GENRES = 19  # u.item's flags; PyG drops the first ("unknown")
MOVIES = [
    (1, 0b1000000000000000001),
    (2, 0b0100000000000000010),
    (3, 0b0010000000000000100),
    (4, 0b0000000000010001000),
    (5, 0b0000000001000010000),
]
USERS = [(1, 20, "M", "student"), (2, 40, "F", "engineer"), (3, 30, "M", "artist"), (4, 25, "F", "student")]
BASE = [(1, 1), (1, 2), (1, 3), (2, 1), (2, 4), (3, 2), (3, 5), (4, 3), (4, 4), (4, 5)]
TEST = [(1, 4), (2, 5), (3, 1), (4, 1)]


def genre_flags(bits: int) -> list[int]:
    return [(bits >> (GENRES - 1 - g)) & 1 for g in range(GENRES)]


def write_movielens(root, base=BASE) -> None:
    raw = root / "movielens" / "raw"
    raw.mkdir(parents=True)
    items = [[m, f"Movie {m} (1995)", "01-Jan-1995", "", "http://x", *genre_flags(bits)] for m, bits in MOVIES]
    (raw / "u.item").write_text("".join("|".join(map(str, row)) + "\n" for row in items), encoding="latin-1")
    (raw / "u.user").write_text("".join(f"{u}|{a}|{g}|{o}|0000{u}\n" for u, a, g, o in USERS))
    for name, ratings in (("u1.base", base), ("u1.test", TEST)):
        rows = [f"{u}\t{m}\t{1 + (u + m) % 5}\t{880000000 + u * 10 + m}\n" for u, m in ratings]
        (raw / name).write_text("".join(rows))


def test_movielens_reads_pyg_layout_and_its_test_split(tmp_path):
    write_movielens(tmp_path)
    source = load("movielens", tmp_path, download=False, val_fraction=0.2)
    target = ("user", "rates", "movie")
    assert source.num_nodes == {"movie": 5, "user": 4} and source.target_edge == target
    assert list(source.edges) == [target]  # PyG's (movie, rated_by, user) mirror is dropped
    assert source.x["movie"].dtype == torch.float32 and source.x["user"].dtype == torch.float32
    assert source.x["movie"].tolist() == [genre_flags(bits)[1:] for _, bits in MOVIES]
    # age / max age, then one-hot gender (F, M), then one-hot occupation (artist, engineer, student)
    assert source.x["user"][1].tolist() == [1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    assert source.x["user"].shape == (4, 6)
    val, test = source.held_out
    assert pairs(test) == {(u - 1, m - 1) for u, m in TEST} and val.shape[1] == 2
    assert pairs(val) <= {(u - 1, m - 1) for u, m in BASE}
    record = link_record(source)
    assert [record.split(s).numel() for s in ("train", "val", "test")] == [8, 2, 4]
    assert not pairs(record.edge_index[target]) & (pairs(val) | pairs(test))
    mirror = record.edge_index["movie", "rev_rates", "user"]
    assert pairs(mirror) == {(m, u) for u, m in pairs(record.edge_index[target])}
    again = load("movielens", tmp_path, download=False, val_fraction=0.2)  # from PyG's processed cache
    assert torch.equal(again.held_out[0], val) and torch.equal(again.x["user"], source.x["user"])


def test_movielens_refuses_a_bad_val_fraction(tmp_path):
    with pytest.raises(ConfigError, match=r"val_fraction=0.7 must be in \(0, 0.5\)"):
        load("movielens", tmp_path, val_fraction=0.7)


def test_movielens_rating_of_an_unknown_user_is_one_line(tmp_path):
    write_movielens(tmp_path, base=[*BASE, (99, 1)])
    with pytest.raises(DataError, match="could not be read") as err:
        load("movielens", tmp_path, download=False)
    assert "\n" not in str(err.value) and "movielens" in str(err.value)


# --------------------------------------------------------------------------- ogbn-mag

PAPERS, AUTHORS, INSTITUTIONS, FIELDS, F = 12, 5, 2, 3, 4
MAG_SPLITS = {"train": [0, 1, 2, 3, 4, 5], "valid": [6, 7, 8], "test": [9, 10, 11]}
MAG_RELATIONS = {
    "author___affiliated_with___institution": [(a, a % INSTITUTIONS) for a in range(AUTHORS)],
    "author___writes___paper": [(p % AUTHORS, p) for p in range(PAPERS)] + [(0, 7), (1, 9)],
    "paper___cites___paper": [(p, (p + 1) % PAPERS) for p in range(PAPERS)],
    "paper___has_topic___field_of_study": [(p, p % FIELDS) for p in range(PAPERS)],
}


def write_gz(path, rows, header: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ([header] if header else []) + [",".join(map(str, row)) for row in rows]
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")


def write_mag(root) -> torch.Tensor:
    raw = root / "mag" / "raw"
    x = torch.arange(PAPERS * F, dtype=torch.float32).view(PAPERS, F) / 10
    write_gz(
        raw / "num-node-dict.csv.gz",
        [(AUTHORS, FIELDS, INSTITUTIONS, PAPERS)],
        header="author,field_of_study,institution,paper",
    )
    write_gz(raw / "node-feat" / "paper" / "node-feat.csv.gz", x.tolist())
    write_gz(raw / "node-feat" / "paper" / "node_year.csv.gz", [(2015 + p % 5,) for p in range(PAPERS)])
    write_gz(raw / "node-label" / "paper" / "node-label.csv.gz", [(p % 3,) for p in range(PAPERS)])
    for relation, edges in MAG_RELATIONS.items():
        write_gz(raw / "relations" / relation / "edge.csv.gz", edges)
    for part, ids in MAG_SPLITS.items():
        write_gz(raw / "split" / "time" / "paper" / f"{part}.csv.gz", [(i,) for i in ids])
    return x


def test_ogbn_mag_reads_pyg_layout_and_its_time_split(tmp_path):
    x = write_mag(tmp_path)
    source = load("ogbn-mag", tmp_path, download=False)
    assert source.num_nodes == {
        "paper": PAPERS,
        "author": AUTHORS,
        "institution": INSTITUTIONS,
        "field_of_study": FIELDS,
    }
    assert list(source.x) == ["paper"] and torch.equal(source.x["paper"], x)
    assert {"___".join(et) for et in source.edges} == set(MAG_RELATIONS)
    for et, edges in source.edges.items():
        assert edges.dtype == torch.int64 and pairs(edges) == set(MAG_RELATIONS["___".join(et)])
    assert source.target_node == "paper" and source.y.dtype == torch.int64
    assert source.y.tolist() == [p % 3 for p in range(PAPERS)]
    assert [s.tolist() for s in source.splits] == list(MAG_SPLITS.values())
    record = source.for_node_task(reverse=True, seed=0)
    assert record.num_classes == 3 and ("paper", "rev_writes", "author") in record.edge_index
    assert [record.split(s).numel() for s in ("train", "val", "test")] == [6, 3, 3]
    again = load("ogbn-mag", tmp_path, download=False)  # from PyG's processed cache
    assert torch.equal(again.y, source.y) and torch.equal(
        again.edges["paper", "cites", "paper"], source.edges["paper", "cites", "paper"]
    )


# --------------------------------------------------------------------------- missing files and packages

FOLDERS = {"taobao": "taobao", "movielens": "movielens", "ogbn-mag": "mag"}


@pytest.mark.parametrize("name", NAMES)
def test_missing_files_without_download_is_one_line(tmp_path, name):
    with pytest.raises(DataFileNotFoundError) as err:
        load(name, tmp_path / "empty", download=False)
    message = str(err.value)
    assert "\n" not in message and str(tmp_path / "empty" / FOLDERS[name]) in message and "download" in message


def test_one_missing_raw_file_is_named(tmp_path):
    write_mag(tmp_path)
    (tmp_path / "mag" / "raw" / "split" / "time" / "paper" / "valid.csv.gz").unlink()
    with pytest.raises(DataFileNotFoundError, match=r"no raw/split/time/paper/valid\.csv\.gz"):
        load("ogbn-mag", tmp_path, download=False)


@pytest.mark.parametrize("name", NAMES)
def test_missing_pandas_names_the_install(tmp_path, name, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import now raises ImportError
    with pytest.raises(BackendUnavailableError, match="pip install pandas"):
        load(name, tmp_path)


def test_missing_pyg_names_the_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_geometric.datasets", None)
    with pytest.raises(BackendUnavailableError, match=r"pip install 'gnnbridge\[pyg\]'"):
        load("movielens", tmp_path)
