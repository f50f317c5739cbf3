"""The names a plugin imports, in one place: ``from gnnbridge.core.interfaces import Backend, ...``.

The contracts live in :mod:`gnnbridge.core.contracts`, the records in
:mod:`gnnbridge.core.records` and the reusable samplers in :mod:`gnnbridge.core.sampling`; this
module re-exports what a backend or model plugin builds on, so plugins do not depend on where
core keeps each piece. Nothing inside core imports it.
"""

from gnnbridge.core.config import DatasetConfig, ModelSpec, SamplerKind, Task
from gnnbridge.core.contracts.families import TaskFamily
from gnnbridge.core.contracts.interfaces import (
    Backend,
    GNNModel,
    GraphClassifier,
    GraphStore,
    Sampler,
)
from gnnbridge.core.contracts.loading import LoaderConfig
from gnnbridge.core.contracts.sources import DatasetSource
from gnnbridge.core.contracts.targets import Scores, Target
from gnnbridge.core.host import available_memory, format_bytes
from gnnbridge.core.inference.families import EdgeFamily, GraphFamily, LinkFamily, NodeFamily
from gnnbridge.core.plugins import downloads_allowed
from gnnbridge.core.records.batches import IndexedRows, MiniBatch, SampledSubgraph
from gnnbridge.core.records.collection import GraphCollection, PackedGraphs, pack
from gnnbridge.core.records.data import GraphData, random_split
from gnnbridge.core.records.hetero import HeteroGraphData, HeteroSource
from gnnbridge.core.records.reading import Reading
from gnnbridge.core.sampling.adapters import CollectionStore, CorePacker, CoreSampler, LibraryGraphLoader
from gnnbridge.core.sampling.hetero import HeteroSampledSubgraph, LinkMiniBatch
from gnnbridge.core.sampling.neighbors import ALL_NEIGHBORS, NeighborSampler
from gnnbridge.core.sampling.seeds import derived_seed, epoch_generator

__all__ = [
    "Backend",
    "CollectionStore",
    "CorePacker",
    "CoreSampler",
    "DatasetConfig",
    "DatasetSource",
    "GNNModel",
    "GraphClassifier",
    "GraphCollection",
    "GraphData",
    "GraphStore",
    "HeteroGraphData",
    "HeteroSampledSubgraph",
    "HeteroSource",
    "IndexedRows",
    "LinkMiniBatch",
    "LoaderConfig",
    "Reading",
    "LibraryGraphLoader",
    "MiniBatch",
    "ModelSpec",
    "PackedGraphs",
    "SampledSubgraph",
    "Sampler",
    "SamplerKind",
    "Scores",
    "Target",
    "Task",
    "TaskFamily",
    "NodeFamily",
    "GraphFamily",
    "LinkFamily",
    "EdgeFamily",
    "ALL_NEIGHBORS",
    "NeighborSampler",
    "derived_seed",
    "epoch_generator",
    "pack",
    "random_split",
    "available_memory",
    "format_bytes",
    "downloads_allowed",
]
