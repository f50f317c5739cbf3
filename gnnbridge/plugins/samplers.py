"""Registers the core neighbour sampler (``sampler.kind=core``) through the public hook, for every
backend: it is the example of a backend-neutral sampler, one whose ``sample(seeds, generator)``
returns a core ``SampledSubgraph`` that each backend converts into its own batch."""

from __future__ import annotations

from gnnbridge.core.contracts.hookspecs import hookimpl
from gnnbridge.core.sampling.neighbors import NeighborSampler


def build_core(store, fanouts):
    return NeighborSampler(store.data.indptr, store.data.indices, fanouts)


@hookimpl
def register_samplers(register):
    register("core", build_core, description="gnnbridge's vectorised uniform neighbour sampler (torch; CPU or CUDA)")
