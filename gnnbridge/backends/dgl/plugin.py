"""Registers the DGL backend and its models through the public hooks, exactly as a third-party
package would: the neutral sage, gcn, gat (node tasks) and gin (graph tasks)."""

from gnnbridge.core.contracts.hookspecs import hookimpl

BACKEND = "dgl"


@hookimpl
def register_backends(register):
    from gnnbridge.backends.dgl.backend import DglBackend

    register(DglBackend())


def build_sage(in_dim, out_dim, spec, data, decoder="dot"):
    """The homogeneous models; sage also builds heterogeneous GraphSAGE for heterogeneous data
    (and so for link prediction, which always runs on a heterogeneous view of the graph)."""
    from gnnbridge.core.records.hetero import HeteroGraphData

    if isinstance(data, HeteroGraphData):
        from gnnbridge.backends.dgl.hetero import DglHeteroSAGE

        return DglHeteroSAGE(spec, data, out_dim, decoder)
    return build_gnn(in_dim, out_dim, spec)


def build_gnn(in_dim, out_dim, spec):
    from gnnbridge.backends.dgl.models import DglGNN

    return DglGNN(spec, in_dim, out_dim)


def build_gin(in_dim, out_dim, spec):
    from gnnbridge.backends.dgl.graphs import DglGIN

    return DglGIN(spec, in_dim, out_dim)


@hookimpl
def register_models(register):
    register(
        "sage",
        {BACKEND: build_sage},
        tasks=["node", "link"],
        heterogeneous=True,
        description="GraphSAGE, mean aggregation (SAGEConv; HeteroGraphConv on heterogeneous graphs)",
    )
    register(
        "gcn", {BACKEND: build_gnn}, tasks=["node"], description="GCN normalised by full-graph degrees (GraphConv)"
    )
    register("gat", {BACKEND: build_gnn}, tasks=["node"], description="GAT, model.heads heads (GATConv)")
    register("gin", {BACKEND: build_gin}, tasks=["graph"], description="GIN with core-held MLPs and sum/mean readout")
