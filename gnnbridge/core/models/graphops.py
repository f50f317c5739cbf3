"""Small graph computations both backends must do identically, kept here once.

* :func:`layer_bounds`: which prefix of a hop-ordered sample each layer reads and writes
  (:func:`hetero_layer_bounds`: per node and edge type).
* :func:`layer_dims`: the layer widths of the built-in node models on every backend.
* :func:`gcn_edge_weights`: GCN normalisation from *full-graph* degrees. The libraries' own
  GCN layers normalise by degrees counted inside the batch, so the same node gets different
  weights depending on batch size, rank count and library. Here every edge gets
  ``1/sqrt((deg_u+1)(deg_v+1))`` (self-loop included), scaled by ``deg_v / sampled_v`` so a
  sampled neighbourhood is an unbiased estimate of the full one; with all neighbours the scale
  is 1 and the result is exact full-graph GCN, whatever the batch.
"""

from __future__ import annotations

import torch


def layer_bounds(num_sampled_nodes: list[int], num_sampled_edges: list[int], layers: int) -> list[tuple[int, int, int]]:
    """``(n_src, n_dst, n_edges)`` for each layer of a hop-ordered sample (input layer first).

    Layer i of L computes the nodes within L-i-1 hops of the seeds from those within L-i hops,
    over the edges sampled at hops 1..L-i. Samplers emit nodes and edges hop by hop, so each
    of these is a prefix.
    """
    nodes = torch.tensor(num_sampled_nodes).cumsum(0).tolist()
    edges = torch.tensor(num_sampled_edges).cumsum(0).tolist()
    return [(nodes[layers - i], nodes[layers - i - 1], edges[layers - i - 1]) for i in range(layers)]


def hetero_layer_bounds(
    num_sampled_nodes: dict[str, list[int]], num_sampled_edges: dict[tuple, list[int]], layers: int
) -> list[tuple[dict[str, int], dict[str, int], dict[tuple, int]]]:
    """:func:`layer_bounds` per type: ``(n_src, n_dst, n_edges)`` dicts for each layer of a
    hop-ordered heterogeneous sample (input layer first), so that each layer computes only the
    nodes the next one reads, as DGL's blocks do (the output layer: the seeds alone)."""
    nodes = {t: torch.tensor(n).cumsum(0).tolist() for t, n in num_sampled_nodes.items()}
    edges = {et: [0, *torch.tensor(n, dtype=torch.int64).cumsum(0).tolist()] for et, n in num_sampled_edges.items()}
    return [
        (
            {t: n[layers - i] for t, n in nodes.items()},
            {t: n[layers - i - 1] for t, n in nodes.items()},
            {et: e[layers - i] for et, e in edges.items()},
        )
        for i in range(layers)
    ]


def gcn_edge_weights(
    in_degree: torch.Tensor, src_ids: torch.Tensor, dst_ids: torch.Tensor, row: torch.Tensor, col: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights for the sampled edges ``row -> col`` and for one self-loop per dst node.

    ``src_ids`` / ``dst_ids`` are the global ids of the layer's src / dst nodes (dst first among
    src), ``row`` / ``col`` local edge endpoints, ``in_degree`` the full graph's in-degrees.
    """
    deg = in_degree.to(src_ids.device, torch.float32)
    d_src = deg[src_ids] + 1
    d_dst = deg[dst_ids] + 1
    sampled = torch.bincount(col, minlength=dst_ids.numel()).to(torch.float32)
    scale = deg[dst_ids] / sampled.clamp(min=1)
    edge_w = (d_src[row] * d_dst[col]).rsqrt() * scale[col]
    return edge_w, d_dst.reciprocal()


def layer_dims(layers: int, hidden: int, in_dim: int, out_dim: int, heads: int = 1) -> list[tuple[int, int, int]]:
    """``(input width, per-head output width, heads)`` of each layer of a ``layers``-deep GNN of
    width ``hidden``: hidden layers split their width over ``heads`` (GAT), the last maps to
    ``out_dim`` with one head. Both backends build exactly these shapes, so weights port."""
    dims = []
    for i in range(layers):
        last = i == layers - 1
        h = 1 if last else heads
        dims.append((in_dim if i == 0 else hidden, out_dim if last else hidden // h, h))
    return dims


def attention_heads(spec) -> int:
    """GAT's heads for a :class:`ModelSpec`, checked: each hidden layer splits its width over them."""
    from gnnbridge.core.errors import ConfigError

    if spec.layers > 1 and spec.hidden % spec.heads:
        raise ConfigError(
            f"model.hidden={spec.hidden} is not divisible by model.heads={spec.heads}; GAT splits "
            "the hidden width over its heads."
        )
    return spec.heads
