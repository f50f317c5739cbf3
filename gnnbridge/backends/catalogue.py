"""The neutral model catalogue: the architectures every built-in backend builds, declared once.

An experiment names ``model.arch: sage`` and trains the same function on PyG or DGL, so the
names, the tasks each serves, whether it also takes heterogeneous data, and what ``gnnbridge
models`` says of it must be the same on both; only the builders and the names of the library's
own layers differ. Each backend's ``plugin`` module registers the catalogue with its builders
through :func:`register_neutral`, exactly as a third-party backend may. It lives beside the
backends, not in core: core lists no architecture.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gnnbridge.core.models import init
from gnnbridge.core.models.gine import GINE_INIT
from gnnbridge.core.models.hetero import HeteroSAGE
from gnnbridge.core.models.init import Rule


@dataclass(frozen=True)
class Architecture:
    """One neutral architecture; ``description`` may name the library's layers as ``{gcn}`` (its
    GCN layer) and ``{hetero}`` (its relation-wise wrapper)."""

    name: str
    tasks: tuple[str, ...]
    description: str
    heterogeneous: bool = False  # the builder also takes heterogeneous data (and so can train task=link)
    # How each layer of a homogeneous node model starts, by neutral parameter name (the rules of
    # gnnbridge.core.models.init), the same on every backend; empty: the model's core classes
    # name their rules themselves (GIN, the heterogeneous models).
    init: Mapping[str, Rule] = field(default_factory=dict)


NEUTRAL = (
    Architecture(
        "sage",
        ("node", "link", "edge"),
        "GraphSAGE, mean aggregation (SAGEConv; {hetero} on heterogeneous graphs)",
        heterogeneous=True,
        init=HeteroSAGE.SAGE_INIT,  # one SAGEConv initialisation, homogeneous or not
    ),
    Architecture(
        "gcn",
        ("node",),
        "GCN normalised by full-graph degrees ({gcn})",
        init={"weight": init.glorot, "bias": init.zeros},  # Kipf & Welling's, PyG's GCNConv
    ),
    Architecture(
        "gat",
        ("node",),
        "GAT, model.heads heads (GATConv; reads edge features where the graph has them)",
        # Veličković et al.'s and PyG's GATConv: Glorot for the map and each head's attention vectors
        init={
            "weight": init.glorot,
            "att_src": init.glorot,
            "att_dst": init.glorot,
            "bias": init.zeros,
            "edge.weight": init.glorot,  # with edge features: their map and attention vector (PyG's edge_dim)
            "att_edge": init.glorot,
        },
    ),
    Architecture("gin", ("graph",), "GIN with core-held MLPs and sum/mean readout"),
    Architecture(
        "gine",
        ("node", "graph"),
        "GINE: GIN with edge features (GINEConv, core-held edge maps and MLPs; graphs: GIN's readout)",
        init=GINE_INIT,
    ),
    Architecture(
        "rgcn",
        ("node", "link", "edge"),
        "R-GCN, per-relation mean, options num_bases or num_blocks (core-held layers)",
        heterogeneous=True,
    ),
    Architecture(
        "hgt",
        ("node", "link", "edge"),
        "HGT, model.heads heads, one softmax per node (core-held layers)",
        heterogeneous=True,
    ),
)


# ``GNNModel.NEUTRAL_INIT`` of every backend's homogeneous node models.
LAYER_INIT = {arch.name: dict(arch.init) for arch in NEUTRAL if arch.init}


def register_neutral(
    register: Callable[..., None],
    backend: str,
    builders: Mapping[str, Callable],
    layers: Mapping[str, str] | None = None,
) -> None:
    """Register the architectures of :data:`NEUTRAL` that ``backend`` builds through a
    ``register_models`` hook's ``register``: ``builders`` maps each name to its builder (a
    backend may build a subset: ``model.arch`` naming one it lacks is then one line listing the
    backends that build it), ``layers`` gives the library's layer names the descriptions quote
    (``gcn``, ``hetero``; a generic name where none is given)."""
    unknown = sorted(set(builders) - {arch.name for arch in NEUTRAL})
    if unknown:
        raise ValueError(
            f"backend {backend!r} has builders for {', '.join(unknown)}, which the neutral catalogue does not "
            f"declare ({', '.join(arch.name for arch in NEUTRAL)}); register its own models with register() instead"
        )
    quoted = {"gcn": "GCN layer", "hetero": "relation-wise wrapper", **(layers or {})}
    for arch in (arch for arch in NEUTRAL if arch.name in builders):
        register(
            arch.name,
            {backend: builders[arch.name]},
            tasks=list(arch.tasks),
            heterogeneous=arch.heterogeneous,
            description=arch.description.format(**quoted),
        )
