"""The transforms beyond standardise and one-hot (issue 62, part 4): rank-gauss, buckets, a wide
category as a node type of its own (its learnt embeddings are the embedding ids), hashed text;
each fitted on known values, its state kept in tables.json and applied exactly by --like."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from helpers import in_process, ok

import gnnbridge
from gnnbridge.core.errors import ConfigError
from gnnbridge.tables.build import Settings, prepare_tables
from gnnbridge.tables.schema import check, infer, to_yaml
from gnnbridge.tables.sources import open_source
from gnnbridge.tables.transforms import Encoder, encoder_from_state

FEW = ("--backend", "pyg", "--set", "train.epochs=3", "--set", "model.layers=1", "--set", "sampler.fanouts=[10]")
WORDS = ["great", "broken", "fast", "slow", "blue", "red", "cheap", "fine"]


def fitted(values, transform: str, kind: str = "numeric", **options) -> Encoder:
    e = Encoder("v", kind, transform, **options)
    array = pa.array(values)
    e.observe(array[: len(values) // 2])
    e.observe(array[len(values) // 2 :])
    e.finish()
    return e


def test_rank_gauss_is_monotone_and_about_normal():
    values = np.random.default_rng(0).exponential(3.0, 5000)
    e = fitted(values.tolist() + [None], "rank-gauss")
    z = e.encode(pa.array(np.sort(values)))[:, 0]
    assert np.all(np.diff(z) >= 0)
    assert abs(float(z.mean())) < 0.05 and abs(float(z.std()) - 1.0) < 0.1
    assert np.abs(z).max() <= 3.1  # clipped
    out = e.encode(pa.array([None, -100.0, 1e9]))
    assert e.names() == ["v", "v.missing"]
    assert out[0, 1] == 1 and abs(out[0, 0]) < 0.05  # missing: the median's score, flagged
    assert out[1, 0] == pytest.approx(-3.0902, abs=1e-3) and out[2, 0] == pytest.approx(3.0902, abs=1e-3)


def test_buckets_edges_and_one_hot():
    e = fitted(list(range(100)), "buckets", buckets=4)
    assert e.state["edges"] == [24.75, 49.5, 74.25]
    assert e.names() == ["v.bucket0", "v.bucket1", "v.bucket2", "v.bucket3"]
    out = e.encode(pa.array([0, 30, 60, 99, -5]))
    assert out.argmax(axis=1).tolist() == [0, 1, 2, 3, 0] and out.sum(axis=1).tolist() == [1] * 5
    assert fitted([1.0] * 50 + [2.0] * 50, "buckets").state["edges"] == [1.0, 1.5, 2.0]  # repeats merged


HASH_SCRIPT = """
import json, pyarrow as pa
from gnnbridge.tables.transforms import Encoder
e = Encoder("t", "text", "hashed", buckets=16)
a = pa.array(["The quick fox", "the THE the", None, "fox, fox!"])
e.observe(a); e.finish()
print(json.dumps(e.encode(a).tolist()))
"""


@pytest.mark.slow
def test_hashed_tokens_are_deterministic_across_processes():
    runs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(Path(gnnbridge.__file__).resolve().parents[1])}
        proc = subprocess.run([sys.executable, "-c", HASH_SCRIPT], env=env, capture_output=True, text=True, check=True)
        runs.append(json.loads(proc.stdout))
    assert runs[0] == runs[1]
    out = np.asarray(runs[0])
    assert out.shape == (4, 17)  # 16 buckets and the missing flag
    assert np.allclose(np.linalg.norm(out[[0, 1, 3], :16], axis=1), 1.0)
    assert sorted(out[1, :16])[-1] == 1.0 and (out[1, :16] > 0).sum() == 1  # one token, case folded
    assert out[2].tolist() == [0.0] * 16 + [1.0]


@pytest.mark.parametrize(
    "transform,kind,values",
    [
        ("rank-gauss", "numeric", [3.0, 1.0, None, 7.5, 2.0]),
        ("buckets", "numeric", [3.0, 1.0, None, 7.5, 2.0]),
        ("hashed", "text", ["a b", None, "c d e"]),
        ("node", "categorical", ["x", "y", None, "x"]),
    ],
)
def test_state_round_trips_through_json(transform, kind, values):
    e = fitted(values, transform, kind)
    again = encoder_from_state(json.loads(json.dumps(e.describe())))
    new = pa.array(values + values[:1])
    assert again.names() == e.names()
    assert np.array_equal(again.encode(new), e.encode(new))
    if transform == "node":
        assert again.node_ids(pa.array(["y", "unseen", None])).tolist() == [1, 2, -1]


# --------------------------------------------------------------------------- a folder with them


def customers(n: int = 600, seed: int = 0, brands: int = 300) -> pa.Table:
    """Customers whose churn is set by their brand (300 brands, two customers each), with a
    skewed income, a spend and a free-text bio."""
    rng = np.random.default_rng(seed)
    brand = np.arange(n) % brands
    bad = rng.permutation(brands)[: brands // 2]
    churned = np.isin(brand, bad) ^ (rng.random(n) < 0.05)
    bio = [" ".join(rng.choice(WORDS, 3)) + f" note {i}" for i in range(n)]
    return pa.table(
        {
            "customer_id": [f"C{i:04d}" for i in range(n)],
            "brand": [f"brand-{b:03d}" for b in brand],
            "segment": rng.choice(["retail", "business", "student"], n).tolist(),
            "income": rng.lognormal(10, 1, n),
            "spend": rng.normal(50, 10, n),
            "bio": bio,
            "churned": churned.tolist(),
        }
    )


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    root = tmp_path_factory.mktemp("transforms")
    src = root / "src"
    src.mkdir()
    pq.write_table(customers(), src / "customers.parquet")
    schema = infer(open_source(str(src)), "customers.churned")
    columns = schema["tables"]["customers"]["columns"]
    columns["income"]["transform"] = "rank-gauss"
    columns["spend"].update(transform="buckets", buckets=5)
    columns["bio"]["transform"] = "hashed"
    (root / "schema.yaml").write_text(to_yaml(schema, str(src)))
    prepare_tables(Settings(str(src), str(root / "g"), schema=str(root / "schema.yaml"), progress=False))
    return {"root": root, "src": src, "schema": schema, "inferred": infer(open_source(str(src)), None)}


def test_a_wide_category_is_inferred_as_a_node_type(warehouse):
    inferred = warehouse["inferred"]["tables"]["customers"]
    assert inferred["columns"]["brand"] == {"kind": "categorical", "transform": "node"}
    assert inferred["columns"]["segment"] == {"kind": "categorical", "transform": "onehot"}
    assert inferred["columns"]["bio"] == {"kind": "text", "transform": "drop"}
    assert any("brand: 300 categories" in n and "customers_brand" in n for n in inferred["notes"])
    assert "transform: node" in (warehouse["root"] / "schema.yaml").read_text()


def test_the_node_type_its_relation_and_state(warehouse):
    g = warehouse["root"] / "g"
    assert np.load(g / "num_nodes__customers_brand.npy").tolist() == [301]  # 300 brands and <other>
    edges = np.load(g / "edge_index__customers__brand__customers_brand.npy")
    assert edges.shape == (2, 600) and edges[1].max() < 300
    keys = pq.read_table(g / "keys" / "customers_brand.parquet").to_pylist()
    assert keys[0] == {"brand": "brand-000", "id": 0} and keys[-1] == {"brand": "<other>", "id": 300}
    info = json.loads((g / "tables.json").read_text())
    encoders = {e["column"]: e for e in info["node_types"]["customers"]["encoders"]}
    assert set(encoders) == {"brand", "segment", "income", "spend", "bio"}
    assert len(encoders["brand"]["vocabulary"]) == 300 and len(encoders["spend"]["edges"]) == 4
    assert len(encoders["income"]["quantiles"]) == len(encoders["income"]["scores"]) > 100
    assert encoders["bio"]["buckets"] == 64
    features = info["node_types"]["customers"]["features"]
    assert not any(f.startswith("brand") for f in features)
    assert (
        np.load(g / "x__customers.npy").shape == (600, len(features)) == (600, 4 + 1 + 5 + 64)
    )  # segment, income, spend, bio
    assert info["node_types"]["customers_brand"]["values_of"] == "customers.brand"


def test_like_gives_the_same_encodings_and_other_for_unseen(warehouse, tmp_path):
    old = pq.read_table(warehouse["src"] / "customers.parquet").drop_columns(["churned"])
    new = pa.table(
        {
            "customer_id": ["N001", "N002"],
            "brand": ["brand-007", "brand-new"],
            "segment": ["retail", "nonprofit"],
            "income": [30000.0, None],
            "spend": [55.0, 1000.0],
            "bio": ["great blue", "never seen words"],
        }
    ).cast(old.schema)
    src = tmp_path / "new"
    src.mkdir()
    pq.write_table(pa.concat_tables([new, old]), src / "customers.parquet")
    result = prepare_tables(Settings(str(src), str(tmp_path / "g"), like=str(warehouse["root"] / "g"), progress=False))
    g, before = tmp_path / "g", warehouse["root"] / "g"
    assert np.array_equal(np.load(g / "x__customers.npy")[:600], np.load(before / "x__customers.npy"))
    assert np.load(g / "num_nodes__customers_brand.npy").tolist() == [301]
    edges = np.load(g / "edge_index__customers__brand__customers_brand.npy")
    rows = dict(zip(edges[0].tolist(), edges[1].tolist()))
    assert rows[600] == 7 and rows[601] == 300  # N001 (sorted after C...) brand-007; N002's brand: <other>
    assert np.array_equal(edges[:, :600], np.load(before / "edge_index__customers__brand__customers_brand.npy"))
    assert any("1 rows with a value not seen in training" in n for n in result["notes"])


def test_overrides_either_way_and_bad_options(warehouse, tmp_path):
    schema = json.loads(json.dumps(warehouse["schema"]))
    columns = schema["tables"]["customers"]["columns"]
    columns["brand"].update(transform="onehot", max_categories=5)
    columns["segment"]["transform"] = "node"
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(schema))
    prepare_tables(Settings(str(warehouse["src"]), str(tmp_path / "g"), schema=str(path), progress=False))
    info = json.loads((tmp_path / "g" / "tables.json").read_text())
    features = info["node_types"]["customers"]["features"]
    assert sum(f.startswith("brand=") for f in features) == 6 and "customers_brand" not in info["node_types"]
    assert np.load(tmp_path / "g" / "num_nodes__customers_segment.npy").tolist() == [4]
    source = open_source(str(warehouse["src"]))
    columns["spend"] = {"kind": "numeric", "transform": "standardize", "buckets": 3}
    with pytest.raises(ConfigError, match="buckets applies to transform buckets or hashed, not standardize"):
        check(json.loads(json.dumps(schema)), source)
    columns["spend"] = {"kind": "numeric", "transform": "buckets", "buckets": 1}
    with pytest.raises(ConfigError, match="buckets 1 must be a whole number >= 2"):
        check(json.loads(json.dumps(schema)), source)
    columns["spend"] = {"kind": "numeric", "transform": "rank-gauss"}
    columns["bio"] = {"kind": "text", "transform": "embed"}
    with pytest.raises(ConfigError, match="transform 'embed' does not apply to kind text; use one of: drop, hashed"):
        check(json.loads(json.dumps(schema)), source)


def test_a_folder_with_a_category_node_type_trains(warehouse):
    root = warehouse["root"]
    ok(in_process("train", "--dataset", str(root / "g"), *FEW, "--out", "run", cwd=root))
    results = json.loads((root / "run" / "results.json").read_text())
    assert results["metrics"]
