"""Real 2-rank DDP runs (gloo, CPU): what must hold after training on every backend."""
import pytest
import torch

from gnnbridge.core.config import from_dict
from gnnbridge.core.data import GraphData
from gnnbridge.core.distributed import launch
from gnnbridge.plugins.datasets import synthetic_graph
from gnnbridge.testing.workers import train_and_dump

pytestmark = pytest.mark.slow


def config(backend, **train):
    return from_dict({"backend": backend, "nproc": 2, "model": {"hidden": 16},
                      "sampler": {"fanouts": [5, 5]}, "train": {"epochs": 2, "batch_size": 64, **train},
                      "eval": {"batch_size": 512}})


def run_two_ranks(cfg, data, tmp_path):
    data.share_memory_()
    launch(train_and_dump, 2, "cpu", (cfg, data, str(tmp_path)), timeout_s=120)
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]


@pytest.mark.parametrize("backend", ["pyg", "dgl"])
def test_ranks_end_identical_and_shards_partition_the_training_set(backend, tmp_path):
    data = synthetic_graph(600, 4, 8, 6.0, 0.8, 0.5, seed=0)
    r0, r1 = run_two_ranks(config(backend), data, tmp_path)
    assert torch.equal(r0["params"], r1["params"])
    assert r0["metrics"] == r1["metrics"]
    for s0, s1 in zip(r0["seeds"], r1["seeds"]):
        assert not set(s0.tolist()) & set(s1.tolist())
        assert torch.equal(torch.cat([s0, s1]).sort().values, data.train_idx.sort().values)
    assert not torch.equal(r0["seeds"][0], r0["seeds"][1])  # reshuffled per epoch


def test_uneven_seed_count_does_not_hang(tmp_path):
    base = synthetic_graph(6000, 4, 8, 4.0, 0.8, 0.5, seed=0)
    perm = torch.randperm(6000, generator=torch.Generator().manual_seed(0))
    data = GraphData(base.edge_index, base.indptr, base.x, base.y, perm[:4097], perm[4097:5000],
                     perm[5000:], base.num_classes)
    r0, r1 = run_two_ranks(config("pyg", epochs=1, batch_size=1024), data, tmp_path)
    assert r0["batches"] == r1["batches"] == [3]
    assert r0["seeds"][0].numel() + r1["seeds"][0].numel() == 4097
