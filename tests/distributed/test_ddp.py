"""Real 2-rank DDP runs (gloo, CPU): what must hold after training on every backend."""

import pytest
import torch

from gnnbridge.core.config import from_dict
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.sampling.seeds import epoch_batches
from gnnbridge.plugins.datasets import synthetic_graph
from gnnbridge.testing.workers import launch_ranks, train_and_dump

pytestmark = pytest.mark.slow
TIMING = {"epoch_time_s", "eval_time_s", "phases"}  # per rank; phases_slowest_rank is all-reduced


def config(backend, arch="sage", **train):
    return from_dict(
        {
            "backend": backend,
            "nproc": 2,
            "model": {"hidden": 16, "arch": arch, "heads": 2},
            "sampler": {"fanouts": [5, 5]},
            "train": {"epochs": 2, "batch_size": 64, **train},
            "eval": {"batch_size": 512},
        }
    )


def run_two_ranks(cfg, data, tmp_path):
    data.share_memory_()
    launch_ranks(train_and_dump, 2, (cfg, data, str(tmp_path)), timeout_s=120)
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]


def without_timing(history):
    return [{k: v for k, v in h.items() if k not in TIMING} for h in history]


@pytest.mark.parametrize("backend, arch", [("pyg", "sage"), ("dgl", "sage"), ("dgl", "gcn")])
def test_ranks_end_identical_with_identical_reduced_metrics(backend, arch, tmp_path):
    data = synthetic_graph(600, 4, 8, 6.0, 0.8, 0.5, seed=0)
    r0, r1 = run_two_ranks(config(backend, arch), data, tmp_path)
    assert torch.equal(r0["params"], r1["params"])
    assert r0["metrics"] == r1["metrics"]
    # Loss and accuracy are all-reduced counts: both ranks report the same history.
    assert without_timing(r0["history"]) == without_timing(r1["history"])


def test_per_rank_shards_are_disjoint_cover_and_reshuffle():
    seeds = synthetic_graph(600, 4, 8, 6.0, 0.8, 0.5, seed=0).train_idx
    for epoch in range(2):
        shards = [torch.cat(epoch_batches(seeds, 64, 0, epoch, r, 2)) for r in range(2)]
        assert not set(shards[0].tolist()) & set(shards[1].tolist())
        assert torch.equal(torch.cat(shards).sort().values, seeds.sort().values)
    assert not torch.equal(
        torch.cat(epoch_batches(seeds, 64, 0, 0, 0, 2)), torch.cat(epoch_batches(seeds, 64, 0, 1, 0, 2))
    )


def test_uneven_seed_count_does_not_hang(tmp_path):
    base = synthetic_graph(6000, 4, 8, 4.0, 0.8, 0.5, seed=0)
    perm = torch.randperm(6000, generator=torch.Generator().manual_seed(0))
    data = GraphData(
        base.indptr, base.indices, base.x, base.y, perm[:4097], perm[4097:5000], perm[5000:], base.num_classes
    )
    r0, r1 = run_two_ranks(config("pyg", epochs=1, batch_size=1024), data, tmp_path)
    assert r0["history"][0]["batches"] == r1["history"][0]["batches"] == 3


def test_empty_batches_on_one_rank_keep_the_loss_finite(tmp_path):
    # 5 training seeds, batch 1, 2 ranks: rank 1 gets one empty batch and must still step.
    base = synthetic_graph(60, 2, 4, 4.0, 0.9, 1.0, seed=0)
    data = GraphData(
        base.indptr,
        base.indices,
        base.x,
        base.y,
        torch.arange(5),
        torch.arange(5, 30),
        torch.arange(30, 60),
        base.num_classes,
    )
    r0, r1 = run_two_ranks(config("dgl", epochs=1, batch_size=1), data, tmp_path)
    assert torch.isfinite(torch.tensor(r0["history"][0]["loss"]))
    assert torch.equal(r0["params"], r1["params"])


def test_layerwise_inference_on_two_ranks_gives_one_ranks_logits(tmp_path):
    """Each rank writes its shard of a layer into one padded buffer and the all-gather joins the
    shards without copies: the logits, and rows gathered in any layout, are what one rank gets."""
    from gnnbridge.core.config import ModelSpec
    from gnnbridge.core.inference.evaluation import LayerwiseEvaluator
    from gnnbridge.core.plugins import backends
    from gnnbridge.core.runtime.context import DistContext
    from gnnbridge.testing.conformance import build, small_graph
    from gnnbridge.testing.workers import gather_rows_and_dump

    data = small_graph()
    data.share_memory_()
    launch_ranks(gather_rows_and_dump, 2, (data, str(tmp_path)), timeout_s=120)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    alone = DistContext(0, 1, 0, torch.device("cpu"))
    for got in ranks:
        assert got["even"][:, 0].tolist() == list(range(7))
        assert got["uneven"][:, 0].tolist() == [0.0, 1.0, 1.0, 1.0]
        for name in ("pyg", "dgl"):
            torch.manual_seed(0)
            model = build(backends.get(name), ModelSpec(arch="sage", hidden=8, layers=2, dropout=0.0), data).eval()
            expected = LayerwiseEvaluator(backends.get(name), data, alone, batch_size=64).full_logits(model)
            torch.testing.assert_close(got[name], expected)


def test_layerwise_inference_with_layers_on_disk_on_two_ranks_equals_one_rank_in_memory(tmp_path, monkeypatch):
    """eval.layer_store=disk: each rank writes its rows into one shared file per layer (no
    all-gather); every rank ends with one rank's in-memory logits, and no layer file is left."""
    from gnnbridge.core.config import ModelSpec
    from gnnbridge.core.inference.evaluation import LayerwiseEvaluator
    from gnnbridge.core.plugins import backends
    from gnnbridge.core.runtime.context import DistContext
    from gnnbridge.testing.conformance import build, small_graph
    from gnnbridge.testing.workers import layers_on_disk_and_dump

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # the ranks' $TMPDIR
    data = small_graph()
    data.share_memory_()
    launch_ranks(layers_on_disk_and_dump, 2, (data, str(tmp_path)), timeout_s=120)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    alone = DistContext(0, 1, 0, torch.device("cpu"))
    for name in ("pyg", "dgl"):
        torch.manual_seed(0)
        model = build(backends.get(name), ModelSpec(arch="sage", hidden=8, layers=3, dropout=0.0), data).eval()
        evaluator = LayerwiseEvaluator(backends.get(name), data, alone, batch_size=64, layer_store="memory")
        expected = evaluator.full_logits(model)
        for got in ranks:
            torch.testing.assert_close(got[name], expected)
    for got in ranks:  # the logits came from one file in the ranks' $TMPDIR, deleted at the end
        assert got["maps"] and all(
            m.startswith(f"{scratch}/gnnbridge-layers-") and m.endswith("(deleted)") for m in got["maps"]
        ), got["maps"]
    assert not list(scratch.glob("gnnbridge-layers-*"))


@pytest.mark.slow
def test_typed_layer_wise_states_are_the_same_bits_on_one_two_and_three_ranks(tmp_path):
    """Each rank computes whole batches on the same boundaries whatever the world size, so every
    node type's final states (and so every tie between scores) do not depend on it."""
    from gnnbridge.core.tasks import for_link_task
    from gnnbridge.plugins.hetero_datasets import rec_graph
    from gnnbridge.testing.workers import typed_states_and_dump

    source = rec_graph(60, 33, 4, 4, num_features=6, taste_dim=3, feature_noise=0.5, temperature=0.5, seed=1)
    data = for_link_task(source, "", True, seed=0, val_fraction=0.1, test_fraction=0.1, eval_negatives=5)
    runs = {}
    for ranks, store in ((1, "memory"), (2, "disk"), (3, "memory")):
        out = tmp_path / f"{ranks}.pt"
        launch_ranks(typed_states_and_dump, ranks, (data, store, str(out)), timeout_s=300)
        runs[ranks] = torch.load(out)
    for name in ("pyg", "dgl"):
        for ranks in (2, 3):
            for t, h in runs[1][name].items():
                assert torch.equal(runs[ranks][name][t], h), (name, ranks, t)


def test_sparse_table_gradients_are_the_mean_over_ranks_on_every_rank(tmp_path):
    """What DDP does for a dense parameter, done for the tables it is told to leave alone
    (model.embeddings=sparse): each rank ends with the mean of the ranks' gradients, a rank
    whose batch missed a table included, and a table no rank touched has none."""
    from gnnbridge.testing.workers import sparse_grads_and_dump, sparse_tables_loss

    launch_ranks(sparse_grads_and_dump, 2, (str(tmp_path),), timeout_s=120)
    expected = {}
    for rank in range(2):
        torch.manual_seed(0)
        tables = {n: torch.nn.Embedding(k, 3) for n, k in (("users", 20), ("items", 10), ("tags", 5))}
        sparse_tables_loss(tables, rank).backward()
        for name in ("users", "items"):
            grad = tables[name].weight.grad
            expected[name] = expected.get(name, 0) + (0 if grad is None else grad / 2)
    for rank in range(2):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        assert got["tags"] is None
        for name in ("users", "items"):
            torch.testing.assert_close(got[name], expected[name], msg=f"rank {rank}, {name}")


@pytest.mark.parametrize("ranks", [2, 3])
def test_tables_shared_by_a_machines_ranks_take_the_steps_of_a_copy_per_rank(tmp_path, ranks):
    """placement.tables=machine: the ranks of a machine map one copy of the tables and their
    Adam moments, each rank updating the rows it owns; that trains to what a copy per rank
    trains to (3 ranks: rows owned unevenly, the mean divides by 3), through rows repeated
    within and across ranks, a rank that misses a table and batches that outgrow the mailboxes."""
    from gnnbridge.testing.workers import table_steps_and_dump

    got = {}
    for copies in ("machine", "rank"):
        (tmp_path / copies).mkdir()
        launch_ranks(table_steps_and_dump, ranks, (copies, str(tmp_path / copies)), timeout_s=180)
        got[copies] = [torch.load(tmp_path / copies / f"rank{r}.pt") for r in range(ranks)]
    assert all(d["applies"] for d in got["machine"])
    for name in ("users", "goods"):
        files = {d[f"{name}.file"] for d in got["machine"]}
        assert len(files) == 1 and None not in files, files  # one copy, mapped by every rank
        assert {d[f"{name}.file"] for d in got["rank"]} == {None}
        for rank in range(ranks):
            for shared, own in zip(got["machine"][rank][name], got["rank"][rank][name], strict=True):
                assert torch.equal(shared, own), (name, rank)
