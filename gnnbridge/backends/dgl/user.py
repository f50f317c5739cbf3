"""A user's DGL model instance trained as DGL's tutorials train it
(:mod:`gnnbridge.core.models.instance`): ``forward(blocks, x)`` gets the sampled blocks, input
layer first, as DGL's ``DataLoader`` yields them; ``forward(g, x)``, a model written for a whole
graph, gets the sampled subgraph as one graph (every block's edges, each once, in the input
nodes' numbering) and the seeds' rows of its output are scored. For graph classification
``forward(g, x)`` gets a batched graph, as DGL's ``GraphDataLoader`` gives one, and returns a row
per graph (its own readout, ``dgl.mean_nodes`` say)."""

from __future__ import annotations

import torch
from torch import nn

from gnnbridge.backends.dgl.compat import import_dgl
from gnnbridge.core.models.instance import UserModel, idiom


class DglBlocksUserModel(UserModel):
    def forward(self, blocks, x):
        return self.user_model(blocks, self.rows(x))


class DglGraphUserModel(UserModel):
    def forward(self, blocks, x):
        x = self.rows(x)
        if not isinstance(blocks, (list, tuple)):  # a batched graph (graph classification): a row per graph
            return self.user_model(blocks, x)[: blocks.batch_size]
        return self.user_model(one_graph(blocks), x)[: blocks[-1].num_dst_nodes()]


def one_graph(blocks):
    """The blocks' edges as one graph on the first block's source nodes: a block's sources and
    destinations are prefixes of the one before it, so its local ids are that numbering too."""
    dgl = import_dgl()
    n = blocks[0].num_src_nodes()
    src, dst = (torch.cat(part) for part in zip(*(block.edges() for block in blocks)))
    pairs = torch.unique(src.long() * n + dst.long())
    return dgl.graph((pairs // n, pairs % n), num_nodes=n)


def adopt(model: nn.Module) -> nn.Module | None:
    kind = idiom(model)
    if kind == "dgl-blocks":
        return DglBlocksUserModel(model)
    if kind == "dgl-graph":
        return DglGraphUserModel(model)
    return None
