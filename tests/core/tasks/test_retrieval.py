"""Top-k lists as a user reads them: exactly k slots a row, the filled ones first and counted, and
an unfilled slot marked with an id that numpy refuses as an index (``-1`` would silently read the
last destination)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnbridge.core.tasks.retrieval import NO_SLOT, approximate_top_k, chunked_top_k, fillable, filled


class Dot:
    decoder = "dot"


def exact(src, dst, k, exclude):
    return chunked_top_k(Dot(), src, dst, k, exclude)


def approximate(src, dst, k, exclude):
    pytest.importorskip("faiss")  # the retrieval extra, which make install installs
    return approximate_top_k(src, dst, k, exclude)


# Source 0 was trained on 4 of the 6 destinations (one pair twice): 2 are left to rank. Source 1
# was trained on none; the others on one each.
EXCLUDE = torch.tensor([[0, 0, 0, 0, 0, 2, 3, 4], [1, 2, 3, 4, 2, 0, 5, 5]])


@pytest.mark.parametrize("method", [exact, approximate])
def test_a_short_list_ends_in_slots_numpy_refuses_as_indices_and_is_counted(method):
    gen = torch.Generator().manual_seed(0)
    src, dst = torch.randn(5, 4, generator=gen), torch.randn(6, 4, generator=gen)
    top, scores = method(src, dst, 4, EXCLUDE)
    assert top.shape == scores.shape == (5, 4)
    assert filled(top).tolist() == [2, 4, 4, 4, 4]
    assert set(top[0, :2].tolist()) == {0, 5} and (top[0, 2:] == NO_SLOT).all()
    assert torch.isfinite(scores[0, :2]).all() and (scores[0, 2:] == float("-inf")).all()
    items = np.array(["a", "b", "c", "d", "e", "f"])
    with pytest.raises(IndexError):
        items[top[0].numpy()]  # a list read without its count fails loudly, never names the last item
    with pytest.raises(IndexError):
        torch.arange(6)[top[0]]


@pytest.mark.parametrize("method", [exact, approximate])
def test_k_above_the_destinations_is_never_shrunk_silently(method):
    gen = torch.Generator().manual_seed(1)
    src, dst = torch.randn(5, 4, generator=gen), torch.randn(6, 4, generator=gen)
    top, scores = method(src, dst, 8, EXCLUDE)
    assert top.shape == scores.shape == (5, 8)  # the k asked for; what could not be filled says so
    assert filled(top).tolist() == [2, 6, 5, 5, 5]
    for row, count in zip(top, filled(top)):
        assert len(set(row[:count].tolist())) == count and (row[count:] == NO_SLOT).all()


def test_fillable_counts_each_excluded_destination_once():
    assert fillable(EXCLUDE, 5, 6, 4).tolist() == [2, 4, 4, 4, 4]
    assert fillable(EXCLUDE, 5, 6, 6).tolist() == [2, 6, 5, 5, 5]
    assert fillable(torch.zeros(2, 0, dtype=torch.int64), 3, 6, 8).tolist() == [6, 6, 6]


def test_a_candidate_the_model_scores_minus_infinity_is_refused_not_taken_for_an_empty_slot():
    """Counted slots come from the candidates, not from the scores: a candidate scored -inf stays
    inside its row's count, so predict refuses the outputs as non-finite."""
    from gnnbridge.core.app.inference import _finite

    class Broken:
        def decode(self, a, b):
            return torch.where(b[:, 0] == 3.0, torch.tensor(float("-inf")), (a * b).sum(-1))

    src, none = torch.ones(2, 2), torch.zeros(2, 0, dtype=torch.int64)
    dst = torch.tensor([[0.0, 1.0], [1.0, 1.0], [2.0, 1.0], [3.0, 1.0]])
    top, scores = chunked_top_k(Broken(), src, dst, 4, none)
    assert not _finite({"top_dst": top, "top_scores": scores, "counts": fillable(none, 2, 4, 4)})
    top, scores = chunked_top_k(Dot(), src, dst[:3], 4, none)
    assert (top[:, 3] == NO_SLOT).all() and (scores[:, 3] == float("-inf")).all()
    assert _finite({"top_dst": top, "top_scores": scores, "counts": fillable(none, 2, 3, 4)})  # unfilled: no fault
