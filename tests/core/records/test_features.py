"""Gathering feature rows: mapped and 16-bit tables, the feature cache, and a run that uses it."""

import json
import re
import threading
import warnings

import numpy as np
import pytest
import torch

import gnnbridge
from gnnbridge.core.config import from_dict
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.records.features import (
    READ_DEPTH,
    advise,
    build_cache,
    cache_of,
    detach_cache,
    file_backed,
    gather_rows,
    set_read_depth,
)

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
NUM_THREADS = torch.get_num_threads()


def _mapped(table: torch.Tensor, folder) -> torch.Tensor:
    """``table`` saved to ``folder/x.npy`` and mapped back read-only, as a folder dataset maps it
    (bfloat16 stored as its uint16 bit patterns)."""
    bits = table.view(torch.int16).numpy() if table.dtype == torch.bfloat16 else table.numpy()
    np.save(folder / "x.npy", bits)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a read-only array: never written
        mapped = torch.from_numpy(np.load(folder / "x.npy", mmap_mode="r"))
    return mapped.view(torch.bfloat16) if table.dtype == torch.bfloat16 else mapped


@pytest.fixture
def into_given_rows(monkeypatch):
    """Rows bound for a GPU are written into a buffer gather_rows is given (page-locked there,
    tests/gpu); here an ordinary one, so the CPU suite runs the same code."""
    from gnnbridge.core.records import features

    monkeypatch.setattr(features, "_empty_rows", lambda n, width, pinned: torch.empty(n, width) if pinned else None)


@pytest.mark.parametrize("pinned", [False, True], ids=["", "into-buffer"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gather_rows_equals_indexing_then_upcasting(dtype, tmp_path, pinned, request):
    if pinned:
        request.getfixturevalue("into_given_rows")
    table = (torch.randn(3000, 13, generator=torch.Generator().manual_seed(0)) * 100).to(dtype)
    table[5, 0], table[6, 1] = float("inf"), 1e-7  # beyond and below float16's normal range
    mapped = _mapped(table, tmp_path)
    assert file_backed(mapped) and not file_backed(table)
    many = torch.randint(0, 3000, (40_000,), generator=torch.Generator().manual_seed(1))  # the parallel loop
    for ids in (many, torch.tensor([7, 7, 2999, 0, 7]), torch.empty(0, dtype=torch.int64)):
        expected = table[ids].float()
        strided = table.t().contiguous().t()  # not contiguous: the torch path, not the kernel
        for source in (table, mapped, strided):
            got = gather_rows(source, ids, pinned)
            assert got.dtype == torch.float32 and got.shape == (ids.numel(), 13)
            assert torch.equal(got, expected)


@pytest.mark.parametrize("pinned", [False, True], ids=["", "into-buffer"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_cache_serves_the_highest_in_degree_rows_and_counts_its_hits(dtype, tmp_path, pinned, request):
    if pinned:
        request.getfixturevalue("into_given_rows")
    table = torch.arange(60, dtype=torch.float32).view(10, 6).to(dtype)
    mapped = _mapped(table, tmp_path)
    in_degree = torch.tensor([0, 5, 1, 5, 2, 9, 0, 5, 1, 0])  # three tie at 5: the lower ids win
    row_bytes = 6 * table.element_size() + 8
    try:
        cache = build_cache(mapped, in_degree, 3 * row_bytes + row_bytes // 2)  # room for three rows
        assert cache_of(mapped) is cache and cache.ids.tolist() == [1, 3, 5]
        assert cache.rows.dtype == dtype and torch.equal(cache.rows, table[[1, 3, 5]])
        ids = torch.tensor([5, 0, 1, 5, 7, 3, 9, 9])
        assert torch.equal(gather_rows(mapped, ids, pinned), table[ids].float())
        assert (cache.hits, cache.total) == (4, 8)  # 5, 1, 5, 3
        assert torch.equal(gather_rows(mapped, torch.tensor([2]), pinned), table[[2]].float())
        assert (cache.hits, cache.total) == (4, 9)
    finally:
        detach_cache(mapped)


def _readers() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("gnnbridge-read")]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_mapped_table_is_gathered_by_read_depth_threads_with_the_same_rows_and_hits(dtype, tmp_path):
    """On a cold page cache the faults in flight set the rate: a mapped table's rows are read by
    ``placement.read_depth`` threads, whatever the rank's compute threads are."""
    table = torch.randn(5000, 9, generator=torch.Generator().manual_seed(2)).to(dtype)
    mapped = _mapped(table, tmp_path)
    ids = torch.randint(0, 5000, (30_000,), generator=torch.Generator().manual_seed(3))
    cache = build_cache(mapped, torch.arange(5000) % 17, 200 * (9 * table.element_size() + 8))
    torch.set_num_threads(1)
    try:
        set_read_depth(6)
        assert torch.equal(gather_rows(mapped, ids), table[ids].float())
        cached = torch.isin(ids, cache.ids)
        assert cache.total == ids.numel() and cache.hits == int(cached.sum()) > 0
        assert len(_readers()) == 6
        assert torch.equal(gather_rows(table, ids), table[ids].float())  # a table in RAM: no reader threads
        set_read_depth(1)  # one thread: the old pool goes
        assert torch.equal(gather_rows(mapped, ids[:100]), table[ids[:100]].float())
    finally:
        set_read_depth(READ_DEPTH)
        detach_cache(mapped)
        torch.set_num_threads(NUM_THREADS)


def test_a_bad_read_depth_is_refused_in_one_line(refused):
    for value, needle in (("0", "1 to 256"), ("257", "1 to 256"), ("deep", "expected int"), ("1.5", "expected int")):
        seen = refused("config", "show", "--set", f"placement.read_depth={value}")
        lines = seen.stderr.strip().splitlines()
        assert seen.returncode != 0 and len(lines) == 1 and "Traceback" not in seen.stderr
        assert lines[0].startswith("Error: placement.read_depth=") and value in lines[0] and needle in lines[0]
    assert from_dict({"placement": {"read_depth": 64}}).placement.read_depth == 64


def test_a_bad_feature_cache_size_is_refused_in_one_line(refused):
    for value in ("lots", "-1", "2 parsecs", "true"):
        seen = refused("config", "show", "--set", f"placement.feature_cache={value}")
        lines = seen.stderr.strip().splitlines()
        assert seen.returncode != 0 and len(lines) == 1 and "Traceback" not in seen.stderr
        assert lines[0].startswith("Error: placement.feature_cache=") and "512MB, 2GB" in lines[0]
    for value in ("2GB", "512MB", 0, 1048576):
        assert from_dict({"placement": {"feature_cache": value}}).placement.feature_cache == value
    with pytest.raises(ConfigError, match="feature_cache=1.5 is not a size"):
        from_dict({"placement": {"feature_cache": 1.5}})


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["pyg", "dgl"])
def test_a_run_with_a_feature_cache_trains_the_same_and_reports_its_hit_rate(backend, tmp_path):
    common = ["train.epochs=1", "dataset.options.num_nodes=600", "sampler.kind=core"]
    plain = gnnbridge.run(
        "sage-synthetic", backend=backend, nproc=1, overrides=common, out=tmp_path / "a", progress=False
    )
    cached = gnnbridge.run(
        "sage-synthetic",
        backend=backend,
        nproc=1,
        overrides=[*common, "placement.feature_cache=1MB"],
        out=tmp_path / "b",
        progress=False,
    )
    assert cached["metrics"] == plain["metrics"]
    assert [h["loss"] for h in cached["history"]] == [h["loss"] for h in plain["history"]]
    rate = cached["history"][0]["feature_cache_hit_rate"]
    assert 0 <= rate <= 1 and 0 <= cached["feature_cache"]["hit_rate"] <= 1
    assert 0 < cached["feature_cache"]["bytes"] <= 1 << 20
    assert "feature_cache" not in plain and "feature_cache_hit_rate" not in plain["history"][0]


class HalfFeaturesPlugin:
    """The synthetic graph with its features stored as float16 or bfloat16."""

    @gnnbridge.hookimpl
    def register_datasets(self, register):
        from gnnbridge.plugins.datasets import synthetic_graph

        def half(dtype):
            def load(config, seed):
                data = synthetic_graph(600, 4, 8, 6.0, 0.9, 1.0, seed)
                data.x = data.x.to(dtype)
                data.validate()
                return data

            return load

        register("half-synthetic", half(torch.float16), "float16 features")
        register("bf16-synthetic", half(torch.bfloat16), "bfloat16 features")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["pyg", "dgl"])
def test_features_stored_in_16_bits_train_like_float32(backend, tmp_path):
    """Every gather upcasts them: sampled training, sampled validation, layer-wise evaluation."""
    from gnnbridge.testing import registered_plugin

    common = ["train.epochs=2", "sampler.kind=core"]
    runs = {}
    with registered_plugin(HalfFeaturesPlugin(), "half-features-test"):
        for name in ("half-synthetic", "bf16-synthetic"):
            runs[name] = gnnbridge.run(
                "sage-synthetic",
                backend=backend,
                nproc=1,
                dataset=name,
                overrides=common,
                out=tmp_path / name,
                progress=False,
            )
    for name, results in runs.items():
        assert results["metrics"]["test_acc"] > 0.5, (name, results["metrics"])  # 4 classes: chance is 0.25


def test_models_read_rows_in_place_unless_gathering_does_better(small_data, tmp_path):
    """A 16-bit, cached or too-large-to-cache (MADV_RANDOM) table is gathered (upcast, counted,
    its faults in flight together), never read in place; a mapped one the page cache holds is."""
    from gnnbridge.core.config import ModelSpec
    from gnnbridge.core.inference.evaluation import indexed_rows
    from gnnbridge.core.plugins import backends
    from gnnbridge.core.records.batches import IndexedRows
    from gnnbridge.testing.conformance import build

    cpu, ids = torch.device("cpu"), small_data.train_idx[:10]
    sage = build(backends.get("pyg"), ModelSpec(arch="sage", hidden=8, layers=2), small_data)
    assert isinstance(indexed_rows(sage, small_data.x, ids, cpu), IndexedRows)
    mapped = _mapped(small_data.x, tmp_path)
    assert isinstance(indexed_rows(sage, mapped, ids, cpu), IndexedRows)
    assert advise(mapped, "random") and indexed_rows(sage, mapped, ids, cpu) is None
    assert advise(mapped, "normal") and isinstance(indexed_rows(sage, mapped, ids, cpu), IndexedRows)
    assert indexed_rows(sage, small_data.x.bfloat16(), ids, cpu) is None
    table = small_data.x.clone()
    build_cache(table, small_data.indptr.diff(), 1 << 20)
    try:
        assert indexed_rows(sage, table, ids, cpu) is None
        assert torch.equal(IndexedRows(table, ids).rows(), small_data.x[ids]) and cache_of(table).hits == ids.numel()
    finally:
        detach_cache(table)


def test_an_id_outside_a_mapped_table_is_an_index_error_not_a_stray_read(tmp_path):
    mapped = _mapped(torch.ones(5, 2), tmp_path)
    for ids in (torch.tensor([0, 5]), torch.tensor([-1])):
        with pytest.raises(IndexError):
            gather_rows(mapped, ids)


def _two_ranks_with_a_cache(dataset: dict, size: str, out, file_limit=None) -> list[dict]:
    """A real 2-rank gloo run (one machine) of the dataset with ``placement.feature_cache=size``;
    what each rank saw of its caches (:func:`gnnbridge.testing.workers.cached_training`)."""
    from gnnbridge.core.app.preflight import load_dataset
    from gnnbridge.testing.workers import cached_training, launch_ranks

    config = from_dict(
        {
            "backend": "pyg",
            "nproc": 2,
            "dataset": dataset,
            "model": {"hidden": 8},
            "sampler": {"kind": "core", "fanouts": [5, 5]},
            "train": {"epochs": 1, "batch_size": 64},
            "placement": {"feature_cache": size},
        }
    )
    data = load_dataset(config).share_memory_()
    out.mkdir()
    launch_ranks(cached_training, 2, (config, data, str(out), file_limit), timeout_s=240)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.slow
@pytest.mark.parametrize(
    "dataset",
    [
        {"name": "synthetic", "options": {"num_nodes": 600}},
        {"name": "mag-synthetic", "options": {"num_papers": 600, "num_authors": 300}},
    ],
    ids=["homogeneous", "heterogeneous"],
)
def test_the_ranks_of_a_machine_share_one_feature_cache_in_shared_memory(dataset, tmp_path):
    """Both ranks' caches are the same pages: one file of the shared-memory folder (same inode),
    unlinked once both mapped it, so nothing is left there; the rows are the table's, a gather
    serves them right, and the run's hit rate counts every rank's hits."""
    from gnnbridge.core.runtime.sharing import shm_dir

    before = set(shm_dir().glob("gnnbridge-*"))
    ranks = _two_ranks_with_a_cache(dataset, "8KB", tmp_path / "out")
    assert set(shm_dir().glob("gnnbridge-*")) == before  # the cache's files were unlinked
    assert ranks[0]["caches"] and ranks[0]["caches"].keys() == ranks[1]["caches"].keys()
    for name, cache in ranks[0]["caches"].items():
        other = ranks[1]["caches"][name]
        for key in ("rows_map", "ids_map"):
            path, inode = cache[key].split(maxsplit=5)[5], cache[key].split()[4]
            assert path.startswith(f"{shm_dir()}/gnnbridge-") and path.endswith(" (deleted)"), cache[key]
            assert other[key].split()[3:] == cache[key].split()[3:], (cache[key], other[key])  # device, inode, file
            assert inode != "0"
        for seen in (cache, other):
            assert seen["holds_table_rows"] and seen["gathers_table"] and seen["hits"] == seen["rows"] > 0
    for rank in ranks:
        assert 0 < rank["epoch_hit_rates"][0] < 1 and rank["summary"]["feature_cache"]["hit_rate"] > 0
    assert ranks[0]["epoch_hit_rates"] == ranks[1]["epoch_hit_rates"]  # all-reduced over both ranks


@pytest.mark.slow
def test_a_shared_memory_folder_too_small_for_the_feature_cache_is_one_line(tmp_path, capfd):
    """The kernel refuses the cache's file (each rank may write files of at most 1000 bytes, as
    a nearly full /dev/shm refuses them): the run ends with one line saying where, how much and
    the fixes, and leaves nothing in the shared-memory folder."""
    from gnnbridge.core.errors import RankFailedError
    from gnnbridge.core.runtime.sharing import shm_dir

    before = set(shm_dir().glob("gnnbridge-*"))
    with pytest.raises(RankFailedError) as err:
        _two_ranks_with_a_cache(
            {"name": "synthetic", "options": {"num_nodes": 600}}, "8KB", tmp_path / "out", file_limit=1000
        )
    assert re.fullmatch(
        rf"rank 0 failed: Not enough room in {re.escape(str(shm_dir()))} to share the feature cache "
        r"between this node's "
        r"ranks \(\d+\.\d KB more needed\); enlarge it \(docker --shm-size\), point GNNBRIDGE_SHM_DIR at a larger "
        r"RAM-backed folder, or lower placement\.feature_cache\.",
        str(err.value),
    ), str(err.value)
    assert set(shm_dir().glob("gnnbridge-*")) == before
    assert "Traceback" not in capfd.readouterr().err


def test_a_feature_store_of_its_own_keeps_its_caches_and_readers_to_itself(tmp_path):
    """What gathering knows of a table (its cache, its read depth) belongs to the store that was
    told it: a second store's cache serves and counts its own gathers, the process's store (behind
    gather_rows) neither sees it nor counts; both give the table's rows."""
    from gnnbridge.core.records.features import STORE, FeatureCache, FeatureStore

    table = _mapped(torch.randn(500, 6, generator=torch.Generator().manual_seed(0)), tmp_path)
    mine = FeatureStore(read_depth=2)
    cache = FeatureCache(torch.tensor([3, 7]), table[[3, 7]].clone())
    mine.attach_cache(table, cache)
    ids = torch.tensor([7, 1, 3, 3, 499] * 40)
    assert torch.equal(mine.gather(table, ids), table[ids]) and cache.hits == 120 and cache.total == 200
    assert cache_of(table) is None and torch.equal(gather_rows(table, ids), table[ids]) and cache.total == 200
    assert mine.depth == 2 and mine._pool is not None and mine._pool is not STORE._pool and mine.file_backed(table)
    mine.detach_cache(table)
    assert mine.cache_of(table) is None
