"""Registers the DGL backend and its models through the public hooks, exactly as a third-party
package would: the neutral catalogue (:mod:`gnnbridge.backends.catalogue`: sage, gcn, gat for
node tasks, gin for graph tasks, rgcn and hgt for heterogeneous graphs)."""

from gnnbridge.backends.catalogue import register_neutral
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
    return build_gnn(in_dim, out_dim, spec, data)


def build_rgcn(in_dim, out_dim, spec, data, decoder="dot", num_bases=None, num_blocks=None):
    """R-GCN (core's layers, :mod:`gnnbridge.core.models.rgcn`) for heterogeneous data."""
    from gnnbridge.backends.dgl.hetero import DglHeteroRGCN
    from gnnbridge.core.models.relational import heterogeneous_only

    heterogeneous_only("rgcn", data)
    return DglHeteroRGCN(spec, data, out_dim, decoder, num_bases, num_blocks)


def build_hgt(in_dim, out_dim, spec, data, decoder="dot"):
    """HGT (core's layers, :mod:`gnnbridge.core.models.hgt`) for heterogeneous data."""
    from gnnbridge.backends.dgl.hetero import DglHeteroHGT
    from gnnbridge.core.models.relational import heterogeneous_only

    heterogeneous_only("hgt", data)
    return DglHeteroHGT(spec, data, out_dim, decoder)


def build_gnn(in_dim, out_dim, spec, data=None):
    """GCN, or GAT (which reads the graph's edge features where it has some)."""
    from gnnbridge.backends.dgl.models import DglGNN

    features = getattr(data, "edge_attr", None) if spec.arch == "gat" else None
    return DglGNN(spec, in_dim, out_dim, int(features.shape[1]) if features is not None else 0)


def build_gine(in_dim, out_dim, spec, data):
    """GINE on nodes (sampled blocks) or, for a collection, on whole graphs."""
    from gnnbridge.backends.dgl.graphs import DglGINE
    from gnnbridge.backends.dgl.models import DglGNN
    from gnnbridge.core.models.gine import edge_dim
    from gnnbridge.core.records.collection import GraphCollection

    if isinstance(data, GraphCollection):
        return DglGINE(spec, in_dim, out_dim, edge_dim(data))
    return DglGNN(spec, in_dim, out_dim, edge_dim(data))


def build_gin(in_dim, out_dim, spec):
    from gnnbridge.backends.dgl.graphs import DglGIN

    return DglGIN(spec, in_dim, out_dim)


@hookimpl
def register_graph_readers(register):
    register(BACKEND, read_graph, "DGL: a DGLGraph (homogeneous or heterogeneous), a dgl.data dataset")


@hookimpl
def register_dataset_libraries(register):
    register(BACKEND, open_dataset, "any class of dgl.data: dgl:CoraGraphDataset, dgl:GINDataset, ...")


def read_graph(obj, reading):
    from gnnbridge.backends.dgl.objects import read

    return read(obj, reading)


def open_dataset(name, config, seed):
    from gnnbridge.backends.dgl.compat import import_dgl
    from gnnbridge.backends.library_datasets import open_class

    import_dgl()
    return open_class(BACKEND, "dgl.data", "dgl.data:DGLDataset", "raw_dir", name, config)


@hookimpl
def register_models(register):
    register_neutral(
        register,
        BACKEND,
        {
            "sage": build_sage,
            "gcn": build_gnn,
            "gat": build_gnn,
            "gin": build_gin,
            "gine": build_gine,
            "rgcn": build_rgcn,
            "hgt": build_hgt,
        },
        {"gcn": "GraphConv", "hetero": "HeteroGraphConv"},
    )
