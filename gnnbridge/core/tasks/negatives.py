"""Negative destinations for link prediction: the uniform draw both the training samplers and
the fixed evaluation negatives use (one code path, so the two libraries' paths cannot drift)."""

from __future__ import annotations

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
