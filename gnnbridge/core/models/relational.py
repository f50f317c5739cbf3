"""Heterogeneous models whose layers are written once, here, with torch: R-GCN
(:mod:`~gnnbridge.core.models.rgcn`) and HGT (:mod:`~gnnbridge.core.models.hgt`). A backend
supplies only what reads its native batch: the node counts of a layer, a relation's edges, the
mean of a relation's messages per destination, and a softmax over every edge into a
destination. So one state dict (every parameter a core module's, named alike on both backends)
is one function on PyG and on DGL.

Why not the libraries' own layers:

* R-GCN: PyG's ``RGCNConv`` and DGL's ``RelGraphConv`` both work on a homogeneous graph with an
  edge type per edge, so every layer would first be re-laid out (all types' nodes in one table,
  destinations first, as DGL's self-loop reads ``feat[:num_dst_nodes]``). DGL's layer sums
  messages and normalises only by an edge weight the caller computes. PyG's normalises per
  relation, except on its ``segment_matmul`` path (taken with pyg-lib installed, no basis
  decomposition, when its size heuristic says so), where ``aggr='mean'`` averages over all
  relations at once: a different function on some machines. Their block-diagonal weights have
  different shapes (PyG ``[R, B, in/B, out/B]``, DGL ``[R, B*in/B*out/B]``), which a neutral name
  cannot map, and DGL's multiplies a weight block per edge (``[E, B, in/B, out/B]`` in memory).
* HGT: PyG's ``HGTConv`` passes the aggregate through GELU before the output projection and has
  no dropout; DGL's ``HGTConv`` has neither that GELU nor PyG's parameter layout (``TypedLinear``
  over a homogeneous graph), adds dropout and an optional layer norm. Not the same function.

Conventions kept from heterogeneous GraphSAGE (:class:`~gnnbridge.core.models.hetero.HeteroModel`):
a node type no relation points into keeps its state; every relation takes part in every batch,
edges or not, so a node's output depends on its own neighbourhood alone (exact layer-wise
inference); a destination with no incoming edge gets its root / skip term only.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import torch

from gnnbridge.core.errors import ConfigError
from gnnbridge.core.models.hetero import HeteroModel


class RelationalModel(HeteroModel):
    """A heterogeneous model over core-held layers; the backend subclass reads its batch."""

    @abstractmethod
    def sizes(self, graph: Any, block: int) -> tuple[dict[str, int], dict[str, int]]:
        """``(n_src, n_dst)`` per node type of the native graph's layer ``block``."""

    @abstractmethod
    def edges(self, graph: Any, block: int, edge_type: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        """The relation's edges in layer ``block`` as local (source, destination) ids, in the
        order :meth:`attend` takes per-edge values in."""

    @abstractmethod
    def mean(self, graph: Any, block: int, edge_type: tuple, x: torch.Tensor, n_dst: int) -> torch.Tensor:
        """``[n_dst, width]``: each destination's mean of ``x`` (its source type's rows) over its
        edges of this relation; zero where it has none."""

    @abstractmethod
    def attend(
        self,
        graph: Any,
        block: int,
        scores: dict[tuple, torch.Tensor],
        values: dict[tuple, torch.Tensor],
        n_dst: dict[str, int],
    ) -> dict[str, torch.Tensor]:
        """``{destination type: [n_dst, heads, width]}``: per destination and head, the sum of
        ``values`` (``[E, heads, width]`` per relation) weighted by the softmax of ``scores``
        (``[E, heads]``) over every edge into it, whatever its relation; zero where it has none.
        Every destination type of ``scores`` is in the result."""

    def carry(self, block: int, graph: Any, node_type: str, h: torch.Tensor) -> torch.Tensor:
        return h[: self.sizes(graph, block)[1][node_type]]

    def inputs_of(self, graph: Any, block: int, h: dict[str, torch.Tensor]) -> tuple[dict, dict, dict, dict]:
        """``(x_src, x_dst, n_src, n_dst)``: each relation type's source and destination rows."""
        src, dst = self.sizes(graph, block)
        n_src = {s: src.get(s, 0) for s, _, _ in self.edge_types}
        n_dst = {d: dst.get(d, 0) for _, _, d in self.edge_types}
        return *self.layer_inputs(h, n_src, n_dst), n_src, n_dst


def heterogeneous_only(arch: str, data: Any) -> None:
    """One line when a heterogeneous-only model meets a homogeneous graph's node task (link
    tasks always run on a heterogeneous view of the graph, so they reach the model as one)."""
    if not hasattr(data, "feature_dims"):
        raise ConfigError(
            f"model.arch={arch} is a heterogeneous model: it trains heterogeneous datasets (e.g. mag-synthetic, "
            f"rec-synthetic) and task=link, but dataset '{getattr(data, 'name', 'given')}' is one homogeneous "
            "graph with task=node; use sage, gcn or gat there."
        )
