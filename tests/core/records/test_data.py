import pytest
import torch

from gnnbridge.core.errors import DataError
from gnnbridge.core.records.data import GraphData, random_split


def make(**changes):
    n = 10
    args = dict(
        edge_index=torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]]),
        x=torch.randn(n, 3),
        y=torch.arange(n) % 2,
        train_idx=torch.arange(0, 6),
        val_idx=torch.arange(6, 8),
        test_idx=torch.arange(8, 10),
    )
    args.update(changes)
    return GraphData.from_edges(**args)


def test_topology_is_destination_sorted_csc():
    g = make(edge_index=torch.tensor([[5, 0, 1, 9], [3, 1, 3, 0]]))
    assert g.edge_index[1].tolist() == [0, 1, 3, 3]
    assert g.indptr.tolist()[:5] == [0, 1, 2, 2, 4]
    nbrs_of_3 = g.indices[g.indptr[3] : g.indptr[4]].tolist()
    assert sorted(nbrs_of_3) == [1, 5]


@pytest.mark.parametrize(
    "changes, needle",
    [
        ({"edge_index": torch.tensor([[0, 10], [1, 2]])}, "node id 10, outside [0, 10)"),
        ({"edge_index": torch.tensor([[0, -1], [1, 2]])}, "node id -1"),
        ({"edge_index": torch.tensor([[0, 1], [1, 2]], dtype=torch.int32)}, "dtype int32; expected int64"),
        ({"x": torch.full((10, 3), float("nan"))}, "NaN or inf"),
        ({"y": torch.arange(9) % 2}, "y has 9 labels but x has 10 rows"),
        ({"y": torch.ones(10, dtype=torch.int64)}, "y holds one class only (1)"),
        ({"y": torch.arange(10) % 3 + 1}, "y has labels up to 3 but no 0; labels must be 0 .. C-1"),
        ({"y": torch.arange(10) % 2 - 1}, "y holds the label -1"),
        ({"val_idx": torch.arange(5, 8)}, "overlaps"),
        ({"test_idx": torch.zeros(0, dtype=torch.int64)}, "test split is empty"),
        ({"train_idx": torch.tensor([0, 0, 1])}, "lists a node twice"),
    ],
)
def test_invariants_are_enforced_with_one_line(changes, needle):
    with pytest.raises(DataError) as err:
        make(**changes)
    assert needle in str(err.value)


def test_random_split_is_seeded_disjoint_and_complete():
    a = random_split(101, seed=3)
    b = random_split(101, seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert torch.cat(a).sort().values.tolist() == list(range(101))
    assert [t.numel() for t in a] == [60, 20, 21]


def test_share_memory_moves_every_tensor(small_data):
    small_data.share_memory_()
    assert small_data.x.is_shared() and small_data.indices.is_shared() and small_data.indptr.is_shared()


def test_counting_sort_gives_the_stable_destination_order(monkeypatch):
    import gnnbridge.core.records.csc as csc

    gen = torch.Generator().manual_seed(0)
    src, dst = torch.randint(0, 50, (2, 400), generator=gen)
    compiled = csc.csc_from_coo(src, dst, 60)
    monkeypatch.setattr(csc, "_counting_sort", None)  # the argsort path (no numba)
    reference = csc.csc_from_coo(src, dst, 60)
    order = torch.argsort(dst, stable=True)
    assert torch.equal(compiled[1], src[order]) and torch.equal(reference[1], src[order])
    assert torch.equal(compiled[0], reference[0]) and compiled[0][-1] == 400 and compiled[0][-10:].unique().numel() == 1


def test_the_record_keeps_csc_only_and_rebuilds_the_edge_list(small_data):
    from dataclasses import fields

    assert "edge_index" not in {f.name for f in fields(small_data)}
    src, dst = small_data.edge_index
    assert torch.equal(src, small_data.indices)
    assert torch.equal(torch.bincount(dst, minlength=small_data.num_nodes), small_data.indptr.diff())
    assert bool((dst.diff() >= 0).all())


def test_decreasing_offsets_are_refused(small_data):
    from dataclasses import replace

    bad = small_data.indptr.clone()
    bad[5], bad[6] = bad[6], bad[5] - 1
    with pytest.raises(DataError, match="never decrease"):
        replace(small_data, indptr=bad)


def test_records_read_labels_in_the_form_they_are_given_without_a_context():
    """``labels=`` is the form a record checks and stores ``y`` in, outside any label_form block
    (what a loader passes from ``config.label_form``)."""
    import torch

    from gnnbridge.core.records.collection import GraphCollection
    from gnnbridge.core.records.data import GraphData

    ring = torch.stack([torch.arange(6), (torch.arange(6) + 1) % 6])
    x, splits = torch.randn(6, 3), (torch.tensor([0, 1, 2]), torch.tensor([3]), torch.tensor([4, 5]))
    graph = GraphData.from_edges(ring, x, torch.rand(6, dtype=torch.float64), *splits, labels="regression")
    assert graph.labels == "regression" and graph.y.dtype == torch.float32 and graph.num_classes == 1
    unlabelled = GraphData.unlabelled(ring, x, 3, labels="multilabel")
    assert unlabelled.labels == "multilabel" and unlabelled.y.shape == (6, 3)
    ptr, y = torch.tensor([0, 2, 4, 6]), torch.tensor([[0, 1], [1, 0], [1, 1]])
    two = torch.tensor([[0, 2, 4], [1, 3, 5]])  # an edge in each of the three graphs
    graphs = GraphCollection.from_edges(
        x, two, ptr, y, (torch.tensor([0]), torch.tensor([1]), torch.tensor([2])), labels="multilabel"
    )
    assert graphs.labels == "multilabel" and graphs.y.dtype == torch.float32 and graphs.num_classes == 2
