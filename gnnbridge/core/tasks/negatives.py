"""Negatives for link prediction: the uniform draw of destinations both the training samplers and
the fixed per-edge evaluation negatives use (one code path, so the two libraries' paths cannot
drift), and the shared negative pairs of a split (``link.protocol=shared``), which the in-memory
and the on-disk builds of a link task both draw here."""

from __future__ import annotations

from collections.abc import Callable

import torch


def negative_destinations(positive_dst: torch.Tensor, k: int, n_dst: int, gen: torch.Generator) -> torch.Tensor:
    """``[len(positive_dst), k]`` destinations drawn uniformly from the ``n_dst - 1`` nodes of
    ``[0, n_dst)`` other than each edge's own destination, in one draw (no redraw loop: a value
    at or past the positive moves up by one). ``k`` at least half of the candidates: drawn
    without repeats (``k = n_dst - 1`` is then every other destination once, an exact ranking);
    fewer: with repeats, as uniform sampling does. Needs ``k <= n_dst - 1`` (the callers refuse
    or clamp a larger ``k`` first)."""
    if k > n_dst - 1:
        raise ValueError(f"{k} negatives asked among {n_dst - 1} candidates")
    rows = positive_dst.numel()
    if 2 * k >= n_dst - 1:  # dense: a random order of the candidates per edge, its first k
        out = torch.argsort(torch.rand(rows, n_dst - 1, generator=gen), dim=1)[:, :k]
    else:
        out = torch.randint(0, n_dst - 1, (rows, k), generator=gen)
    return out + (out >= positive_dst.unsqueeze(1))


def shared_negative_pairs(
    count: int, n_src: int, n_dst: int, same_type: bool, is_edge: Callable, gen: torch.Generator
) -> torch.Tensor:
    """``[2, count]`` distinct (src, dst) pairs that are not edges, uniform over all such pairs:
    one split's negatives under the ``shared`` protocol, which every positive of the split is
    ranked against (OGB's ogbl-collab, -ppa, -ddi). ``is_edge(src, dst)`` says which drawn pairs
    are edges (any split's: a held-out positive must not come back as a negative); between nodes
    of one type a pair is distinct as an unordered pair and never a self-loop. Drawn in rounds
    from ``gen`` (pairs that are edges or repeats are dropped, the first ``count`` kept in draw
    order), so the in-memory and the on-disk builds, given the same ``is_edge``, draw the same
    pairs. Needs ``count`` within the pairs that are not edges (the callers refuse more first:
    :func:`shared_capacity`)."""
    src_kept, dst_kept = torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)
    while src_kept.numel() < count:
        draw = max(1024, 2 * (count - src_kept.numel()))
        src = torch.randint(0, n_src, (draw,), generator=gen)
        dst = torch.randint(0, n_dst, (draw,), generator=gen)
        keep = ~is_edge(src, dst) & ((src != dst) if same_type else True)
        src, dst = torch.cat([src_kept, src[keep]]), torch.cat([dst_kept, dst[keep]])
        lo, hi = (torch.minimum(src, dst), torch.maximum(src, dst)) if same_type else (src, dst)
        first = _first_occurrences(lo * n_dst + hi)
        src_kept, dst_kept = src[first][:count], dst[first][:count]
    return torch.stack([src_kept, dst_kept])


def shared_capacity(n_src: int, n_dst: int, same_type: bool, edges: int) -> int:
    """How many shared negatives a split may ask for: the pairs between the two node types
    (unordered and no self-loop between nodes of one type) less ``edges``, the number of distinct
    pairs that are edges (an upper bound will do: the answer is then a safe lower bound)."""
    pairs = n_src * (n_src - 1) // 2 if same_type else n_src * n_dst
    return max(0, pairs - edges)


def _first_occurrences(keys: torch.Tensor) -> torch.Tensor:
    """Positions of each key's first occurrence, in ascending order (draw order kept)."""
    _, inverse = torch.unique(keys, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1 if keys.numel() else 0,), keys.numel(), dtype=torch.int64)
    first.scatter_reduce_(0, inverse, torch.arange(keys.numel()), reduce="amin")
    return first.sort().values
