"""What only a GPU can show: the core sampler's CUDA path, the whole step placed on the device
under nccl, and bf16/fp16 autocast there.

CI has no GPU, so these skip there; they run on a lent GPU machine with
``python -m pytest tests/gpu`` (what ``benchmarks/gpu_reddit.py``'s measurement is run beside).
The CPU tests already pin the torch sampler path that CUDA runs to the compiled kernel's batches;
here the same comparison runs with the tensors on the GPU, where sort, scatter and the random
draws are CUDA kernels.
"""

import math

import pytest
import torch

import gnnbridge
from gnnbridge.core.sampling.neighbors import NeighborSampler
from gnnbridge.core.sampling.seeds import epoch_generator

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
CUDA = torch.device("cuda", 0)


def sample(indptr, indices, seeds, device, key):
    out = NeighborSampler(indptr.to(device), indices.to(device), [5, 3]).sample(seeds, epoch_generator(key, 0))
    return {name: getattr(out, name).cpu() for name in ("node", "row", "col", "edge")}, out.num_sampled_nodes


@pytest.mark.parametrize("relabel", ["dense-map", "sort"])
def test_the_core_sampler_on_cuda_draws_the_cpu_kernels_batches(small_data, monkeypatch, relabel):
    if relabel == "sort":  # the path graphs over DENSE_MAP_MAX_NODES take
        monkeypatch.setattr(NeighborSampler, "DENSE_MAP_MAX_NODES", 0)
    for key in range(3):
        seeds = small_data.train_idx[key * 16 : key * 16 + 48]
        on_cpu = sample(small_data.indptr, small_data.indices, seeds, torch.device("cpu"), key)
        on_gpu = sample(small_data.indptr, small_data.indices, seeds, CUDA, key)
        assert on_gpu[1] == on_cpu[1]
        for name, tensor in on_cpu[0].items():
            assert torch.equal(on_gpu[0][name], tensor), name


def train(tmp_path, name, device, placement):
    overrides = ["train.epochs=4", *placement]
    return gnnbridge.run(
        "sage-synthetic",
        backend="pyg",
        nproc=1,
        device=device,
        overrides=overrides,
        out=tmp_path / name,
        progress=False,
    )


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_the_whole_step_on_the_gpu_trains_as_on_the_cpu(tmp_path, precision):
    """One rank under nccl with features and topology on the GPU and autocast: the accuracy of
    the fp32 CPU run (different kernels and precision, so not the same numbers)."""
    cpu = train(tmp_path, "cpu", "cpu", [])
    placement = ["placement.features=device", "placement.topology=device", f"placement.precision={precision}"]
    gpu = train(tmp_path, precision, "cuda", placement)
    rank = gpu["ranks"][0]
    assert rank["device"] == "cuda:0" and rank["peak_cuda_bytes"] > 0
    assert all(math.isfinite(h["loss"]) for h in gpu["history"])
    assert abs(gpu["metrics"]["test_acc"] - cpu["metrics"]["test_acc"]) <= 0.03


@pytest.mark.parametrize("kind", ["float32", "bfloat16", "cached"])
def test_rows_bound_for_the_gpu_are_gathered_into_page_locked_memory(kind):
    from gnnbridge.core.records.features import FeatureCache, attach_cache, gather_rows

    table = torch.randn(5000, 24).to(getattr(torch, "bfloat16" if kind == "bfloat16" else "float32"))
    if kind == "cached":
        hot = torch.arange(0, 5000, 7)
        attach_cache(table, FeatureCache(hot, table[hot].clone()))
    ids = torch.randint(0, 5000, (3000,))
    rows = gather_rows(table, ids, pinned=True)
    assert rows.is_pinned() and rows.dtype == torch.float32
    assert torch.equal(rows, table[ids].float())
    assert torch.equal(rows.to(CUDA, non_blocking=True).cpu(), table[ids].float())
    assert not gather_rows(table, ids).is_pinned()
