"""Gathering feature rows: mapped and 16-bit tables, the feature cache, and a run that uses it."""
import threading
import warnings

import numpy as np
import pytest
import torch

import gnnbridge
from gnnbridge.core.contracts.config import from_dict
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.records.features import (
    READ_DEPTH,
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


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gather_rows_equals_indexing_then_upcasting(dtype, tmp_path):
    table = (torch.randn(3000, 13, generator=torch.Generator().manual_seed(0)) * 100).to(dtype)
    table[5, 0], table[6, 1] = float("inf"), 1e-7  # beyond and below float16's normal range
    mapped = _mapped(table, tmp_path)
    assert file_backed(mapped) and not file_backed(table)
    many = torch.randint(0, 3000, (40_000,), generator=torch.Generator().manual_seed(1))  # the parallel loop
    for ids in (many, torch.tensor([7, 7, 2999, 0, 7]), torch.empty(0, dtype=torch.int64)):
        expected = table[ids].float()
        for source in (table, mapped):
            got = gather_rows(source, ids)
            assert got.dtype == torch.float32 and got.shape == (ids.numel(), 13)
            assert torch.equal(got, expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_cache_serves_the_highest_in_degree_rows_and_counts_its_hits(dtype, tmp_path):
    table = torch.arange(60, dtype=torch.float32).view(10, 6).to(dtype)
    mapped = _mapped(table, tmp_path)
    in_degree = torch.tensor([0, 5, 1, 5, 2, 9, 0, 5, 1, 0])  # three tie at 5: the lower ids win
    row_bytes = 6 * table.element_size() + 8
    try:
        cache = build_cache(mapped, in_degree, 3 * row_bytes + row_bytes // 2)  # room for three rows
        assert cache_of(mapped) is cache and cache.ids.tolist() == [1, 3, 5]
        assert cache.rows.dtype == dtype and torch.equal(cache.rows, table[[1, 3, 5]])
        ids = torch.tensor([5, 0, 1, 5, 7, 3, 9, 9])
        assert torch.equal(gather_rows(mapped, ids), table[ids].float())
        assert (cache.hits, cache.total) == (4, 8)  # 5, 1, 5, 3
        assert torch.equal(gather_rows(mapped, torch.tensor([2])), table[[2]].float())
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
    plain = gnnbridge.run("sage-synthetic", backend=backend, nproc=1, overrides=common, out=tmp_path / "a",
                          progress=False)
    cached = gnnbridge.run("sage-synthetic", backend=backend, nproc=1,
                           overrides=[*common, "placement.feature_cache=1MB"], out=tmp_path / "b", progress=False)
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
            runs[name] = gnnbridge.run("sage-synthetic", backend=backend, nproc=1, dataset=name, overrides=common,
                                       out=tmp_path / name, progress=False)
    for name, results in runs.items():
        assert results["metrics"]["test_acc"] > 0.5, (name, results["metrics"])  # 4 classes: chance is 0.25


def test_models_read_rows_in_place_only_from_a_plain_table_in_ram(small_data, tmp_path):
    """A mapped, 16-bit or cached table is gathered (upcast, counted), never read in place."""
    from gnnbridge.core.contracts.config import ModelSpec
    from gnnbridge.core.contracts.plugins import backends
    from gnnbridge.core.records.batches import IndexedRows
    from gnnbridge.core.training.evaluation import indexed_rows
    from gnnbridge.testing.conformance import build

    cpu, ids = torch.device("cpu"), small_data.train_idx[:10]
    sage = build(backends.get("pyg"), ModelSpec(arch="sage", hidden=8, layers=2), small_data)
    assert isinstance(indexed_rows(sage, small_data.x, ids, cpu), IndexedRows)
    mapped = _mapped(small_data.x, tmp_path)
    assert indexed_rows(sage, mapped, ids, cpu) is None
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
