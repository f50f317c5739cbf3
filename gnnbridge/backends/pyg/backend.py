"""PyG backend: ``torch_geometric.data.Data`` views, PyG layers, PyG's neighbour sampler when
pyg-lib or torch-sparse is installed (the core sampler otherwise)."""

from __future__ import annotations

import importlib.metadata
from typing import Any

import torch

from gnnbridge.core.config import SamplerKind, Task
from gnnbridge.core.contracts.interfaces import Backend, GraphStore, Sampler
from gnnbridge.core.errors import BackendUnavailableError
from gnnbridge.core.records.batches import SampledSubgraph
from gnnbridge.core.records.collection import GraphCollection, PackedGraphs
from gnnbridge.core.records.csc import dst_offsets
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.sampling.adapters import CollectionStore, CorePacker, CoreSampler


class PygGraphStore(GraphStore):
    """A ``Data`` with the graph's ``edge_index`` and no features (core gathers those), built on
    first use: only PyG's own ``NeighborLoader`` reads it, and the record holds CSC only, so the
    COO list is 2 x E int64 per rank that the core sampler never needs."""

    def __init__(self, data: GraphData):
        super().__init__(data)
        self._native = None

    @property
    def native(self):
        if self._native is None:
            from torch_geometric.data import Data

            self._native = Data(edge_index=self.data.edge_index, num_nodes=self.data.num_nodes)
        return self._native


class PygBackend(Backend):
    name = "pyg"
    description = "PyTorch Geometric (torch_geometric)"
    TASKS = (Task.NODE, Task.GRAPH, Task.LINK, Task.EDGE)

    def availability(self) -> str | None:
        try:
            import torch_geometric  # noqa: F401
        except Exception as exc:  # ImportError, or a broken install raising anything else
            return f"torch_geometric cannot be imported ({exc}); install it with pip install 'gnnbridge[pyg]'."
        return None

    def rank_modules(self) -> tuple[str, ...]:
        return ("torch_geometric",)

    def versions(self) -> dict[str, str]:
        out = {}
        for dist in ("torch_geometric", "pyg_lib", "torch_sparse"):
            try:
                out[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                pass
        return out

    def native_parts(self) -> dict[str, str | None]:
        import torch_geometric.typing as pyg_typing

        fast = pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE
        return {
            "pyg-lib / torch-sparse (NeighborLoader)": None
            if fast
            else "not installed: sampler.kind=native is unavailable, the core sampler serves PyG "
            "(as fast, see docs/models-and-samplers.md)"
        }

    def sampler_unavailable(self, kind: SamplerKind) -> str | None:
        if kind is not SamplerKind.NATIVE:
            return None
        import torch_geometric.typing as pyg_typing

        if pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE:
            return None
        return (
            "sampler.kind=native: PyG's NeighborLoader needs pyg-lib or torch-sparse, and neither is "
            "installed; use sampler.kind=core or auto"
        )

    def adopt_model(self, model):
        """A user's PyG model instance (see :mod:`gnnbridge.backends.pyg.user`)."""
        from gnnbridge.backends.pyg.user import adopt

        return adopt(model)

    def graph_store(self, data: GraphData) -> GraphStore:
        return PygGraphStore(data)

    def collection_store(self, data: GraphCollection) -> GraphStore:
        from gnnbridge.backends.pyg.graphs import GraphViews

        return CollectionStore(data, GraphViews)

    def collection_sampler(self, store: GraphStore, kind: SamplerKind) -> Sampler:
        if kind is SamplerKind.CORE:
            return CorePacker(store, self.from_packed)
        from gnnbridge.backends.pyg.graphs import PygGraphLoader

        return PygGraphLoader(store, self.from_packed)

    def from_packed(self, packed: PackedGraphs) -> Any:
        from torch_geometric.data import Batch

        ptr = torch.cat([packed.num_nodes.new_zeros(1), packed.num_nodes.cumsum(0)])
        batch = torch.repeat_interleave(
            torch.arange(packed.num_nodes.numel()), packed.num_nodes, output_size=packed.node.numel()
        )
        return Batch(
            edge_index=packed.edge_index,
            batch=batch,
            ptr=ptr,
            n_id=packed.node,
            graph_id=packed.graph_ids,
            num_nodes=packed.node.numel(),
            **({"edge_attr": packed.edge_attr} if packed.edge_attr is not None else {}),
        )

    def sampler(self, store: GraphStore, fanouts: list[int], kind: SamplerKind) -> Sampler:
        if kind is SamplerKind.CORE or self.sampler_unavailable(SamplerKind.NATIVE) is not None:
            reason = self.sampler_unavailable(kind)
            if reason is not None:
                raise BackendUnavailableError(reason)
            return CoreSampler(store, fanouts, self.from_sampled)
        from gnnbridge.backends.pyg.sampler import PygNeighborLoaderSampler

        return PygNeighborLoaderSampler(store, fanouts)

    def from_sampled(self, sub: SampledSubgraph) -> Any:
        from torch_geometric.data import Data

        extra = {"edge_attr": sub.edge_attr} if sub.edge_attr is not None else {}
        return Data(
            edge_index=torch.stack([sub.row, sub.col]),
            **extra,
            n_id=sub.node,
            num_nodes=sub.node.numel(),
            num_sampled_nodes=sub.num_sampled_nodes,
            num_sampled_edges=sub.num_sampled_edges,
            batch_size=sub.batch_size,
            dst_ptr=dst_offsets(sub.col, sum(sub.num_sampled_nodes[:-1])),
        )

    def from_hetero_sampled(self, sub) -> Any:
        from gnnbridge.backends.pyg.hetero import to_hetero_data

        return to_hetero_data(sub)

    def hetero_sampler_unavailable(self, kind: SamplerKind) -> str | None:
        if kind is not SamplerKind.NATIVE:
            return None
        return (
            "sampler.kind=native: PyG's heterogeneous NeighborLoader and LinkNeighborLoader need pyg-lib or "
            "torch-sparse and are not wired into gnnbridge yet; use sampler.kind=core or auto (core's typed sampler)"
        )

    def graph_to(self, graph: Any, device: torch.device) -> Any:
        return graph.to(device, non_blocking=True)
