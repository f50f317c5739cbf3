"""Graph classification under real 2-rank DDP (gloo, CPU)."""

import json
import math

import pytest
import torch

from gnnbridge.core.app.train import run
from gnnbridge.core.config import from_dict
from gnnbridge.core.records.collection import GraphCollection, pack
from gnnbridge.plugins.datasets import family_graphs
from gnnbridge.testing.workers import graph_batches_and_metrics, launch_ranks, train_and_dump

pytestmark = pytest.mark.slow


def binary_collection():
    """Two structural families; 101 training graphs (odd), odd val and test splits."""
    full = family_graphs(190, 6, 14, seed=3)
    keep = (full.y < 2).nonzero().view(-1)[:125]
    packed = pack(full, keep)  # the kept graphs, renumbered from 0
    node_ptr = torch.cat([torch.zeros(1, dtype=torch.int64), packed.num_nodes.cumsum(0)])
    x = torch.randn(packed.node.numel(), 3, generator=torch.Generator().manual_seed(1))
    perm = torch.randperm(125, generator=torch.Generator().manual_seed(0))
    return GraphCollection.from_edges(
        x, packed.edge_index, node_ptr, full.y[keep], splits=(perm[:101], perm[101:114], perm[114:])
    )


def run_ranks(nproc, backend, kind, data, out):
    out.mkdir()
    launch_ranks(graph_batches_and_metrics, nproc, (backend, kind, data, 8, str(out)), timeout_s=120)
    return [torch.load(out / f"rank{r}.pt") for r in range(nproc)]


@pytest.mark.parametrize("backend, kind", [("pyg", "native"), ("pyg", "core"), ("dgl", "native"), ("dgl", "core")])
def test_ranks_get_disjoint_equal_count_batches_and_exact_metrics(backend, kind, tmp_path):
    data = binary_collection().share_memory_()
    ranks = run_ranks(2, backend, kind, data, tmp_path / "two")
    for epoch in range(2):
        per_rank = [ranks[r]["epochs"][epoch] for r in range(2)]
        assert len(per_rank[0]) == len(per_rank[1]) == 7  # 101 graphs, batch 8, 2 ranks
        seen = [torch.cat([seeds for seeds, _ in batches]) for batches in per_rank]
        assert not set(seen[0].tolist()) & set(seen[1].tolist())
        assert torch.equal(torch.cat(seen).sort().values, data.train_idx.sort().values)
        for seeds, nodes in per_rank[0]:  # each batch brings exactly its graphs' nodes
            assert torch.equal(data.graph_of(nodes).unique(), seeds.unique())
    assert not torch.equal(ranks[0]["epochs"][0][0][0], ranks[0]["epochs"][1][0][0])  # reshuffled
    # Every val/test graph scored once, with rank 0's BatchNorm statistics on both ranks:
    # the same numbers as one process scoring everything with rank 0's model.
    (single,) = [r["metrics"] for r in run_ranks(1, backend, kind, data, tmp_path / "one")]
    assert ranks[0]["metrics"] == ranks[1]["metrics"] == single
    assert 0.0 <= single["test_roc_auc"] <= 1.0


@pytest.mark.parametrize("backend", ["pyg", "dgl"])
def test_an_empty_batch_on_one_rank_still_steps_with_the_others(backend, tmp_path):
    # 3 training graphs, batch 1, 2 ranks: rank 1 runs one real and one empty batch.
    full = binary_collection()
    data = GraphCollection.from_edges(
        full.x,
        full.edge_index,
        full.node_ptr,
        full.y,
        splits=(torch.arange(3), torch.arange(3, 60), torch.arange(60, 125)),
    )
    config = from_dict(
        {
            "task": "graph",
            "backend": backend,
            "nproc": 2,
            "model": {"arch": "gin", "hidden": 8, "layers": 2},
            "train": {"epochs": 2, "batch_size": 1},
            "eval": {"batch_size": 16},
        }
    )
    launch_ranks(train_and_dump, 2, (config, data.share_memory_(), str(tmp_path)), timeout_s=120)
    r0, r1 = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    assert [h["batches"] for h in r0["history"]] == [2, 2]
    assert torch.equal(r0["params"], r1["params"]) and r0["metrics"] == r1["metrics"]
    assert all(math.isfinite(h["loss"]) for h in r0["history"])


def test_both_backends_learn_gin_synthetic_and_agree(tmp_path):
    accuracy = {}
    for backend in ("pyg", "dgl"):
        results = run(
            "gin-synthetic",
            backend=backend,
            nproc=2,
            out=tmp_path / backend,
            progress=False,
            overrides=["dataset.options.num_graphs=300", "train.epochs=8"],
        )
        accuracy[backend] = results["metrics"]["test_acc"]
        saved = json.loads((tmp_path / backend / "results.json").read_text())
        assert saved["task"] == "graph" and saved["dataset"]["num_graphs"] == 300
        assert saved["history"][0]["batches"] == 4  # 240 training graphs, batch 32, 2 ranks
    assert min(accuracy.values()) > 0.7, accuracy  # chance is 1/3: structure is being read
    assert abs(accuracy["pyg"] - accuracy["dgl"]) <= 0.05, accuracy
