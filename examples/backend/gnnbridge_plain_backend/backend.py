"""A backend whose "library" is torch itself: the native batch is :class:`Hops`, a plain record of
the sampled edges and per-hop counts, and sampling is core's (:class:`CoreSampler`).

Everything else a run needs (seed sharding, feature gathering, DDP, evaluation, checkpoints,
resume, port) is core's and comes for free.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from gnnbridge.core.config import SamplerKind, Task
from gnnbridge.core.contracts.interfaces import Backend, GraphStore, Sampler
from gnnbridge.core.errors import BackendUnavailableError
from gnnbridge.core.records.batches import SampledSubgraph
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.sampling.adapters import CoreSampler


@dataclass
class Hops:
    """A sampled batch: local edges ``row -> col`` ordered by hop, the rows' global ids (seeds first)."""

    row: torch.Tensor
    col: torch.Tensor
    n_id: torch.Tensor
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]
    batch_size: int


class PlainStore(GraphStore):
    """The graph as core holds it (CSC arrays): there is no other library object to build."""

    @property
    def native(self) -> GraphData:
        return self.data


class PlainBackend(Backend):
    name = "plain"
    description = "plain torch: core's sampler, index_add layers (an example third-party backend)"
    TASKS = (Task.NODE,)

    def availability(self) -> str | None:
        return None  # torch is all it needs, and gnnbridge already has it

    def versions(self) -> dict[str, str]:
        return {"torch": torch.__version__}

    def graph_store(self, data: GraphData) -> GraphStore:
        return PlainStore(data)

    def sampler_unavailable(self, kind: SamplerKind) -> str | None:
        if kind is SamplerKind.NATIVE:
            return "sampler.kind=native: backend 'plain' has no sampler of its own; use sampler.kind=core or auto"
        return None

    def sampler(self, store: GraphStore, fanouts: list[int], kind: SamplerKind) -> Sampler:
        reason = self.sampler_unavailable(kind)
        if reason is not None:
            raise BackendUnavailableError(reason)
        return CoreSampler(store, fanouts, self.from_sampled)

    def from_sampled(self, sub: SampledSubgraph) -> Hops:
        return Hops(sub.row, sub.col, sub.node, sub.num_sampled_nodes, sub.num_sampled_edges, sub.batch_size)

    def graph_to(self, graph: Hops, device: torch.device) -> Hops:
        return replace(
            graph,
            row=graph.row.to(device, non_blocking=True),
            col=graph.col.to(device, non_blocking=True),
            n_id=graph.n_id.to(device, non_blocking=True),
        )
