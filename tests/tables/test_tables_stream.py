"""Tables larger than memory (issue 62, part 7): schema inference keeps each primary key's
distinct values (sorted arrays, merged batch by batch), never a column's rows, and gives the same
schema in batches of seven rows as in one; text keys are read from arrow's buffers as fixed-width
bytes that sort as Python's str does."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from shop import make_shop, write_parquet, write_sqlite

from gnnbridge.tables import keys, sources
from gnnbridge.tables.schema import infer
from gnnbridge.tables.sources import open_source


def odd_tables() -> dict:
    """Keys that test the counting rules: missing and repeated keys, integers against text, a cycle."""
    return {
        "customers": pa.table({"customer_id": ["a", "b", None, "b", "c"], "v": [1, 2, 3, 4, 5]}),
        "products": pa.table({"product_id": pa.array([1, 2, None, 4, 4, 5], pa.int64()), "w": [1.0] * 6}),
        "stores": pa.table({"id": ["1", "2", "3"], "z": [1, 2, 3]}),
        "visits": pa.table(
            {
                "customer_id": ["a", "x", None, "b", "c", "a"],
                "product_id": pa.array([1, 2, 3, None, 9, 4], pa.int64()),
                "store_id": pa.array([1, 2, 3, 4, 1, 1], pa.int64()),
            }
        ),
        "uni": pa.table({"uni_id": ["é", "e", "ü", "z", "Z"], "customer_id": ["a", "a", "ü", "b", ""]}),
        "aa": pa.table({"aa_id": [1, 2, 3, 4], "bb_id": pa.array([10, 11, 99, None], pa.int64())}),
        "bb": pa.table({"bb_id": [10, 11, 12], "aa_id": pa.array([1, 5, 1], pa.int64())}),
    }


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream")
    return {
        "shop": str(write_parquet(make_shop(n_customers=120), root / "shop")),
        "shop.sqlite": str(write_sqlite(make_shop(n_customers=120), root / "shop.sqlite")),
        "odd": str(write_parquet(odd_tables(), root / "odd")),
    }


def _infer(where: str) -> dict:
    with open_source(where) as source:
        return infer(source, None)


def test_counts_follow_the_rules(written):
    t = _infer(written["odd"])["tables"]
    missing = "primary key customer_id: 1 missing, 1 repeated (prepare refuses it until fixed)"
    assert t["customers"]["notes"] == [missing]
    assert t["visits"]["notes"][:3] == [
        "customer_id -> customers.customer_id: 5 of 6 rows found, 1 dangling",  # a missing value: the key has one too
        "product_id -> products.product_id: 4 of 6 rows found, 2 dangling",
        "store_id -> stores.id: 0 of 6 rows found, 6 dangling",  # integers are never among text keys
    ]
    assert t["uni"]["notes"] == ["customer_id -> customers.customer_id: 3 of 5 rows found, 2 dangling"]
    assert t["aa"]["notes"] == ["bb_id -> bb.bb_id: 2 of 4 rows found, 2 dangling"]  # a cycle: aa -> bb -> aa
    assert t["bb"]["notes"] == ["aa_id -> aa.aa_id: 2 of 3 rows found, 1 dangling"]


@pytest.mark.parametrize("name", ["shop", "shop.sqlite", "odd"])
def test_the_same_schema_in_batches_of_seven(written, name, monkeypatch):
    whole = _infer(written[name])
    monkeypatch.setattr(sources, "BATCH_ROWS", 7)
    monkeypatch.setattr(keys, "MERGE_ROWS", 5)
    monkeypatch.setattr(keys, "SCATTER_BYTES", 16)
    assert _infer(written[name]) == whole


def test_text_keys_sort_and_compare_as_python_strings():
    rng = np.random.default_rng(0)
    alphabet = list("aZ0_é€𝄞-") + ["\x1f"]
    values = ["".join(rng.choice(alphabet, rng.integers(0, 9))) for _ in range(400)] + [None] * 20
    rng.shuffle(values)
    for array in (pa.array(values), pa.array(values, pa.large_string()), pa.array(values).slice(13, 300)):
        got = keys.text_bytes(array)
        want = ["" if v is None else v for v in array.to_pylist()]
        assert keys.shown(got.tolist()) == want
        assert keys.shown(np.sort(got).tolist()) == sorted(want)
    chunked = pa.chunked_array([pa.array(["bb", "a"]), pa.array(["ccc"])])
    assert keys.shown(keys.text_bytes(chunked).tolist()) == ["bb", "a", "ccc"]


def test_a_key_set_is_its_distinct_values(monkeypatch):
    monkeypatch.setattr(keys, "MERGE_ROWS", 3)
    rng = np.random.default_rng(1)
    seen = keys.KeySet()
    parts = [rng.integers(0, 50, rng.integers(0, 9)) for _ in range(30)]
    for part in parts:
        seen.add(part)
    assert np.array_equal(seen.keys(), np.unique(np.concatenate(parts)))
    assert keys.count_in(seen.keys(), np.array([3, 3, 1000, -1])) == 2 * (3 in seen.keys())


# --------------------------------------------------------------------------- a labelled edge table

EDGE = "customers__reviews__products"
WORDS = ["train", "Train", "validation", "test", "TEST", "val", None]


@pytest.fixture(scope="module")
def reviews(tmp_path_factory):
    """The shop with reviews that carry a split word and a date (few dates: many ties)."""
    root = tmp_path_factory.mktemp("reviews")
    tables = make_shop(n_customers=120)
    n = tables["reviews"].num_rows
    rng = np.random.default_rng(4)
    split = [WORDS[i] for i in rng.integers(0, len(WORDS), n)]
    when = pa.array((19000 + rng.integers(0, 30, n)).astype(np.int32), pa.date32())
    tables["reviews"] = (
        tables["reviews"].append_column("split", pa.array(split, pa.string())).append_column("when", when)
    )
    return {"root": root, "source": str(write_parquet(tables, root / "src")), "reviews": tables["reviews"]}


def _prepare(reviews, out: str, task: dict, target: str) -> dict:
    from gnnbridge.tables.build import Settings, prepare_tables

    with open_source(reviews["source"]) as source:
        schema = infer(source, "reviews.rating")
    schema["task"].update(task)
    path = reviews["root"] / f"{out}.yaml"
    import yaml

    path.write_text(yaml.safe_dump(schema))
    folder = reviews["root"] / out
    prepare_tables(Settings(reviews["source"], str(folder), schema=str(path), target=target, progress=False))
    return {p.name: np.load(p) for p in sorted(folder.glob("*.npy"))}


CASES = {
    "class-split": ({"split_column": "reviews.split"}, "class"),
    "regression-time": ({"time_column": "reviews.when"}, "regression"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_labelled_edge_table_sorted_in_small_buckets_gives_the_same_arrays(reviews, case, monkeypatch):
    from gnnbridge.tables import edgesort, labels

    task, target = CASES[case]
    whole = _prepare(reviews, f"{case}-whole", task, target)  # one bucket, one batch: the sort in memory
    monkeypatch.setattr(sources, "BATCH_ROWS", 5)
    monkeypatch.setattr(edgesort, "SORT_ROWS", 7)
    monkeypatch.setattr(labels, "CHUNK", 3)
    small = _prepare(reviews, f"{case}-small", task, target)
    assert small.keys() == whole.keys()
    for name, a in whole.items():
        assert a.dtype == small[name].dtype and np.array_equal(a, small[name], equal_nan=True), name
    src, dst = whole[f"edge_index__{EDGE}.npy"]
    label, attr = whole[f"edge_label__{EDGE}.npy"], whole[f"edge_attr__{EDGE}.npy"]
    keys = [label.astype(np.float64), *(attr[:, j] for j in range(attr.shape[1] - 1, -1, -1)), dst, src]
    assert np.array_equal(np.lexsort(keys), np.arange(len(src)))  # in the canonical order
    assert len(src) == reviews["reviews"].num_rows
    splits = [whole[f"edge_{s}_idx__{EDGE}.npy"] for s in ("train", "val", "test")]
    if case == "class-split":
        words = [w for w in reviews["reviews"].column("split").to_pylist()]
        expected = [sum(w is not None and w.lower() in names for w in words) for names in
                    ({"train"}, {"val", "validation"}, {"test"})]  # fmt: skip
        assert [len(s) for s in splits] == expected
    else:
        assert [len(s) for s in splits] == [int(len(src) * 0.6), int(len(src) * 0.8) - int(len(src) * 0.6),
                                            len(src) - int(len(src) * 0.8)]  # fmt: skip


def test_a_bucket_sorted_by_its_pairs_is_lexsorted():
    from gnnbridge.tables.edgesort import _order

    rng = np.random.default_rng(2)
    for _ in range(200):
        n = int(rng.integers(1, 200))
        src, dst = rng.integers(0, rng.integers(1, 15), n), rng.integers(0, rng.integers(1, 15), n)
        extra = [rng.choice([np.nan, 0.0, 1.0, 2.0], n).astype(np.float32) for _ in range(rng.integers(0, 3))]
        assert np.array_equal(_order(src, dst, extra), np.lexsort([*extra, dst, src]))


@pytest.mark.parametrize("ids", [np.arange(-5, 40), 100 + 7 * np.arange(30), np.array([3])])
def test_key_positions_are_searchsorted(ids):
    values = np.random.default_rng(3).integers(-60, 400, 500)
    assert np.array_equal(keys.positions(ids, values), np.searchsorted(ids, values))
    assert np.array_equal(keys.contains(ids, values), np.isin(values, ids))
    assert keys.count_in(ids, values) == int(np.isin(values, ids).sum())


def test_a_time_split_counted_over_chunks_is_the_sort_by_time(tmp_path, monkeypatch):
    from gnnbridge.tables import labels

    monkeypatch.setattr(labels, "CHUNK", 7)
    rng = np.random.default_rng(5)
    for trial in range(20):
        n = int(rng.integers(1, 120))
        time = rng.choice([-3.5, -0.0, 0.0, 1.0, 2.25, 1e300, -np.inf], n)
        label = rng.normal(size=n).astype(np.float32)
        label[rng.random(n) < 0.3] = np.nan  # unlabelled rows are in no split
        labels.write_splits(label, lambda s, t=trial: tmp_path / f"{t}-{s}.npy", time=time)
        rows = np.flatnonzero(~np.isnan(label))
        rows = rows[np.lexsort((rows, time[rows]))]
        a, b = int(len(rows) * 0.6), int(len(rows) * 0.8)
        for s, part in zip(("train", "val", "test"), (rows[:a], rows[a:b], rows[b:])):
            assert np.array_equal(np.load(tmp_path / f"{trial}-{s}.npy"), np.sort(part)), (trial, s)
