"""The contracts a backend implements. Core drives them; it never names a library.

A backend turns neutral records into its library's native objects and back:

    GraphData --graph_store--> GraphStore (native graph view, no copy where possible)
    GraphStore --sampler-----> Sampler    (seed batches in, MiniBatch with a native graph out)

and, for graph classification, the same two over a collection of small graphs:

    GraphCollection --collection_store--> GraphStore
    GraphStore --collection_sampler-----> Sampler (graph-id batches in, batched graphs out)

Models are not a backend's: they register through the ``register_models`` hook, each for the
backends it is written for (:mod:`gnnbridge.core.models.build`), and so do further samplers. A
backend's plugin registers its library's models beside the backend itself.

Core owns everything around them: which seeds each rank gets (equal batch counts), feature
gathering and device transfer (so each can be timed on its own), the optimizer step, metric
reduction, layer-wise inference and outputs. A backend stays a thin adapter, and a
third-party backend only has to fill in these methods (the conformance suite in
:mod:`gnnbridge.testing.conformance` checks it).

Libraries are imported lazily inside methods, so a backend whose library is missing still
registers and can say why in ``gnnbridge backends``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from gnnbridge.core.config import ModelSpec, SamplerKind, Task
from gnnbridge.core.errors import BackendUnavailableError
from gnnbridge.core.records.batches import MiniBatch, SampledSubgraph
from gnnbridge.core.records.collection import GraphCollection, PackedGraphs
from gnnbridge.core.records.data import GraphData


class GraphStore(ABC):
    """A backend's native view of a :class:`GraphData` (shares its tensors where possible)."""

    def __init__(self, data: GraphData):
        self.data = data

    @property
    @abstractmethod
    def native(self) -> Any:
        """The library object (``torch_geometric.data.Data``, ``dgl.DGLGraph`` ...)."""


class Sampler(ABC):
    """Turns lists of seed batches (chosen by core) into :class:`MiniBatch` objects.

    Core decides the batches so that every rank runs the same number of steps; a sampler only
    decides neighbours. ``fanouts[i]`` is the count at hop ``i + 1`` from the seeds.
    """

    def __init__(self, store: GraphStore, fanouts: Iterable[int] = ()):
        self.store = store
        self.fanouts = list(fanouts)

    @abstractmethod
    def reseed(self, seed: int, epoch: int, rank: int) -> None:
        """Make the next batches a function of (seed, epoch, rank) alone."""

    @abstractmethod
    def loader(self, batches: list[torch.Tensor]) -> Iterable[MiniBatch]:
        """Yield one :class:`MiniBatch` per seed tensor in ``batches``, in order."""


class GNNModel(nn.Module, ABC):
    """A node-level GNN built from a :class:`ModelSpec`.

    ``forward(graph, x)`` returns logits for the seeds of a :class:`MiniBatch` (``graph`` and
    ``x = features[input_nodes]``). ``layer_forward`` runs a single layer on a one-hop graph
    and powers core's exact layer-wise inference. ``bind`` hands the model the full graph's
    in-degrees (GCN normalises by them; see :mod:`gnnbridge.core.models.graphops`).

    Subclasses list their layers in ``layers`` and name each layer's parameters in
    ``NEUTRAL_NAMES[arch]`` (neutral name -> the layer's own parameter name), so that
    ``neutral_parameters`` names every parameter the same way on all backends, in the same
    layout, and weights can be compared and ported between them. ``NEUTRAL_INIT[arch]`` (neutral
    name -> rule of :mod:`gnnbridge.core.models.init`) makes every backend start ``arch`` from
    the same weights for one seed; an architecture it does not list keeps its library's own
    initialisation.
    """

    spec: ModelSpec
    NEUTRAL_NAMES: dict[str, dict[str, str]] = {}
    NEUTRAL_INIT: dict[str, dict[str, Callable[[torch.Tensor, torch.Generator], None]]] = {}
    # True: ``forward`` and ``layer_forward`` also take an :class:`IndexedRows` as ``x`` (the
    # feature table and the batch's global ids, ungathered) and core stops gathering for them.
    reads_indexed_rows: bool = False

    @abstractmethod
    def forward(self, graph: Any, x: torch.Tensor) -> torch.Tensor: ...

    @abstractmethod
    def layer_forward(self, index: int, graph: Any, x: torch.Tensor) -> torch.Tensor:
        """Output of layer ``index`` (activation and dropout included) for the graph's dst nodes."""

    @abstractmethod
    def _layer_module(self, index: int) -> nn.Module:
        """The module whose parameters ``NEUTRAL_NAMES`` names for layer ``index``."""

    def bind(self, data: GraphData) -> GNNModel:
        # A plain attribute, not a buffer: DDP would broadcast an N-sized buffer every step.
        self.in_degree = data.indptr.diff()
        return self

    def degrees(self) -> torch.Tensor:
        degree = getattr(self, "in_degree", None)
        if degree is None:
            raise RuntimeError("GCN needs the graph's degrees: call model.bind(data) before the forward pass")
        return degree

    def activate(self, index: int, h: torch.Tensor) -> torch.Tensor:
        """ReLU and dropout between layers; the last layer's logits are left alone."""
        if index == self.spec.layers - 1:
            return h
        return torch.nn.functional.dropout(torch.relu(h), p=self.spec.dropout, training=self.training)

    def neutral_parameters(self) -> dict[str, torch.Tensor]:
        """``{neutral name: parameter}``, e.g. ``layers.0.neigh.weight`` [out, in]."""
        names = self.NEUTRAL_NAMES[self.spec.arch]
        out = {}
        for i in range(self.spec.layers):
            params = dict(self._layer_module(i).named_parameters())
            for neutral, native in names.items():
                if native in params:  # (GAT's edge parameters exist where the graph has edge features)
                    out[f"layers.{i}.{neutral}"] = params[native]
        return out

    def init_rules(self) -> dict[str, Callable[[torch.Tensor, torch.Generator], None]] | None:
        """``{neutral name: rule}`` of every parameter (see :mod:`gnnbridge.core.models.init`), or
        None when ``NEUTRAL_INIT`` has no rules for this architecture."""
        rules = self.NEUTRAL_INIT.get(self.spec.arch)
        if rules is None:
            return None
        return {f"layers.{i}.{name}": rule for i in range(self.spec.layers) for name, rule in rules.items()}

    @property
    def num_layers(self) -> int:
        return self.spec.layers


class Backend(ABC):
    """A GNN library adapter, registered through the ``register_backends`` hook."""

    name: str = ""
    description: str = ""

    # -- availability ------------------------------------------------------------------

    @abstractmethod
    def availability(self) -> str | None:
        """``None`` when the backend can run here, else the one-line reason (and the fix)."""

    def is_available(self) -> bool:
        return self.availability() is None

    @abstractmethod
    def versions(self) -> dict[str, str]:
        """Versions of the libraries this backend runs on (only those importable)."""

    def check_device(self, device: torch.device) -> None:
        """Raise :class:`BackendUnavailableError` when the backend cannot compute on ``device``
        (every device by default: a backend overrides this only to refuse one)."""
        return None

    def native_parts(self) -> dict[str, str | None]:
        """The library's optional native parts for ``gnnbridge doctor``: ``{part: None}`` where
        it is there, ``{part: what its absence costs and the fix}`` where it is not."""
        return {}

    def rank_modules(self) -> tuple[str, ...]:
        """Modules every rank of this backend imports (``module``, or ``module:function`` to call
        one that imports the library as it must be imported): the launcher's fork server imports
        them once for all the ranks of a job instead of each rank on its own (none by default)."""
        return ()

    def require(self) -> Backend:
        reason = self.availability()
        if reason is not None:
            raise BackendUnavailableError(f"Backend '{self.name}' cannot run here: {reason}")
        return self

    # -- factories ------------------------------------------------------------------

    # The tasks this backend trains; graph tasks need the ``collection_*`` factories.
    TASKS: tuple[Task, ...] = (Task.NODE,)

    def tasks(self) -> tuple[Task, ...]:
        return tuple(self.TASKS)

    @abstractmethod
    def graph_store(self, data: GraphData) -> GraphStore: ...

    def sampler_unavailable(self, kind: SamplerKind) -> str | None:
        """Why a sampler of ``kind`` cannot run here (checked before any rank starts), or None."""
        return None

    @abstractmethod
    def sampler(self, store: GraphStore, fanouts: list[int], kind: SamplerKind) -> Sampler:
        """A sampler of ``kind``; AUTO picks the native one when it can run, else the core one."""

    def adopt_sampler(self, sampler: Any, store: GraphStore, fanouts: list[int]) -> Sampler | None:
        """A :class:`Sampler` around a plugin's library sampler (e.g. a DGL ``BlockSampler``), or
        None when ``sampler`` is not one this backend knows."""
        return None

    def adopt_model(self, model: torch.nn.Module) -> torch.nn.Module | None:
        """A user's model instance written in this library's idiom (PyG: ``forward(x,
        edge_index)``; DGL: ``forward(g, x)`` or ``forward(blocks, x)``), wrapped to take the
        backend's batches as gnnbridge's models do (``forward(graph, x)``, the seeds' rows out) and
        holding it as ``user_model``; None when ``model`` is not written in this idiom."""
        return None

    # -- graph collections (graph-level tasks) -----------------------------------------

    def collection_store(self, data: GraphCollection) -> GraphStore:
        raise BackendUnavailableError(f"Backend '{self.name}' does not support graph-level tasks.")

    def collection_sampler(self, store: GraphStore, kind: SamplerKind) -> Sampler:
        """Batches of whole graphs: the library's own graph loader for NATIVE and AUTO, core's
        packer (:class:`CorePacker`, converted by :meth:`from_packed`) for CORE."""
        raise BackendUnavailableError(f"Backend '{self.name}' does not support graph-level tasks.")

    def from_packed(self, packed: PackedGraphs) -> Any:
        """The native batched graph for a core :class:`PackedGraphs` batch."""
        raise BackendUnavailableError(f"Backend '{self.name}' does not support graph-level tasks.")

    # -- heterogeneous graphs (task node on typed nodes, and task link) -----------------

    def supports_hetero(self) -> bool:
        return type(self).from_hetero_sampled is not Backend.from_hetero_sampled

    def from_hetero_sampled(self, sub: Any) -> Any:
        """The native graph for a core ``HeteroSampledSubgraph`` (every node and edge type of it),
        trimmed per hop: layer ``i`` reads only the prefixes ``hetero_layer_bounds`` gives from the
        sample's ``num_sampled_nodes`` / ``num_sampled_edges`` (PyG: ``HeteroData`` with
        ``bounds``; DGL: one block per layer). The backend's heterogeneous models read it."""
        raise BackendUnavailableError(f"Backend '{self.name}' does not support heterogeneous graphs.")

    def hetero_sampler(self, core: Any, kind: SamplerKind) -> Sampler:
        """Training batches of a heterogeneous graph: ``core`` (core's typed sampler, already built)
        or, for NATIVE (and AUTO, where the library's runs), the library's own sampler, which must
        keep core's ``held_out_loader`` and ``pairs_loader`` for evaluation."""
        return core

    def hetero_sampler_unavailable(self, kind: SamplerKind) -> str | None:
        """Why heterogeneous batches of ``kind`` cannot come from this backend (None: they can);
        AUTO and CORE always come from core's heterogeneous sampler."""
        if kind is SamplerKind.NATIVE:
            return (
                f"sampler.kind=native: backend '{self.name}' has no library sampler for heterogeneous graphs "
                "wired in; use sampler.kind=core or auto"
            )
        return None

    # -- batches ------------------------------------------------------------------

    @abstractmethod
    def from_sampled(self, sub: SampledSubgraph) -> Any:
        """The native graph for a core :class:`SampledSubgraph` (used by core sampling and inference)."""

    @abstractmethod
    def graph_to(self, graph: Any, device: torch.device) -> Any:
        """Move a native batch graph to ``device``."""


class GraphClassifier(nn.Module, ABC):
    """A graph-level model: ``forward(graph, x)`` returns ``[num_graphs, num_classes]`` logits
    for a batched native graph, rows in the batch's graph order (``MiniBatch.seeds``)."""

    spec: ModelSpec

    @abstractmethod
    def forward(self, graph: Any, x: torch.Tensor) -> torch.Tensor: ...

    def bind(self, data: Any) -> GraphClassifier:
        """Nothing graph-wide to learn from a collection (kept for the trainer's one code path)."""
        return self

    def neutral_parameters(self) -> dict[str, torch.Tensor]:
        """Subclasses that keep every parameter in core-owned modules name them identically
        on every backend already."""
        return dict(self.named_parameters())
