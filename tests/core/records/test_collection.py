"""Graph collections: the packed record, its checks, and packing batches of graphs."""

import pytest
import torch

from gnnbridge.core.errors import DataError
from gnnbridge.core.records.collection import GraphCollection, pack
from gnnbridge.plugins.datasets import family_graphs


def tiny(**overrides):
    """Three graphs: a 2-node edge, a single node, a 4-cycle (nodes 3..6)."""
    args = {
        "x": torch.arange(7, dtype=torch.float32).view(-1, 1),
        "edge_index": torch.tensor([[1, 0, 3, 4, 5, 6], [0, 1, 4, 5, 6, 3]]),
        "node_ptr": torch.tensor([0, 2, 3, 7]),
        "y": torch.tensor([0, 1, 0]),
        "splits": (torch.tensor([0]), torch.tensor([1]), torch.tensor([2])),
    }
    args.update(overrides)
    return GraphCollection.from_edges(**args)


def test_pack_cuts_graphs_out_with_local_ids():
    data = family_graphs(40, 6, 12, seed=0)
    ids = torch.tensor([7, 3, 30])
    packed = pack(data, ids)
    graph_in_batch = torch.repeat_interleave(torch.arange(3), packed.num_nodes)
    offset = 0
    for b, g in enumerate(ids.tolist()):
        n0, n1 = int(data.node_ptr[g]), int(data.node_ptr[g + 1])
        assert torch.equal(packed.node[offset : offset + n1 - n0], torch.arange(n0, n1))
        in_g = (data.edge_index[1] >= n0) & (data.edge_index[1] < n1)
        mine = graph_in_batch[packed.edge_index[1]] == b
        expected = data.edge_index[:, in_g] - n0 + offset
        assert torch.equal(packed.edge_index[:, mine], expected)
        offset += n1 - n0
    assert torch.equal(packed.num_nodes, data.node_ptr[ids + 1] - data.node_ptr[ids])
    assert int(packed.num_edges.sum()) == packed.edge_index.shape[1]


def test_an_edge_between_two_graphs_is_refused_naming_both():
    with pytest.raises(DataError, match="edge 4 -> 0 runs from graph 2 to graph 0"):
        tiny(edge_index=torch.tensor([[1, 4], [0, 0]]))


@pytest.mark.parametrize(
    "node_ptr, message",
    [
        (torch.tensor([0, 2, 3, 6]), r"node_ptr ends at 6 but x has 7 rows"),
        (torch.tensor([0, 2, 3, 8]), r"node_ptr ends at 8 but x has 7 rows"),
        (torch.tensor([1, 2, 3, 7]), r"node_ptr starts at 1"),
        (torch.tensor([0, 2, 2, 7]), r"graph 1 0 nodes"),
    ],
)
def test_node_ptr_must_cover_x_exactly(node_ptr, message):
    with pytest.raises(DataError, match=message):
        tiny(node_ptr=node_ptr, edge_index=torch.zeros(2, 0, dtype=torch.int64))


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"y": torch.tensor([0, 1])}, "y has 2 labels but node_ptr describes 3 graphs"),
        ({"splits": (torch.tensor([0]), torch.tensor([0]), torch.tensor([2]))}, "overlaps"),
        ({"splits": (torch.tensor([0]), torch.tensor([5]), torch.tensor([2]))}, "graph id 5, outside"),
        ({"x": torch.full((7, 1), float("nan"))}, "NaN"),
    ],
)
def test_bad_collections_are_refused(overrides, message):
    with pytest.raises(DataError, match=message):
        tiny(**overrides)


def test_default_split_is_a_seeded_80_10_10_over_graphs():
    a, b = family_graphs(200, 6, 10, seed=1), family_graphs(200, 6, 10, seed=1)
    assert [a.split(s).numel() for s in ("train", "val", "test")] == [160, 20, 20]
    assert torch.equal(a.test_idx, b.test_idx)
    assert not torch.equal(a.test_idx, family_graphs(200, 6, 10, seed=2).test_idx)


def test_gin_synthetic_labels_come_from_structure_alone():
    data = family_graphs(300, 12, 40, seed=0)
    assert torch.equal(data.x, torch.ones_like(data.x))  # no feature can tell the classes apart
    assert torch.bincount(data.y).tolist() == [100, 100, 100]
    sizes = data.node_ptr.diff().float()
    means = [float(sizes[data.y == c].mean()) for c in range(3)]
    assert max(means) - min(means) < 3  # nor can the node count
