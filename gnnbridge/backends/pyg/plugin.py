"""Registers the PyG backend and its models through the public hooks, exactly as a third-party
package would: the neutral catalogue (:mod:`gnnbridge.backends.catalogue`: sage, gcn, gat for
node tasks, gin for graph tasks, rgcn and hgt for heterogeneous graphs), and PyG's model zoo by its own class names
(:mod:`gnnbridge.backends.pyg.zoo`)."""

from gnnbridge.backends.catalogue import register_neutral
from gnnbridge.core.contracts.hookspecs import hookimpl

BACKEND = "pyg"


@hookimpl
def register_backends(register):
    from gnnbridge.backends.pyg.backend import PygBackend

    register(PygBackend())


def build_sage(in_dim, out_dim, spec, data, decoder="dot"):
    """The homogeneous models; sage also builds heterogeneous GraphSAGE for heterogeneous data
    (and so for link prediction, which always runs on a heterogeneous view of the graph)."""
    from gnnbridge.core.records.hetero import HeteroGraphData

    if isinstance(data, HeteroGraphData):
        from gnnbridge.backends.pyg.hetero import PygHeteroSAGE

        return PygHeteroSAGE(spec, data, out_dim, decoder)
    return build_gnn(in_dim, out_dim, spec, data)


def build_rgcn(in_dim, out_dim, spec, data, decoder="dot", num_bases=None, num_blocks=None):
    """R-GCN (core's layers, :mod:`gnnbridge.core.models.rgcn`) for heterogeneous data."""
    from gnnbridge.backends.pyg.hetero import PygHeteroRGCN
    from gnnbridge.core.models.relational import heterogeneous_only

    heterogeneous_only("rgcn", data)
    return PygHeteroRGCN(spec, data, out_dim, decoder, num_bases, num_blocks)


def build_hgt(in_dim, out_dim, spec, data, decoder="dot"):
    """HGT (core's layers, :mod:`gnnbridge.core.models.hgt`) for heterogeneous data."""
    from gnnbridge.backends.pyg.hetero import PygHeteroHGT
    from gnnbridge.core.models.relational import heterogeneous_only

    heterogeneous_only("hgt", data)
    return PygHeteroHGT(spec, data, out_dim, decoder)


def build_gnn(in_dim, out_dim, spec, data=None):
    """GCN, or GAT (which reads the graph's edge features where it has some)."""
    from gnnbridge.backends.pyg.models import PygGNN

    features = getattr(data, "edge_attr", None) if spec.arch == "gat" else None
    return PygGNN(spec, in_dim, out_dim, int(features.shape[1]) if features is not None else 0)


def build_gine(in_dim, out_dim, spec, data):
    """GINE on nodes (sampled blocks) or, for a collection, on whole graphs."""
    from gnnbridge.backends.pyg.graphs import PygGINE
    from gnnbridge.backends.pyg.models import PygGNN
    from gnnbridge.core.models.gine import edge_dim
    from gnnbridge.core.records.collection import GraphCollection

    if isinstance(data, GraphCollection):
        return PygGINE(spec, in_dim, out_dim, edge_dim(data))
    return PygGNN(spec, in_dim, out_dim, edge_dim(data))


def build_gin(in_dim, out_dim, spec):
    from gnnbridge.backends.pyg.graphs import PygGIN

    return PygGIN(spec, in_dim, out_dim)


@hookimpl
def register_graph_readers(register):
    register(BACKEND, read_graph, "PyG: a Data, a HeteroData, a torch_geometric dataset")


@hookimpl
def register_dataset_libraries(register):
    register(BACKEND, open_dataset, "any class of torch_geometric.datasets: pyg:Planetoid, pyg:Amazon, ...")


def read_graph(obj, reading):
    from gnnbridge.backends.pyg.objects import read

    return read(obj, reading)


def open_dataset(name, config, seed):
    from gnnbridge.backends.library_datasets import open_class

    return open_class(BACKEND, "torch_geometric.datasets", "torch_geometric.data:Dataset", "root", name, config)


@hookimpl
def register_models(register):
    from gnnbridge.backends.pyg.zoo import ZOO, zoo_builder

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
        {"gcn": "GCNConv", "hetero": "HeteroConv"},
    )
    for name, description in ZOO.items():
        register(name, {BACKEND: zoo_builder(name)}, tasks=["node", "graph"], description=description)
