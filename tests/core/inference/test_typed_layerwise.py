"""Exact layer-wise inference on heterogeneous graphs: the typed pass gives what sampling every
seed's whole neighbourhood gives (node logits, held-out link scores, given pairs), on both
backends, with layers in memory or on disk; top-k from final states never returns a training
pair and matches ranking every pair by brute force."""

from __future__ import annotations

import tempfile
from contextlib import ExitStack

import numpy as np
import pytest
import torch

from gnnbridge.core.config import ModelSpec, Task
from gnnbridge.core.inference.evaluation import LinkEvaluator, SampledEvaluator
from gnnbridge.core.inference.typed_layerwise import TypedLayerwiseEvaluator, TypedLayerwiseLinks
from gnnbridge.core.models.build import ModelCall, build_model, model_dims
from gnnbridge.core.plugins import get_backend
from gnnbridge.core.records.hetero import HeteroSource
from gnnbridge.core.runtime.context import DistContext
from gnnbridge.core.sampling.build import make_hetero_sampler
from gnnbridge.core.sampling.neighbors import ALL_NEIGHBORS
from gnnbridge.core.tasks import for_link_task, for_node_task
from gnnbridge.core.tasks.retrieval import chunked_top_k

ALONE = DistContext(0, 1, 0, torch.device("cpu"))
BUYS = ("customer", "buys", "product")


def shop(seed: int = 0) -> HeteroSource:
    """Customers (featured) view and buy products (featured); products belong to featureless
    brands; one node type (coupons) no relation points into, so it keeps its input states."""
    rng = np.random.default_rng(seed)
    customers, products, brands = 70, 40, 5
    views = np.stack([rng.choice(products, 6, replace=False) for _ in range(customers)])
    edges = lambda a, b: torch.from_numpy(np.stack([a, b]).astype(np.int64))  # noqa: E731
    brand = rng.integers(0, brands, products)
    return HeteroSource(
        {"customer": customers, "product": products, "brand": brands, "coupon": 3},
        {
            "customer": torch.from_numpy(rng.normal(size=(customers, 5)).astype(np.float32)),
            "product": torch.from_numpy(rng.normal(size=(products, 5)).astype(np.float32)),
        },
        {
            BUYS: edges(np.repeat(np.arange(customers), 2), views[:, :2].ravel()),
            ("customer", "views", "product"): edges(np.repeat(np.arange(customers), 6), views.ravel()),
            ("product", "of", "brand"): edges(np.arange(products), brand),
            ("coupon", "for", "product"): edges(np.arange(3), np.arange(3)),
        },
        target_node="product",
        y=torch.from_numpy(brand % 3),
        target_edge=BUYS,
        name="shop",
    )


# (arch, options): every heterogeneous model core's typed layer-wise pass runs
ARCHS = {
    "sage": ("sage", {}),
    "rgcn-bases": ("rgcn", {"num_bases": 2}),
    "rgcn-blocks": ("rgcn", {"num_blocks": 2}),
    "hgt": ("hgt", {}),
}


def built(backend: str, task: Task, decoder: str = "dot", arch: str = "sage"):
    source = shop()
    if task == Task.LINK:
        data = for_link_task(source, "buys", True, seed=0, val_fraction=0.15, test_fraction=0.15, eval_negatives=7)
    else:
        data = for_node_task(source, reverse=False, seed=0)  # coupons: no relation points into them
    name, options = ARCHS[arch]
    spec = ModelSpec(arch=name, hidden=8, layers=3, heads=2, dropout=0.0, options={"decoder": decoder, **options})
    torch.manual_seed(0)
    model = build_model(spec, backend, task, *model_dims(data), data)[0].eval()
    return data, model


def full_sampler(backend: str, data):
    return make_hetero_sampler(get_backend(backend), data, [ALL_NEIGHBORS] * 3, {}, "core", negatives=1)


@pytest.fixture
def tmpdir_here(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("backend", ["pyg", "dgl"])
@pytest.mark.parametrize(
    ("store", "arch"), [("memory", "sage"), ("disk", "sage"), *(("memory", a) for a in list(ARCHS)[1:])]
)
def test_node_logits_are_those_of_every_seeds_whole_neighbourhood(backend, store, arch, tmpdir_here):
    data, model = built(backend, Task.NODE, arch=arch)
    call = ModelCall("sage", data.num_classes)
    # batch 6: many batches per type, the last one short
    typed = TypedLayerwiseEvaluator(get_backend(backend), data, ALONE, 6, call, store).predict(model)
    full = SampledEvaluator(get_backend(backend), data, ALONE, 6, full_sampler(backend, data), 0, call).predict(model)
    assert typed.shape == (data.num_nodes["product"], data.num_classes)
    torch.testing.assert_close(typed, full, rtol=1e-4, atol=1e-5)
    assert not list(tmpdir_here.glob("gnnbridge-layers-*"))  # disk layers are removed with the pass


@pytest.mark.parametrize("backend", ["pyg", "dgl"])
@pytest.mark.parametrize(
    ("decoder", "arch"), [("dot", "sage"), ("mlp", "sage"), *(("mlp", a) for a in list(ARCHS)[1:])]
)
def test_link_scores_and_metrics_are_those_of_every_seeds_whole_neighbourhood(backend, decoder, arch):
    data, model = built(backend, Task.LINK, decoder, arch)
    call = ModelCall("sage", 2)
    args = (get_backend(backend), data, ALONE, 5, full_sampler(backend, data), 0, call, [1, 3])
    typed, full = TypedLayerwiseLinks(*args), LinkEvaluator(*args)
    a, b = typed.evaluate(model, ("val", "test")), full.evaluate(model, ("val", "test"))
    assert a.keys() == b.keys() and all(a[k] == pytest.approx(b[k], abs=1e-6) for k in a), (a, b)
    src, dst = torch.randint(0, 70, (50,)), torch.randint(0, 40, (50,))
    torch.testing.assert_close(
        typed.score_pairs(model, src, dst), full.score_pairs(model, src, dst), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("decoder", ["dot", "mlp"])
def test_top_k_from_states_ranks_like_brute_force_and_never_returns_a_training_pair(decoder):
    data, model = built("pyg", Task.LINK, decoder)
    typed = TypedLayerwiseLinks(
        get_backend("pyg"), data, ALONE, 5, full_sampler("pyg", data), 0, ModelCall("sage", 2), [1]
    )
    known = data.known_pairs()
    best, scores = typed.top_k(model, 5, known)
    with ExitStack() as stack:
        h = typed.embeddings(model, stack)
        every = model.decode(h["customer"].repeat_interleave(40, 0), h["product"].repeat(70, 1)).view(70, 40)
    every[known[0], known[1]] = float("-inf")
    assert best.shape == (70, 5)
    torch.testing.assert_close(scores, every.topk(5, dim=1).values, rtol=1e-5, atol=1e-5)
    assert not set(zip(known[0].tolist(), known[1].tolist())) & {
        (s, int(d)) for s in range(70) for d in best[s][scores[s] > float("-inf")]
    }


def test_chunked_top_k_is_the_same_whatever_the_chunk():
    torch.manual_seed(0)
    src, dst = torch.randn(30, 4), torch.randn(25, 4)
    exclude = torch.stack([torch.randint(0, 30, (40,)), torch.randint(0, 25, (40,))])

    class Dot:
        decoder = "dot"

    whole = chunked_top_k(Dot(), src, dst, 6, exclude)
    for pairs in (1, 25, 26, 100):  # one source per chunk, exactly one row, a row and one, four rows
        part = chunked_top_k(Dot(), src, dst, 6, exclude, chunk_bytes=12 * pairs)
        assert torch.equal(part[0], whole[0])  # the same lists; scores to float rounding (BLAS blocks rows)
        torch.testing.assert_close(part[1], whole[1])
    returned = {(s, int(d)) for s in range(30) for d in whole[0][s][whole[1][s] > float("-inf")]}
    assert not returned & set(zip(exclude[0].tolist(), exclude[1].tolist()))


def test_the_approximate_index_never_returns_an_excluded_pair_and_finds_most_of_the_exact_lists():
    pytest.importorskip("faiss")  # the retrieval extra, which make install installs
    from gnnbridge.core.tasks.retrieval import approximate_top_k

    gen = torch.Generator().manual_seed(0)
    centres = torch.randn(20, 16, generator=gen)
    dst = centres[torch.randint(0, 20, (3000,), generator=gen)] + 0.3 * torch.randn(3000, 16, generator=gen)
    src = centres[torch.randint(0, 20, (400,), generator=gen)] + 0.3 * torch.randn(400, 16, generator=gen)
    exclude = torch.stack([torch.arange(400).repeat_interleave(5), torch.randint(0, 3000, (2000,), generator=gen)])

    class Dot:
        decoder = "dot"

    exact, _ = chunked_top_k(Dot(), src, dst, 10, exclude)
    approx, scores = approximate_top_k(src, dst, 10, exclude, chunk_bytes=128 * 15 * 40)  # chunks of 128 sources
    returned = {(s, int(d)) for s in range(400) for d in approx[s]}
    assert not returned & set(zip(exclude[0].tolist(), exclude[1].tolist()))
    recall = np.mean([len(set(approx[s].tolist()) & set(exact[s].tolist())) / 10 for s in range(400)])
    assert recall > 0.8, recall  # HNSW at efSearch 128 on 3,000 points: about 0.99 here
    assert bool((scores[:, :-1] >= scores[:, 1:]).all())  # best first
