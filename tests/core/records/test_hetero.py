"""Heterogeneous records, the typed sampler and link batches, checked for what would silently
ruin a link-prediction result: a held-out edge visible to message passing, a training edge in
its own neighbourhood, a negative that is the positive, ranks sharing or missing edges, and
backends that see different batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnbridge.core.config import LinkConfig, ModelSpec, Task, from_dict
from gnnbridge.core.errors import ConfigError, DataError
from gnnbridge.core.inference.evaluation import gather_inputs
from gnnbridge.core.inference.metrics import LinkScores
from gnnbridge.core.models.build import build_model, model_dims
from gnnbridge.core.models.neutral import from_neutral, to_neutral
from gnnbridge.core.plugins import get_backend
from gnnbridge.core.records.hetero import HeteroGraphData, HeteroSource
from gnnbridge.core.sampling.build import make_hetero_sampler
from gnnbridge.core.sampling.hetero import HeteroNeighborSampler, LinkBatcher, typed_fanouts
from gnnbridge.core.sampling.seeds import epoch_batches
from gnnbridge.core.tasks import for_link_task, for_node_task, homogeneous_source
from gnnbridge.plugins.hetero_datasets import rec_graph
from gnnbridge.testing.conformance import small_graph

TARGET = ("user", "buys", "item")
REVERSE = ("item", "rev_buys", "user")


def rec(**kw) -> HeteroSource:
    opts = dict(
        num_users=200,
        num_items=120,
        num_categories=6,
        purchases_per_user=6,
        num_features=8,
        taste_dim=4,
        feature_noise=0.5,
        temperature=0.5,
        seed=3,
    )
    return rec_graph(**{**opts, **kw})


def link(source: HeteroSource, reverse: bool = True, eval_negatives: int = 20) -> HeteroGraphData:
    return for_link_task(
        source, "", reverse, seed=0, val_fraction=0.1, test_fraction=0.1, eval_negatives=eval_negatives
    )


def edge_set(edges: torch.Tensor) -> set:
    return set(map(tuple, edges.t().tolist()))


# --------------------------------------------------------------------------- records


def test_held_out_edges_never_pass_messages_in_either_direction():
    data = link(rec())
    train = edge_set(data.edge_index[TARGET])
    mirrored = edge_set(data.edge_index[REVERSE].flip(0))
    assert mirrored == train  # the reverse type mirrors the train edges, nothing more
    for split in ("val", "test"):
        held = edge_set(data.held_out(split)[0])
        assert held and not held & train
    assert not edge_set(data.val_edges) & edge_set(data.test_edges)
    everything = edge_set(torch.unique(rec().edges[TARGET], dim=1))
    assert train | edge_set(data.val_edges) | edge_set(data.test_edges) == everything  # a split, nothing lost


def test_a_reverse_type_the_dataset_brought_is_rebuilt_from_train_edges_only():
    source = rec()
    source.edges[REVERSE] = source.edges[TARGET].flip(0)  # holds every purchase, held-out ones included
    data = link(source, reverse=False)
    assert edge_set(data.edge_index[REVERSE].flip(0)) == edge_set(data.edge_index[TARGET])


def test_reverse_ids_point_at_the_mirrored_edge():
    data = link(rec())
    target, reverse = data.edge_index[TARGET], data.edge_index[REVERSE]
    assert torch.equal(reverse[:, data.reverse_eid], target.flip(0))


def test_fixed_negatives_never_hold_the_positive_and_do_not_depend_on_anything_but_the_seed():
    data, again = link(rec()), link(rec())
    for split in ("val", "test"):
        edges, negatives = data.held_out(split)
        assert negatives.shape == (edges.shape[1], 20)
        assert not bool((negatives == edges[1].unsqueeze(1)).any())
        assert torch.equal(negatives, again.held_out(split)[1])


def test_a_homogeneous_graph_holds_out_whole_undirected_pairs():
    data = link(homogeneous_source(small_graph()))
    target, reverse = ("node", "to", "node"), ("node", "rev_to", "node")
    train = edge_set(data.edge_index[target]) | edge_set(data.edge_index[reverse])
    for split in ("val", "test"):
        for u, v in edge_set(data.held_out(split)[0]):
            assert (u, v) not in train and (v, u) not in train


@pytest.mark.parametrize(
    "change, needle",
    [
        (
            lambda s: s.edges.update({("user", "likes", "shop"): torch.zeros(2, 1, dtype=torch.int64)}),
            "'shop', which is not declared",
        ),
        (lambda s: s.edges[TARGET].__setitem__((1, 0), 10_000), "outside [0, 120)"),
        (lambda s: s.x.update({"item": torch.full((120, 8), float("nan"))}), "x[item] holds NaN"),
        (lambda s: s.num_nodes.update({"user": 0}), "needs at least one"),
    ],
)
def test_bad_heterogeneous_data_is_one_line_naming_it(change, needle):
    source = rec()
    change(source)
    with pytest.raises(DataError, match=None) as err:
        link(source)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_held_out_edges_that_also_pass_messages_are_refused():
    data = link(rec())
    leaked = data.edge_index[TARGET][:, :3]
    other = ((leaked[1] + 1) % data.num_nodes["item"]).unsqueeze(1)  # valid negatives: not the positive
    with pytest.raises(DataError, match="also a message-passing edge"):
        HeteroGraphData(
            data.num_nodes,
            data.x,
            data.edge_index,
            data.indptr,
            target_edge=TARGET,
            val_edges=leaked,
            test_edges=data.test_edges,
            val_negatives=other,
            test_negatives=data.test_negatives,
        )


@pytest.mark.parametrize(
    "val, test, needle",
    [
        (torch.zeros(2, 3, dtype=torch.int64), None, "give both or neither"),
        (torch.zeros(3, 3, dtype=torch.int64), torch.zeros(2, 3, dtype=torch.int64), "expected [2, M>0]"),
        (torch.zeros(2, 0, dtype=torch.int64), torch.zeros(2, 3, dtype=torch.int64), "expected [2, M>0]"),
        (torch.tensor([[0], [500]]), torch.zeros(2, 3, dtype=torch.int64), "val_negative_pairs destination"),
        (torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.int64), "val_negative_pairs"),
    ],
)
def test_bad_shared_negative_pairs_are_refused_in_one_line(val, test, needle):
    data = link(rec())
    with pytest.raises(DataError) as err:
        HeteroGraphData(
            data.num_nodes,
            data.x,
            data.edge_index,
            data.indptr,
            target_edge=TARGET,
            val_edges=data.val_edges,
            test_edges=data.test_edges,
            val_negatives=data.val_negatives,
            test_negatives=data.test_negatives,
            val_negative_pairs=val,
            test_negative_pairs=test,
        )
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_the_target_edge_type_is_named_or_asked_for():
    source = rec()
    source.target_edge = None
    with pytest.raises(ConfigError, match="link.edge_type=RELATION"):
        link(source)
    assert for_link_task(source, "buys", True, 0, 0.1, 0.1, 5).target_edge == TARGET
    with pytest.raises(ConfigError, match="link.edge_type='sells' is not an edge type"):
        for_link_task(source, "sells", True, 0, 0.1, 0.1, 5)


# --------------------------------------------------------------------------- sampling


def test_typed_sampling_respects_each_edge_types_fanout_and_samples_real_edges():
    data = link(rec())
    fanouts = typed_fanouts(data, [4, 2], {"in": [1, 1]})
    assert fanouts[("item", "in", "category")] == [1, 1] and fanouts[TARGET] == [4, 2]
    sampler = HeteroNeighborSampler(data, fanouts)
    seeds = {"user": torch.tensor([0, 5, 7]), "item": torch.tensor([3, 4])}
    sub = sampler.sample(seeds, torch.Generator().manual_seed(0))
    for t, ids in seeds.items():
        assert torch.equal(sub.node[t][: ids.numel()], ids)  # seeds first
        assert torch.unique(sub.node[t]).numel() == sub.node[t].numel()
    for et, rows in sub.row.items():
        real = edge_set(data.edge_index[et])
        sampled = torch.stack([sub.node[et[0]][rows], sub.node[et[2]][sub.col[et]]])
        assert edge_set(sampled) <= real
        assert torch.equal(data.edge_index[et][:, sub.edge[et]], sampled)
        per_dst = torch.bincount(sub.col[et])
        assert int(per_dst.max()) <= max(fanouts[et])


def test_a_training_batch_never_sees_its_own_edges_and_negatives_are_never_the_positive():
    data = link(rec())
    batcher = LinkBatcher(data, HeteroNeighborSampler(data, typed_fanouts(data, [-1, -1], {})), negatives=5)
    gen = torch.Generator().manual_seed(0)
    for eids in data.split("train").split(64):
        sub, mb = batcher.train_batch(eids, gen, gen)
        assert not bool(torch.isin(sub.edge[TARGET], eids).any())
        assert not bool(torch.isin(sub.edge[REVERSE], data.reverse_eid[eids]).any())
        src = sub.node["user"][mb.pairs[0]]
        dst = sub.node["item"][mb.pairs[1]]
        positives = data.edge_index[TARGET][:, eids]
        assert torch.equal(torch.stack([src[: eids.numel()], dst[: eids.numel()]]), positives)
        negative_dst = dst[eids.numel() :].view(eids.numel(), 5)
        assert not bool((negative_dst == positives[1].unsqueeze(1)).any())
        assert mb.labels.sum() == eids.numel() and mb.labels.numel() == 6 * eids.numel()


def test_per_rank_seed_edges_are_disjoint_covering_and_equal_in_count():
    edges = link(rec()).split("train")
    for world in (2, 3):
        shards = [torch.cat(epoch_batches(edges, 100, 0, 1, r, world)) for r in range(world)]
        counts = {len(epoch_batches(edges, 100, 0, 1, r, world)) for r in range(world)}
        assert len(counts) == 1
        together = torch.cat(shards)
        assert together.numel() == edges.numel() and torch.equal(together.sort().values, edges)


def test_with_the_core_sampler_both_backends_see_the_same_batches():
    data = link(rec())
    seen = {}
    for name in ("pyg", "dgl"):
        sampler = make_hetero_sampler(get_backend(name), data, [5, 3], {}, "core", negatives=2)
        sampler.reseed(7, 1, 0)
        batches = list(sampler.loader(list(data.split("train")[:256].split(64))))
        seen[name] = [(mb.pairs, mb.input_nodes, native_edges(name, mb.graph)) for mb in batches]
    for (pa, na, ea), (pb, nb, eb) in zip(seen["pyg"], seen["dgl"]):
        assert torch.equal(pa, pb)
        assert na.keys() == nb.keys() and all(torch.equal(na[t], nb[t]) for t in na)
        assert ea == eb


@pytest.mark.parametrize("decoder", ["dot", "mlp"])
def test_heterogeneous_weights_moved_by_neutral_name_give_the_same_scores(decoder):
    data = link(rec())
    spec = ModelSpec(arch="sage", hidden=16, layers=2, dropout=0.0, options={"decoder": decoder})
    models = {}
    for name in ("pyg", "dgl"):
        torch.manual_seed(len(models))  # different initial weights: only the move makes them equal
        models[name] = build_model(spec, name, Task.LINK, *model_dims(data), data)[0].eval()
    neutral = to_neutral(models["dgl"], models["dgl"].state_dict(), "sage")
    assert len(neutral) == len(models["pyg"].state_dict())  # every entry has a neutral name
    models["pyg"].load_state_dict(from_neutral(models["pyg"], neutral, "sage"))
    scores = {}
    for name, model in models.items():
        sampler = make_hetero_sampler(get_backend(name), data, [5, 3], {}, "core", negatives=2)
        sampler.reseed(7, 1, 0)
        mb = next(iter(sampler.loader([data.split("train")[:64]])))
        with torch.no_grad():
            scores[name] = model(mb.graph, gather_inputs(data, mb.input_nodes, None), mb.pairs)
    torch.testing.assert_close(scores["pyg"], scores["dgl"], rtol=1e-4, atol=1e-5)


def native_edges(backend: str, graph) -> dict:
    """{edge type: set of (global src, global dst)} of a native heterogeneous batch."""
    out = {}
    if backend == "pyg":
        for et, ei in graph.edge_index_dict.items():
            out[et] = edge_set(torch.stack([graph[et[0]].n_id[ei[0]], graph[et[2]].n_id[ei[1]]]))
        return {et: e for et, e in out.items() if e}
    import dgl

    graph = graph[0]  # the input layer's block holds every sampled edge
    for et in graph.canonical_etypes:
        src, dst = graph.edges(etype=et)
        pairs = torch.stack([graph.srcnodes[et[0]].data[dgl.NID][src], graph.dstnodes[et[2]].data[dgl.NID][dst]])
        out[et] = edge_set(pairs)
    return {et: e for et, e in out.items() if e}


# --------------------------------------------------------------------------- metrics and config


def test_link_metrics_rank_each_edge_among_its_own_negatives_ties_halved():
    scores = LinkScores(hits_at=2)
    scores.update(torch.tensor([3.0, 0.0, 1.0]), torch.tensor([[1.0, 2.0], [5.0, 6.0], [1.0, 1.0]]))
    m = scores.as_metrics("val")
    # ranks: 1, 3, 2 (both negatives tie with the positive: half a place each)
    assert m["val_mrr"] == pytest.approx((1 + 1 / 3 + 1 / 2) / 3)
    assert m["val_hits"] == pytest.approx(2 / 3)
    # AUC over all 3 positives vs all 6 negatives, ties counting half
    pos, neg = np.array([3.0, 0.0, 1.0]), np.array([1, 2, 5, 6, 1, 1.0])
    expected = np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])
    assert m["val_roc_auc"] == pytest.approx(expected)


def test_link_config_defaults_and_refusals():
    config = from_dict({"task": "link"})
    assert config.train.monitor == "val_roc_auc" and from_dict({}).train.monitor == "val_acc"
    with pytest.raises(ConfigError, match="does not score task=link"):
        from_dict({"task": "link", "train": {"monitor": "val_acc"}})
    with pytest.raises(ConfigError, match="link.hits_at=200 exceeds"):
        LinkConfig(hits_at=200)
    with pytest.raises(ConfigError, match="sampler.edge_fanouts.buys"):
        from_dict({"task": "link", "sampler": {"fanouts": [5, 5], "edge_fanouts": {"buys": [5]}}})


def test_dgls_own_link_sampler_keeps_the_same_guarantees():
    import dgl

    data = link(rec())
    sampler = make_hetero_sampler(get_backend("dgl"), data, [-1, -1], {}, "native", negatives=3)
    assert type(sampler).__name__ == "DglHeteroSampler"
    sampler.reseed(0, 0, 0)
    batches = list(data.split("train").split(64))
    for eids, mb in zip(batches, sampler.loader(batches)):
        for block in mb.graph:
            for et in (TARGET, REVERSE):
                seen = block.edges[et].data[dgl.EID]
                banned = eids if et == TARGET else data.reverse_eid[eids]
                assert not bool(torch.isin(seen, banned).any())  # no seed edge, no reverse of one
        last = mb.graph[-1]
        users, items = last.dstnodes["user"].data[dgl.NID], last.dstnodes["item"].data[dgl.NID]
        src, dst = users[mb.pairs[0]], items[mb.pairs[1]]
        positives = data.edge_index[TARGET][:, eids]
        assert torch.equal(torch.stack([src[: eids.numel()], dst[: eids.numel()]]), positives)
        assert not bool((dst[eids.numel() :].view(-1, 3) == positives[1].unsqueeze(1)).any())
    # Held-out edges are scored through core's sampler on every backend: the same batches.
    core = make_hetero_sampler(get_backend("dgl"), data, [-1, -1], {}, "core")
    a = next(iter(sampler.held_out_loader("val", [torch.arange(10)])))
    b = next(iter(core.held_out_loader("val", [torch.arange(10)])))
    assert torch.equal(a.pairs, b.pairs)


def test_a_mirror_the_dataset_brought_under_any_name_is_rebuilt_and_excluded():
    source = rec()
    mirror = ("item", "bought_by", "user")
    source.edges[mirror] = source.edges[TARGET].flip(0)  # every purchase, held-out ones included
    data = link(source)
    assert data.reverse_edge == mirror and REVERSE not in data.edge_index  # no second mirror beside it
    assert edge_set(data.edge_index[mirror].flip(0)) == edge_set(data.edge_index[TARGET])
    eids = data.split("train")[:50]
    excluded = data.excluded(eids)
    assert torch.equal(data.edge_index[mirror][:, excluded[mirror]], data.edge_index[TARGET][:, eids].flip(0))


def test_between_nodes_of_one_type_a_held_out_pair_leaves_training_in_both_directions():
    knows = ("person", "knows", "person")
    gen = torch.Generator().manual_seed(0)
    pairs = torch.randint(0, 60, (2, 300), generator=gen)
    pairs = pairs[:, pairs[0] != pairs[1]]
    source = HeteroSource({"person": 60}, {}, {knows: torch.cat([pairs, pairs.flip(0)], dim=1)}, target_edge=knows)
    data = link(source, reverse=False)
    train = edge_set(data.edge_index[knows])
    for split in ("val", "test"):
        for u, v in edge_set(data.held_out(split)[0]):
            assert (u, v) not in train and (v, u) not in train
    eids = data.split("train")[:40]
    excluded = edge_set(data.edge_index[knows][:, data.excluded(eids)[knows]])
    for u, v in edge_set(data.edge_index[knows][:, eids]):
        assert (v, u) in excluded or (v, u) not in train  # a seed's opposite direction is never a path to it


def test_a_homogeneous_graph_is_oriented_at_random_and_known_pairs_cover_both_directions():
    data = link(homogeneous_source(small_graph()))
    to = data.edge_index[("node", "to", "node")]
    assert 0.35 < float((to[0] < to[1]).double().mean()) < 0.65  # no node order to learn
    known = edge_set(data.known_pairs())
    assert edge_set(to) <= known and edge_set(to.flip(0)) <= known and (0, 0) in known


@pytest.mark.parametrize("backend", ["pyg", "dgl"])
def test_an_empty_batch_runs_through_the_sampler_and_the_model(backend):
    from gnnbridge.core.config import ModelSpec, Task
    from gnnbridge.core.inference.evaluation import gather_inputs
    from gnnbridge.core.models.build import ModelCall, build_model, model_dims

    data = link(rec())
    sampler = make_hetero_sampler(get_backend(backend), data, [3, 2], {}, "core")
    model, choice = build_model(ModelSpec(hidden=8), backend, Task.LINK, *model_dims(data), data)
    mb = next(iter(sampler.loader([torch.zeros(0, dtype=torch.int64)])))
    scores = ModelCall(choice.origin, 2).pairs(model, mb.graph, gather_inputs(data, mb.input_nodes, "cpu"), mb.pairs)
    assert scores.shape == (0,)


@pytest.mark.parametrize("task", [Task.NODE, Task.LINK])
def test_dgls_own_sampler_serves_a_node_type_no_edge_points_into(task):
    """Users here have no incoming edge type (no reverse edges). DGL's fused sampler (what a lone
    rank with several threads gets) leaves such a type out of a block's dst-first order, so a user
    a later block reaches could be missing from the batch's inputs (a DGLError or IndexError in the
    model, depending on the seed). Every block holds each type's dst nodes first among its src
    nodes, and the model runs, on every seed."""
    from gnnbridge.backends.dgl.compat import import_dgl

    dgl = import_dgl()
    gen = torch.Generator().manual_seed(1)
    buys = torch.stack([torch.randint(0, 30, (60,), generator=gen), torch.randint(0, 20, (60,), generator=gen)])
    source = HeteroSource(
        {"user": 30, "item": 20, "category": 4},
        {"user": torch.randn(30, 3, generator=gen), "item": torch.randn(20, 5, generator=gen)},
        {TARGET: buys, ("item", "in", "category"): torch.stack([torch.arange(20), torch.arange(20) % 4])},
        target_node="item",
        y=torch.arange(20) % 3,
        target_edge=TARGET,
    )
    data = for_node_task(source, False, 0) if task is Task.NODE else link(source, reverse=False, eval_negatives=5)
    assert "user" not in {et[2] for et in data.edge_types}
    spec = ModelSpec(arch="sage", hidden=8, layers=2, dropout=0.0)
    model = build_model(spec, "dgl", task, *model_dims(data), data)[0]
    sampler = make_hetero_sampler(get_backend("dgl"), data, [2, 2], {}, "auto", negatives=1)
    assert type(sampler).__name__ == "DglHeteroSampler"
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # a lone rank's threads: DGL samples differently with more than one
    try:
        batches = [mb for seed in range(6) for mb in sampled(sampler, seed, data.split("train").split(3))]
    finally:
        torch.set_num_threads(threads)
    for mb in batches:
        for block in mb.graph:
            for t in block.dsttypes:
                dst = block.dstnodes[t].data[dgl.NID]
                assert torch.equal(block.srcnodes[t].data[dgl.NID][: dst.numel()], dst)
        for t, ids in mb.input_nodes.items():
            assert torch.equal(ids, mb.graph[0].srcnodes[t].data[dgl.NID])
        inputs = gather_inputs(data, mb.input_nodes, None)
        out = model(mb.graph, inputs, mb.pairs) if task is Task.LINK else model(mb.graph, inputs)
        assert out.shape[0] == (mb.pairs.shape[1] if task is Task.LINK else mb.seeds.numel())


def sampled(sampler, seed: int, batches) -> list:
    sampler.reseed(seed, 0, 0)
    return list(sampler.loader(list(batches)))
