"""DGL backend: a CSC ``DGLGraph`` over the shared topology, DGL layers on blocks, DGL's own
``NeighborSampler`` (or the core sampler, converted to blocks)."""

from __future__ import annotations

import importlib.metadata
from typing import Any

import torch

from gnnbridge.backends.dgl.blocks import EDGE_FEATURES, csc_block
from gnnbridge.backends.dgl.compat import compat_note, import_dgl
from gnnbridge.core.config import SamplerKind, Task
from gnnbridge.core.contracts.interfaces import Backend, GraphStore, Sampler
from gnnbridge.core.errors import BackendUnavailableError
from gnnbridge.core.models.graphops import layer_bounds
from gnnbridge.core.records.batches import SampledSubgraph
from gnnbridge.core.records.collection import GraphCollection, PackedGraphs
from gnnbridge.core.records.csc import dst_offsets
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.sampling.adapters import CollectionStore, CorePacker, CoreSampler
from gnnbridge.core.storage.folder import check_mapped_csc


class DglGraphStore(GraphStore):
    """A ``DGLGraph`` built from the shared CSC arrays (DGL wraps them through DLPack, no copy).

    No edge-id array: an empty one tells DGL that a CSC position is the edge id, as in the core
    records, instead of a per-rank ``arange(E)`` (0.9 GB at Reddit scale, in every rank)."""

    def __init__(self, data: GraphData):
        super().__init__(data)
        dgl = import_dgl()
        no_eids = torch.empty(0, dtype=torch.int64)
        check_mapped_csc(data.indptr, data.indices, data.num_nodes)  # DGL trusts them (a bad offset aborts)
        self._native = dgl.graph(("csc", (data.indptr, data.indices, no_eids)), num_nodes=data.num_nodes)

    @property
    def native(self):
        return self._native


class DglBackend(Backend):
    name = "dgl"
    description = "Deep Graph Library (dgl)"
    TASKS = (Task.NODE, Task.GRAPH, Task.LINK, Task.EDGE)

    def availability(self) -> str | None:
        try:
            import_dgl()
        except ImportError as exc:
            return str(exc)
        return None

    def rank_modules(self) -> tuple[str, ...]:
        return ("gnnbridge.backends.dgl.compat:import_dgl",)  # a plain ``import dgl`` may fail here

    def versions(self) -> dict[str, str]:
        out = {}
        for dist in ("dgl", "torchdata"):
            try:
                out[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                pass
        note = compat_note()
        if note:
            out["note"] = note
        return out

    def native_parts(self) -> dict[str, str | None]:
        parts: dict[str, str | None] = {"libdgl (sampling, message passing)": None}
        if torch.cuda.is_available():
            try:
                self.check_device(torch.device("cuda", 0))
                parts["CUDA build"] = None
            except BackendUnavailableError as exc:
                parts["CUDA build"] = str(exc)
        return parts

    def check_device(self, device: torch.device) -> None:
        if device.type != "cuda":
            return
        dgl = import_dgl()
        try:
            dgl.graph(([0], [0])).to(device)
        except Exception:
            raise BackendUnavailableError(
                "The installed DGL is a CPU build and cannot compute on CUDA; use --device cpu, or "
                "install a CUDA build of DGL from DGL's wheel index."
            ) from None

    def graph_store(self, data: GraphData) -> GraphStore:
        return DglGraphStore(data)

    def collection_store(self, data: GraphCollection) -> GraphStore:
        from gnnbridge.backends.dgl.graphs import GraphViews

        return CollectionStore(data, GraphViews)

    def collection_sampler(self, store: GraphStore, kind: SamplerKind) -> Sampler:
        if kind is SamplerKind.CORE:
            return CorePacker(store, self.from_packed)
        from gnnbridge.backends.dgl.graphs import DglGraphLoader

        return DglGraphLoader(store, self.from_packed)

    def from_packed(self, packed: PackedGraphs) -> Any:
        dgl = import_dgl()
        graph = dgl.graph((packed.edge_index[0], packed.edge_index[1]), num_nodes=packed.node.numel())
        graph.set_batch_num_nodes(packed.num_nodes)
        graph.set_batch_num_edges(packed.num_edges)
        graph.ndata[dgl.NID] = packed.node
        if packed.edge_attr is not None:
            graph.edata[EDGE_FEATURES] = packed.edge_attr
        return graph

    def sampler(self, store: GraphStore, fanouts: list[int], kind: SamplerKind) -> Sampler:
        if kind is SamplerKind.CORE:
            return CoreSampler(store, fanouts, self.from_sampled)
        from gnnbridge.backends.dgl.sampler import DglNeighborSampler

        return DglNeighborSampler(store, fanouts)

    def adopt_model(self, model):
        """A user's DGL model instance (see :mod:`gnnbridge.backends.dgl.user`)."""
        from gnnbridge.backends.dgl.user import adopt

        return adopt(model)

    def adopt_sampler(self, sampler: Any, store: GraphStore, fanouts: list[int]) -> Sampler | None:
        """A plugin's ``dgl.dataloading.BlockSampler``, driven like DGL's own."""
        dgl = import_dgl()
        if not isinstance(sampler, dgl.dataloading.BlockSampler):
            return None
        from gnnbridge.backends.dgl.sampler import DglNeighborSampler

        return DglNeighborSampler(store, fanouts, sampler)

    def from_sampled(self, sub: SampledSubgraph) -> Any:
        """Blocks (input layer first) from a core sample, hop-trimmed like the PyG layers.

        Each block carries its nodes' global ids (``dgl.NID``), as DGL's own blocks do.
        """
        dgl = import_dgl()
        blocks = []
        # Core's edges come in destination order: hand DGL the CSC it aggregates with, instead
        # of an edge list it would sort into one (a plugin sampler's unsorted edges still go as COO).
        ptr = dst_offsets(sub.col, sum(sub.num_sampled_nodes[:-1]))
        eids = torch.arange(sub.row.numel(), device=sub.row.device)  # one for every layer's prefix
        for n_src, n_dst, n_edges in layer_bounds(
            sub.num_sampled_nodes, sub.num_sampled_edges, len(sub.num_sampled_edges)
        ):
            if ptr is not None:
                block = csc_block(ptr[: n_dst + 1], sub.row[:n_edges], n_src, n_dst, eids[:n_edges])
            else:
                block = dgl.create_block(
                    (sub.row[:n_edges], sub.col[:n_edges]),
                    num_src_nodes=n_src,
                    num_dst_nodes=n_dst,
                    device=sub.row.device,
                )
            block.srcdata[dgl.NID] = sub.node[:n_src]
            block.dstdata[dgl.NID] = sub.node[:n_dst]
            if sub.edge_attr is not None:  # the block's edges are the sample's first n_edges, in order
                block.edata[EDGE_FEATURES] = sub.edge_attr[:n_edges]
            blocks.append(block)
        return blocks

    def hetero_sampler(self, core: Any, kind: SamplerKind) -> Sampler:
        from gnnbridge.backends.dgl.hetero import DglHeteroSampler

        return DglHeteroSampler(core)

    def hetero_sampler_unavailable(self, kind: SamplerKind) -> str | None:
        return None

    def from_hetero_sampled(self, sub) -> Any:
        from gnnbridge.backends.dgl.hetero import to_blocks

        return to_blocks(sub)

    def graph_to(self, graph: Any, device: torch.device) -> Any:
        if device.type == "cpu":
            return graph
        if isinstance(graph, list):  # blocks of a sampled node batch
            return [block.to(device) for block in graph]
        return graph.to(device)  # a batched graph of a graph task
