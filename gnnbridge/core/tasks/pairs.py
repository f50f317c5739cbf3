"""Pair arithmetic on ``[2, E]`` edge arrays: distinct pairs, where pairs sit in another
array, and checking held-out pairs (vectorised with one int64 key per pair, far faster than
``torch.unique(dim=1)`` on millions of edges)."""

from __future__ import annotations

import torch

from gnnbridge.core.errors import DataError
from gnnbridge.core.records.data import check_ids, check_tensor
from gnnbridge.core.records.hetero import EdgeType, pair_keys


def distinct_pairs(edges: torch.Tensor, n_dst: int) -> torch.Tensor:
    """The distinct (src, dst) pairs of ``edges`` (by one integer key each: far faster than
    ``torch.unique(dim=1)`` on millions of edges)."""
    keys = torch.unique(pair_keys(edges, n_dst))
    return torch.stack([keys // n_dst, keys % n_dst])


def find_pairs(edges: torch.Tensor, wanted: torch.Tensor, n_dst: int) -> torch.Tensor:
    """For each pair of ``wanted``, its position in ``edges``, or -1 where ``edges`` lacks it."""
    keys = pair_keys(edges, n_dst)
    order = torch.argsort(keys)
    want = pair_keys(wanted, n_dst)
    pos = torch.searchsorted(keys[order], want).clamp(max=max(0, keys.numel() - 1))
    found = order[pos] if keys.numel() else torch.full_like(want, -1)
    return torch.where(keys[found] == want, found, -1) if keys.numel() else found


def mirror_ids(edges: torch.Tensor, mirrored: torch.Tensor, n_src: int) -> torch.Tensor:
    """For each edge (s, d) of ``edges``, the position of (d, s) in ``mirrored`` (which holds
    every one of them: it was built by flipping ``edges``)."""
    keys = mirrored[0] * n_src + mirrored[1]
    order = torch.argsort(keys)
    return order[torch.searchsorted(keys[order], edges[1] * n_src + edges[0])]


def check_pairs(name: str, pairs: torch.Tensor, target: EdgeType, num_nodes: dict) -> None:
    """``pairs`` is an int64 [2, E] array of ids in range for ``target``'s source and destination types."""
    check_tensor(name, pairs, torch.int64, ndim=2)
    if pairs.shape[0] != 2:
        raise DataError(f"{name} has shape {list(pairs.shape)}; expected [2, E].")
    check_ids(f"{name} source", pairs[0], num_nodes[target[0]], unit=f"'{target[0]}' node")
    check_ids(f"{name} destination", pairs[1], num_nodes[target[2]], unit=f"'{target[2]}' node")
