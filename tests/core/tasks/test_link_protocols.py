"""The shared evaluation protocol's record (``link.protocol=shared``, OGB's ogbl-collab style):
each split's negative pairs are distinct, never an edge of any split (in either direction between
nodes of one type), never a self-loop, drawn from the seed alone; the held-out edges keep no
per-edge negatives; asking for more pairs than there are is one line naming the limit."""

from __future__ import annotations

import pytest
import torch

from gnnbridge.core.errors import DataError
from gnnbridge.core.tasks import for_link_task, homogeneous_source
from gnnbridge.core.tasks.negatives import shared_negative_pairs
from gnnbridge.plugins.hetero_datasets import rec_graph
from gnnbridge.testing.conformance import small_graph


def shop():
    return rec_graph(
        num_users=60,
        num_items=40,
        num_categories=4,
        purchases_per_user=5,
        num_features=4,
        taste_dim=3,
        feature_noise=0.5,
        temperature=0.5,
        seed=1,
    )


def shared_task(source, count: int, seed: int = 0):
    return for_link_task(
        source, "", True, seed=seed, val_fraction=0.1, test_fraction=0.1, eval_negatives=count, protocol="shared"
    )


def keys(pairs: torch.Tensor, n: int, unordered: bool = False) -> set:
    src, dst = pairs
    if unordered:
        src, dst = torch.minimum(src, dst), torch.maximum(src, dst)
    return set((src * n + dst).tolist())


def test_shared_negative_pairs_are_distinct_non_edges_in_draw_order_from_the_generator():
    edges = {(0, 1), (2, 2), (3, 0)}

    def is_edge(src, dst):
        return torch.tensor([(int(s), int(d)) in edges for s, d in zip(src, dst)])

    def draw(seed):
        return shared_negative_pairs(30, 5, 7, False, is_edge, torch.Generator().manual_seed(seed))

    pairs = draw(0)
    assert pairs.shape == (2, 30) and torch.equal(pairs, draw(0)) and not torch.equal(pairs, draw(1))
    assert len(keys(pairs, 7)) == 30 and not keys(pairs, 7) & {s * 7 + d for s, d in edges}
    same = shared_negative_pairs(9, 5, 5, True, lambda s, d: torch.zeros(s.shape, dtype=torch.bool), torch.Generator())
    assert bool((same[0] != same[1]).all()) and len(keys(same, 5, unordered=True)) == 9  # one of (u, v), (v, u)


def test_a_shared_split_holds_no_edge_of_any_split_and_no_per_edge_negatives():
    data = shared_task(shop(), 500)
    n = data.num_nodes["item"]
    every_edge = keys(torch.cat([data.edge_index[data.target_edge], data.val_edges, data.test_edges], dim=1), n)
    assert data.protocol == "shared" and data.summary()["eval_negatives"] == 500
    for split in ("val", "test"):
        pairs = data.negative_pairs(split)
        assert pairs.shape == (2, 500) and len(keys(pairs, n)) == 500 and not keys(pairs, n) & every_edge
        assert data.held_out(split)[1].shape == (data.held_out(split)[0].shape[1], 0)
    assert not torch.equal(data.val_negative_pairs, data.test_negative_pairs)
    again = shared_task(shop(), 500)
    assert torch.equal(again.val_negative_pairs, data.val_negative_pairs)
    per_edge = for_link_task(shop(), "", True, seed=0, val_fraction=0.1, test_fraction=0.1, eval_negatives=20)
    assert per_edge.protocol == "per-edge" and per_edge.negative_pairs("val") is None
    assert torch.equal(per_edge.val_edges, data.val_edges)  # the protocol changes the negatives, not the split


def test_a_homogeneous_graphs_shared_negatives_are_no_edge_in_either_direction():
    graph = small_graph(n=30)
    data = shared_task(homogeneous_source(graph), 100)
    edges = torch.cat([data.edge_index[data.target_edge], data.val_edges, data.test_edges], dim=1)
    for split in ("val", "test"):
        pairs = data.negative_pairs(split)
        assert bool((pairs[0] != pairs[1]).all())
        assert not keys(pairs, 30, unordered=True) & keys(edges, 30, unordered=True)


def test_more_shared_negatives_than_pairs_that_are_not_edges_is_one_line_and_the_limit_draws():
    with pytest.raises(DataError) as err:
        shared_task(shop(), 60 * 40)
    line = str(err.value)
    assert "link.eval_negatives=2400 shared negatives per split, but (user,buys,item) has 2,400 possible pairs" in line
    assert "\n" not in line
    room = int(line.split("use link.eval_negatives=")[1].split()[0])
    data = shared_task(shop(), room)  # every pair that is not an edge: the draw still ends
    every_edge = keys(torch.cat([data.edge_index[data.target_edge], data.val_edges, data.test_edges], dim=1), 40)
    assert keys(data.val_negative_pairs, 40) == set(range(60 * 40)) - every_edge
