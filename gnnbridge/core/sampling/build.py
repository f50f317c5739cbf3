"""From ``sampler.kind`` to a :class:`Sampler`, and checks that name a plugin's sampler when it
hands the loop something the loop cannot trust.

``auto`` and ``native`` are the backend's own; every other kind comes from the
``register_samplers`` hook (``core`` included). A builder ``build(store, fanouts)`` may return:

* a full :class:`Sampler` (used as it is);
* a library sampler the backend adopts (:meth:`Backend.adopt_sampler`, e.g. a DGL ``BlockSampler``);
* anything with ``sample(seeds, generator) -> SampledSubgraph``, which works on every backend
  (core draws the generator from (seed, epoch, rank); the backend converts the subgraph).

A plugin's sampler is wrapped in :class:`CheckedSampler`: a batch whose seeds are not the ones
asked for, or whose node ids lie outside the graph, would train on the wrong labels or (in DGL,
which does not bounds-check) corrupt memory, so each is checked before it is used.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from gnnbridge.core.config import SamplerKind
from gnnbridge.core.contracts.interfaces import Backend, GraphStore, Sampler
from gnnbridge.core.errors import BackendUnavailableError, ConfigError
from gnnbridge.core.plugins import PluginError, blame, is_builtin, samplers
from gnnbridge.core.records.batches import MiniBatch, SampledSubgraph
from gnnbridge.core.records.hetero import HeteroGraphData
from gnnbridge.core.sampling.adapters import CoreSampler
from gnnbridge.core.sampling.distributed import (
    PartitionedHeteroSampler,
    PartitionedLinkSampler,
    PartitionedSampler,
    PartStore,
    exchange_for,
)
from gnnbridge.core.sampling.hetero import CoreHeteroSampler, HeteroStore, typed_fanouts

BACKEND_KINDS = (SamplerKind.AUTO.value, SamplerKind.NATIVE.value)


def check_kind(kind: str, backend: Backend) -> None:
    """Raise one line when ``kind`` names no sampler ``backend`` can use (before any rank starts)."""
    if kind not in BACKEND_KINDS:
        samplers.get(kind, backend.name)


def make_sampler(backend: Backend, store: GraphStore, fanouts: list[int], kind: str) -> Sampler:
    if kind in BACKEND_KINDS:
        return backend.sampler(store, fanouts, SamplerKind(kind))
    comp = samplers.get(kind, backend.name)
    origin = f"sampler {comp.origin}"
    with blame(origin, "construction"):
        made = comp.build(store, list(fanouts))
    trusted = is_builtin(comp.plugin)
    if isinstance(made, Sampler):
        sampler = made
    elif (adopted := backend.adopt_sampler(made, store, list(fanouts))) is not None:
        sampler = adopted
    elif callable(getattr(made, "sample", None)):
        impl = made if trusted else _CheckedSubgraphs(made, origin, store.data.num_nodes, len(fanouts))
        sampler = CoreSampler(store, list(fanouts), backend.from_sampled, impl)
    else:
        raise PluginError(
            f"{origin} built a {type(made).__name__}: not a Sampler, not a sampler backend "
            f"'{backend.name}' adopts, and without sample(seeds, generator)."
        )
    return sampler if trusted else CheckedSampler(sampler, origin, store.data.num_nodes)


def partitioned_sampler(parts, fanouts: list[int], edge_fanouts: dict | None = None, negatives: int = 1) -> Sampler:
    """The sampler of a machine's part of a partitioned graph (core's, across machines; see
    :mod:`gnnbridge.core.sampling.distributed`): library and plugin samplers read one machine's
    graph only."""
    kind = parts.config.sampler.kind
    if kind not in (SamplerKind.AUTO.value, SamplerKind.CORE.value):
        raise ConfigError(
            f"sampler.kind={kind}: a partitioned graph (dataset.partitions) is sampled across machines by core's "
            "sampler; use sampler.kind=auto or core."
        )
    data, exchange = parts.data, exchange_for(parts.ctx)
    if isinstance(data, HeteroGraphData):
        typed = typed_fanouts(data, fanouts, edge_fanouts)
        if data.scores_pairs:
            to_native = parts.backend.from_hetero_sampled
            return PartitionedLinkSampler(PartStore(data), typed, to_native, exchange, negatives)
        return PartitionedHeteroSampler(PartStore(data), typed, parts.backend.from_hetero_sampled, exchange)
    return PartitionedSampler(PartStore(data), fanouts, parts.backend.from_sampled, exchange)


def make_hetero_sampler(
    backend: Backend, data: HeteroGraphData, fanouts: list[int], edge_fanouts: dict, kind: str, negatives: int = 1
) -> Sampler:
    """Heterogeneous batches: core's typed sampler, converted by the backend, or the library's own
    where the backend has one (:meth:`Backend.hetero_sampler`; PyG's needs pyg-lib, see
    :mod:`gnnbridge.core.sampling.hetero`)."""
    check_hetero_kind(kind, backend)
    core = CoreHeteroSampler(
        HeteroStore(data), typed_fanouts(data, fanouts, edge_fanouts), backend.from_hetero_sampled, negatives
    )
    return core if kind == SamplerKind.CORE.value else backend.hetero_sampler(core, SamplerKind(kind))


def check_hetero_kind(kind: str, backend: Backend) -> None:
    if kind not in (*BACKEND_KINDS, SamplerKind.CORE.value):
        raise ConfigError(
            f"sampler.kind={kind!r}: plugin samplers sample homogeneous graphs; heterogeneous graphs "
            "and task=link use sampler.kind=auto or core."
        )
    reason = backend.hetero_sampler_unavailable(SamplerKind(kind))
    if reason is not None:
        raise BackendUnavailableError(f"Backend '{backend.name}': {reason}.")


class _CheckedSubgraphs:
    """A plugin's ``sample(seeds, generator)``, its output checked before a backend converts it."""

    def __init__(self, impl: Any, origin: str, num_nodes: int, hops: int):
        self.impl, self.origin, self.num_nodes, self.hops = impl, origin, num_nodes, hops

    def sample(self, seeds: torch.Tensor, generator: torch.Generator) -> SampledSubgraph:
        with blame(self.origin, "sample()"):
            sub = self.impl.sample(seeds, generator)
        if not isinstance(sub, SampledSubgraph):
            raise PluginError(
                f"{self.origin} returned a {type(sub).__name__} from sample(); expected a SampledSubgraph."
            )
        _check_layout(self.origin, sub, self.hops)
        _check_ids(self.origin, "node id", sub.node, self.num_nodes)
        _check_ids(self.origin, "local edge endpoint", torch.cat([sub.row, sub.col]), sub.node.numel())
        return sub


class CheckedSampler(Sampler):
    def __init__(self, inner: Sampler, origin: str, num_nodes: int):
        super().__init__(inner.store, inner.fanouts)
        self.inner, self.origin, self.num_nodes = inner, origin, num_nodes

    def reseed(self, seed: int, epoch: int, rank: int) -> None:
        with blame(self.origin, "reseed()"):
            self.inner.reseed(seed, epoch, rank)

    def loader(self, batches: list[torch.Tensor]) -> Iterable[MiniBatch]:
        with blame(self.origin, "loader()"):
            stream = iter(self.inner.loader(batches))
        for seeds in batches:
            with blame(self.origin, "loader()"):
                mb = next(stream, None)
            yield self._check(mb, seeds)

    def _check(self, mb: Any, seeds: torch.Tensor) -> MiniBatch:
        if not isinstance(mb, MiniBatch):
            got = "too few batches" if mb is None else f"a {type(mb).__name__}"
            raise PluginError(f"{self.origin} yielded {got}; it must yield one MiniBatch per seed tensor, in order.")
        if not torch.equal(mb.seeds.cpu(), seeds.cpu()):
            raise PluginError(
                f"{self.origin} yielded a batch whose seeds are not the {seeds.numel()} asked for (in "
                "order); labels would be read for the wrong nodes."
            )
        _check_ids(self.origin, "input node id", mb.input_nodes, self.num_nodes)
        return mb


def _check_layout(origin: str, sub: SampledSubgraph, hops: int) -> None:
    """Ids are 1-D int64 tensors and there is one hop per fanout: a backend indexes with them and
    trims per hop, and would fail far from the plugin (or silently compute something else)."""
    for field in ("node", "row", "col", "edge"):
        ids = getattr(sub, field)
        if not isinstance(ids, torch.Tensor) or ids.dtype != torch.long or ids.dim() != 1:
            got = (
                f"a {ids.dim()}-D {str(ids.dtype).replace('torch.', '')} tensor"
                if isinstance(ids, torch.Tensor)
                else f"a {type(ids).__name__}"
            )
            raise PluginError(
                f"{origin} returned SampledSubgraph.{field} as {got} from sample(); expected a 1-D "
                f"int64 tensor of ids (e.g. {field}.long())."
            )
    nodes, edges = list(sub.num_sampled_nodes), list(sub.num_sampled_edges)
    if len(nodes) != hops + 1 or len(edges) != hops:
        raise PluginError(
            f"{origin} returned num_sampled_nodes={nodes[:8]} and num_sampled_edges={edges[:8]} from "
            f"sample() for {hops} fanouts; expected {hops + 1} node counts (the seeds, then one per hop) "
            f"and {hops} edge counts (one per hop)."
        )


def _check_ids(origin: str, what: str, ids: torch.Tensor, bound: int) -> None:
    if ids.numel() == 0:
        return
    low, high = (int(v) for v in torch.aminmax(ids))
    if low < 0 or high >= bound:
        bad = low if low < 0 else high
        raise PluginError(f"{origin} returned {what} {bad}, outside [0, {bound}).")
