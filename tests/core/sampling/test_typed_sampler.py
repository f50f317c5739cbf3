"""The typed sampler on a graph with several relations between the same node types (a shop:
customers view and buy products, products belong to brands), built here with numpy rather than
by gnnbridge's generators: per-hop trimmed batches give the untrimmed scores on both backends,
and core's sampler and DGL's keep training on the same negatives with the same edges left out,
so the two paths cannot drift apart unnoticed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from gnnbridge.core.config import ModelSpec, Task
from gnnbridge.core.inference.evaluation import gather_inputs
from gnnbridge.core.models.build import build_model, model_dims
from gnnbridge.core.plugins import get_backend
from gnnbridge.core.records.hetero import HeteroSource
from gnnbridge.core.sampling.build import make_hetero_sampler
from gnnbridge.core.tasks import for_link_task, for_node_task

BUYS = ("customer", "buys", "product")
REV_BUYS = ("product", "rev_buys", "customer")


def shop(customers: int = 150, products: int = 90, brands: int = 6, seed: int = 0) -> HeteroSource:
    """Customers view 8 products each and buy 3 of them; products carry a brand and a label."""
    rng = np.random.default_rng(seed)
    views = np.stack([rng.choice(products, 8, replace=False) for _ in range(customers)])
    owner = np.repeat(np.arange(customers), 8)
    bought = views[:, :3].ravel()
    brand = rng.integers(0, brands, products)
    as_edges = lambda src, dst: torch.from_numpy(np.stack([src, dst]).astype(np.int64))  # noqa: E731
    return HeteroSource(
        {"customer": customers, "product": products, "brand": brands},
        {
            "customer": torch.from_numpy(rng.normal(size=(customers, 6)).astype(np.float32)),
            "product": torch.from_numpy(rng.normal(size=(products, 6)).astype(np.float32)),
        },
        {
            BUYS: as_edges(np.repeat(np.arange(customers), 3), bought),
            ("customer", "views", "product"): as_edges(owner, views.ravel()),
            ("product", "of", "brand"): as_edges(np.arange(products), brand),
        },
        target_node="product",
        y=torch.from_numpy(brand % 3),
        target_edge=BUYS,
        name="shop",
    )


def link_data():
    return for_link_task(shop(), "buys", True, seed=0, val_fraction=0.1, test_fraction=0.1, eval_negatives=10)


def node_data():
    return for_node_task(shop(), reverse=True, seed=0)


def untrimmed(sub):
    """The same sample with every node counted as a seed and every edge as hop 1's: each layer
    then runs on the whole sample, as an untrimmed batch does."""
    layers = sub.layers
    nodes = {t: [sum(n)] + [0] * layers for t, n in sub.num_sampled_nodes.items()}
    edges = {et: [sum(n)] + [0] * (layers - 1) for et, n in sub.num_sampled_edges.items()}
    return dataclasses.replace(sub, num_sampled_nodes=nodes, num_sampled_edges=edges)


def first_batch(data, backend: str, task: Task):
    sampler = make_hetero_sampler(get_backend(backend), data, [4, 3], {}, "core", negatives=2)
    sampler.reseed(3, 0, 0)
    seeds = data.split("train")[:40]
    if task == Task.LINK:
        return sampler._links.train_batch(seeds, sampler._generator, sampler.negatives_from)
    sub = sampler._sampler.sample({data.target_node: seeds}, sampler._generator)
    return sub, None


@pytest.mark.parametrize("backend", ["pyg", "dgl"])
@pytest.mark.parametrize("task", [Task.LINK, Task.NODE])
def test_each_layer_computes_only_what_the_next_reads_and_the_scores_are_the_untrimmed_ones(backend, task):
    data = link_data() if task == Task.LINK else node_data()
    spec = ModelSpec(arch="sage", hidden=8, layers=2, dropout=0.0)
    torch.manual_seed(0)
    model = build_model(spec, backend, task, *model_dims(data), data)[0].eval()
    sub, mb = first_batch(data, backend, task)
    to_native = get_backend(backend).from_hetero_sampled
    trimmed, whole = to_native(sub), to_native(untrimmed(sub))
    last = dst_counts(backend, trimmed)[-1]
    assert last == {t: sub.num_seeds.get(t, 0) for t in data.node_types}  # the output layer: seeds alone
    inner = dst_counts(backend, trimmed)[0]
    assert inner == {t: sub.num_sampled_nodes[t][0] + sub.num_sampled_nodes[t][1] for t in data.node_types}
    x = gather_inputs(data, sub.node, None)
    with torch.no_grad():
        if task == Task.LINK:
            a, b = model(trimmed, x, mb.pairs), model(whole, x, mb.pairs)
        else:
            seeds = sub.num_seeds[data.target_node]
            a, b = model(trimmed, x), model(whole, x)[:seeds]
    assert a.shape[0] == (mb.pairs.shape[1] if task == Task.LINK else sub.num_seeds[data.target_node])
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def dst_counts(backend: str, graph) -> list[dict[str, int]]:
    """Each layer's computed (destination) nodes per type, as the backend's batch holds them."""
    if backend == "pyg":
        return [dst for _, dst, _ in graph.bounds]
    return [{t: block.num_dst_nodes(t) for t in block.dsttypes} for block in graph]


def test_core_and_dgls_samplers_train_on_the_same_negatives_without_the_batchs_own_edges():
    import dgl

    data = link_data()
    backend = get_backend("dgl")
    native = make_hetero_sampler(backend, data, [4, 3], {}, "native", negatives=3)
    core = make_hetero_sampler(backend, data, [4, 3], {}, "core", negatives=3)
    batches = list(data.split("train").split(50))
    for epoch in (0, 1):
        native.reseed(5, epoch, 1)
        core.reseed(5, epoch, 1)
        for eids, theirs in zip(batches, native.loader(batches)):
            sub, ours = core._links.train_batch(eids, core._generator, core.negatives_from)  # what core.loader yields
            assert torch.equal(global_pairs(theirs), global_pairs(ours))  # positives, then the same negatives
            banned = data.excluded(eids)
            for et, ids in banned.items():  # each seed edge and its reverse
                assert not bool(torch.isin(sub.edge[et], ids).any())
                for block in theirs.graph:
                    assert not bool(torch.isin(block.edges[et].data[dgl.EID], ids).any())
            for et in data.edge_types:  # left out before drawing: a seed next to one loses no neighbour
                expected = seed_fanout(data, et, ours.input_nodes, sub.num_seeds, banned.get(et), 4)
                first_hop = sub.col[et][: sub.num_sampled_edges[et][0]]
                assert torch.equal(torch.bincount(first_hop, minlength=expected.numel()), expected)
                # DGL's may draw a banned edge and then drop it (seen here): never more, though.
                most = seed_fanout(data, et, theirs.input_nodes, sub.num_seeds, banned.get(et), 4)
                assert bool((theirs.graph[-1].in_degrees(etype=et) <= most).all())


def seed_fanout(data, et, input_nodes, num_seeds, banned, fanout) -> torch.Tensor:
    """How many in-neighbours along ``et`` each seed of its destination type should draw: its
    degree without the banned edges, at most ``fanout``."""
    seeds = input_nodes.get(et[2], torch.zeros(0, dtype=torch.int64))[: num_seeds.get(et[2], 0)]
    indptr = data.indptr[et]
    degree = indptr[seeds + 1] - indptr[seeds]
    if banned is not None and banned.numel():
        owner = torch.searchsorted(indptr, banned, right=True) - 1
        degree = degree - (owner.unsqueeze(0) == seeds.unsqueeze(1)).sum(1)
    return degree.clamp(max=fanout)


def global_pairs(mb) -> torch.Tensor:
    """The batch's scored pairs as global (customer, product) ids."""
    return torch.stack([mb.input_nodes["customer"][mb.pairs[0]], mb.input_nodes["product"][mb.pairs[1]]])
