"""Placement switches: the prefetching thread, precision, and moving the record."""

import threading

import pytest
import torch

import gnnbridge
from gnnbridge.core.config import PlacementConfig, from_dict
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.inference.placement import place, prefetched


def test_prefetch_yields_every_item_in_order_from_another_thread():
    seen_in = []

    def make():
        seen_in.append(threading.current_thread().name)
        return iter(range(50))

    assert list(prefetched(make, 3)) == list(range(50))
    assert seen_in == ["gnnbridge-prefetch"]  # the sampler (and its reseed) ran in the producer thread
    assert list(prefetched(lambda: iter(range(5)), 0)) == list(range(5))


def test_prefetch_raises_the_samplers_error_at_the_batch_it_failed():
    def make():
        yield 1
        raise ValueError("seed 7 is out of range")

    got = []
    with pytest.raises(ValueError, match="seed 7"):
        for item in prefetched(make, 2):
            got.append(item)
    assert got == [1]


def test_a_consumer_that_stops_early_stops_the_producer():
    produced = []

    def make():
        for i in range(10_000):
            produced.append(i)
            yield i

    for item in prefetched(make, 2):
        if item == 3:
            break
    assert len(produced) < 10  # bounded by the queue, not run to the end
    assert not any(t.name == "gnnbridge-prefetch" and t.is_alive() for t in threading.enumerate())


def test_device_placement_moves_a_copy_and_leaves_the_shared_record(small_data):
    placed = place(small_data, PlacementConfig(features="device", topology="device"), torch.device("meta"))
    assert placed.x.device.type == "meta" and placed.indices.device.type == "meta"
    assert small_data.x.device.type == "cpu" and small_data.indices.device.type == "cpu"
    assert place(small_data, PlacementConfig(features="device"), torch.device("cpu")) is small_data


def test_fp16_on_the_cpu_is_one_clear_error():
    with pytest.raises(ConfigError, match="fp16 needs --device cuda.*bf16"):
        from_dict({"placement": {"precision": "fp16"}})
    with pytest.raises(ConfigError, match="placement.prefetch=-1"):
        from_dict({"placement": {"prefetch": -1}})


@pytest.mark.slow
def test_prefetch_gives_the_same_training_and_bf16_the_same_accuracy(tmp_path):
    common = ["train.epochs=4"]
    base = gnnbridge.run("sage-synthetic", backend="pyg", nproc=1, overrides=common, out=tmp_path / "a", progress=False)
    ahead = gnnbridge.run(
        "sage-synthetic",
        backend="pyg",
        nproc=1,
        overrides=[*common, "placement.prefetch=2"],
        out=tmp_path / "b",
        progress=False,
    )
    assert [h["loss"] for h in ahead["history"]] == [h["loss"] for h in base["history"]]  # core sampler: same batches
    for backend in ("pyg", "dgl"):
        fp32 = (
            base
            if backend == "pyg"
            else gnnbridge.run(
                "sage-synthetic", backend=backend, nproc=1, overrides=common, out=tmp_path / "c", progress=False
            )
        )
        bf16 = gnnbridge.run(
            "sage-synthetic",
            backend=backend,
            nproc=1,
            overrides=[*common, "placement.precision=bf16"],
            out=tmp_path / f"{backend}-bf16",
            progress=False,
        )
        assert [h["loss"] for h in bf16["history"]] != [h["loss"] for h in fp32["history"]]  # it ran in bf16
        assert abs(bf16["metrics"]["test_acc"] - fp32["metrics"]["test_acc"]) <= 0.02


def test_sampled_rows_stay_in_the_table_for_models_that_read_them_there(small_data, tmp_path):
    """GraphSAGE (mean) reads x[input_nodes] from the shared table by global id, also under DDP;
    models that need the rows, rows bound for another device and typed batches are gathered."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from gnnbridge.core.config import ModelSpec
    from gnnbridge.core.inference.evaluation import indexed_rows
    from gnnbridge.core.plugins import backends
    from gnnbridge.core.records.batches import IndexedRows
    from gnnbridge.testing.conformance import build

    cpu, ids = torch.device("cpu"), small_data.train_idx[:10]
    for name in ("pyg", "dgl"):
        sage = build(backends.get(name), ModelSpec(arch="sage", hidden=8, layers=2), small_data)
        gcn = build(backends.get(name), ModelSpec(arch="gcn", hidden=8, layers=2), small_data)
        rows = indexed_rows(sage, small_data.x, ids, cpu)
        assert isinstance(rows, IndexedRows) and rows.table is small_data.x
        assert torch.equal(rows.rows(), small_data.x[ids]) and torch.equal(rows.head(3).rows(), small_data.x[ids[:3]])
        assert indexed_rows(gcn, small_data.x, ids, cpu) is None
        assert indexed_rows(sage, small_data.x, ids, torch.device("meta")) is None  # must cross to the device
        assert indexed_rows(sage, {"user": small_data.x}, {"user": ids}, cpu) is None
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert isinstance(indexed_rows(DistributedDataParallel(sage), small_data.x, ids, cpu), IndexedRows)
    finally:
        dist.destroy_process_group()
