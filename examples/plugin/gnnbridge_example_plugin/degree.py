"""A task family of the plugin's own: ``task=degree`` predicts each node's log in-degree.

Degree prediction is a self-supervised pretext task (Jin et al., "Self-supervised Learning on
Graphs: Deep Insights and New Direction", 2020, call it NodeProperty): the targets come from the
graph itself, so any node-classification graph trains without its classes (they are read as a
node task reads them, then replaced). The family runs as a node task (the same records, models,
samplers and evaluators); what it changes is what each node's target is, made from the graph
when the record is built, and the targets it takes (regression only).
"""

import dataclasses

import torch

from gnnbridge.core.errors import ConfigError
from gnnbridge.core.interfaces import GraphData, NodeFamily


class DegreeFamily(NodeFamily):
    name = "degree"
    description = "each node's log in-degree, from its features and neighbours (a pretext task: its classes unused)"
    targets = ("regression",)
    labels = "class"  # the datasets it reads are node-classification graphs; record() replaces their classes

    def record(self, data, config):
        if not isinstance(data, GraphData):
            raise ConfigError(
                f"task=degree reads one homogeneous graph, but dataset '{data.name}' is a {type(data).__name__}; "
                "use a graph with node features (a .npz with edge_index and x)."
            )
        degree = (data.indptr[1:] - data.indptr[:-1]).to(torch.float32)
        return dataclasses.replace(data, y=torch.log1p(degree), num_classes=1, labels="regression")
