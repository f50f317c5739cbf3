"""Heterogeneous graphs with DGL.

* A core sample becomes a heterograph (each node type's ids in ``ndata[dgl.NID]``, every declared
  type present even when the sample has none of its nodes).
* DGL's own samplers: ``NeighborSampler`` with a fanout per canonical edge type, wrapped by
  ``as_edge_prediction_sampler`` for link batches. Negatives come from core's generator (the
  same draw the core sampler makes, never the positive) and the excluded edges are each seed
  edge and its reverse, found through the record's ``reverse_eid`` (DGL's own
  ``reverse_etypes`` assumes a reverse edge has the same id, which ours need not). Held-out
  edges are not graph edges, so evaluation batches come from core's sampler on every backend.
* Heterogeneous GraphSAGE as ``HeteroGraphConv`` over a ``SAGEConv`` per canonical edge type
  (:class:`~gnnbridge.core.models.hetero.HeteroSAGE` holds the rest), on one heterograph (a core
  sample) or on DGL's blocks, one per layer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from gnnbridge.backends.dgl.compat import import_dgl
from gnnbridge.core.contracts.interfaces import Sampler
from gnnbridge.core.models.hetero import HeteroSAGE
from gnnbridge.core.records.batches import MiniBatch
from gnnbridge.core.sampling.hetero import CoreHeteroSampler, LinkMiniBatch
from gnnbridge.core.sampling.seeds import derived_seed
from gnnbridge.core.tasks import negative_destinations


def to_heterograph(sub) -> Any:
    dgl = import_dgl()
    empty = torch.zeros(0, dtype=torch.int64)
    graph = dgl.heterograph(
        {et: (sub.row.get(et, empty), sub.col.get(et, empty)) for et in sub.edge_types},
        num_nodes_dict={t: int(sub.node[t].numel()) if t in sub.node else 0 for t in sub.node_types},
    )
    for t, ids in sub.node.items():
        graph.nodes[t].data[dgl.NID] = ids
    return graph


class DglHeteroSAGE(HeteroSAGE):
    SAGE_NAMES = {"neigh.weight": "fc_neigh.weight", "root.weight": "fc_self.weight", "bias": "fc_self.bias"}

    def relation_conv(self, index: int, edge_type: tuple) -> nn.Module:
        return self.convs[index].mod_dict[edge_type]

    def make_conv(self, edge_types: list, hidden: int) -> nn.Module:
        import_dgl()
        from dgl.nn import HeteroGraphConv, SAGEConv

        return HeteroGraphConv({et: SAGEConv(hidden, hidden, self.spec.aggr) for et in edge_types}, aggregate="sum")

    def conv(self, index: int, graph: Any, h: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        graph = graph[index] if isinstance(graph, list) else graph
        # DGL wants a state for every type of the graph: a type the batch holds no node of gets zero rows.
        some = next(iter(h.values()))
        types = graph.srctypes if graph.is_block else graph.ntypes
        return self.convs[index](graph, {t: h[t] if t in h else some.new_zeros(0, some.shape[1]) for t in types})

    def carry(self, index: int, graph: Any, node_type: str, h: torch.Tensor) -> torch.Tensor:
        """A block's dst nodes are a prefix of its src nodes: an unreached type keeps those rows."""
        return h[: graph[index].num_dst_nodes(node_type)] if isinstance(graph, list) else h


class DglHeteroSampler(Sampler):
    """DGL's heterogeneous neighbour sampler (and edge-prediction sampler for link tasks) for
    training batches; held-out edges and given pairs through ``core``, the core sampler."""

    def __init__(self, core: CoreHeteroSampler):
        super().__init__(core.store, core.fanouts)
        dgl = import_dgl()
        self._dgl, self.core, self.data = dgl, core, core.data
        data = self.data
        # From each type's CSC arrays, which DGL wraps without a copy (a prepared folder's stay
        # mapped) and samples in-neighbours from directly; an empty edge-id array makes the CSC
        # positions the edge ids, as in core (see DglGraphStore).
        no_eids = torch.empty(0, dtype=torch.int64)
        self.graph = dgl.heterograph(
            {et: ("csc", (data.indptr[et], ei[0], no_eids)) for et, ei in data.edge_index.items()},
            num_nodes_dict=dict(data.num_nodes),
        )
        layers = len(core.fanouts)
        # Not DGL's fused sampler (``sample_neighbors_fused``, taken whenever DGL has more than one
        # thread, as a lone rank does): its blocks leave a node type no edge type points into out of
        # the dst-first order of the block's src nodes, so a node a later block reaches can be
        # missing from the batch's inputs and a layer's carried rows belong to other nodes (a
        # DGLError or IndexError in the model, depending on the seed). ``to_block`` keeps the order.
        blocks = dgl.dataloading.NeighborSampler(
            [{et: f[hop] for et, f in core.typed_fanouts.items()} for hop in reversed(range(layers))], fused=False
        )
        self._generator = torch.Generator()
        if data.is_link:
            self._negatives = core.negatives
            blocks = dgl.dataloading.as_edge_prediction_sampler(
                blocks, exclude=self._exclude, negative_sampler=self._draw_negatives
            )
        self._sampler = blocks

    def reseed(self, seed: int, epoch: int, rank: int) -> None:
        self.core.reseed(seed, epoch, rank)
        self._dgl.seed(derived_seed(seed, epoch, rank, stream=3))
        self._generator.manual_seed(derived_seed(seed, epoch, rank, stream=1))

    def loader(self, batches: list[torch.Tensor]) -> Iterable[MiniBatch]:
        for seeds in batches:
            yield self._link_batch(seeds) if self.data.is_link else self._node_batch(seeds)

    def held_out_loader(self, split: str, batches: list[torch.Tensor]) -> Iterable[LinkMiniBatch]:
        return self.core.held_out_loader(split, batches)

    def pairs_loader(self, src: torch.Tensor, dst: torch.Tensor, batch: int) -> Iterable[LinkMiniBatch]:
        return self.core.pairs_loader(src, dst, batch)

    def _node_batch(self, seeds: torch.Tensor) -> MiniBatch:
        input_nodes, _, blocks = self._sampler.sample(self.graph, {self.data.target_node: seeds})
        return MiniBatch(seeds, self._typed(input_nodes), blocks)

    def _link_batch(self, eids: torch.Tensor) -> LinkMiniBatch:
        target = self.data.target_edge
        input_nodes, pos, neg, blocks = self._sampler.sample(self.graph, {target: eids})
        pairs = torch.cat(
            [torch.stack(pos.edges(etype=target, order="eid")), torch.stack(neg.edges(etype=target, order="eid"))],
            dim=1,
        )
        labels = torch.cat([torch.ones(eids.numel()), torch.zeros(eids.numel() * self._negatives)])
        return LinkMiniBatch(
            eids,
            self._typed(input_nodes),
            blocks,
            pairs=pairs,
            labels=labels,
            positives=int(eids.numel()),
            negatives_per_edge=self._negatives,
        )

    def _typed(self, nodes) -> dict:
        """``{type: ids}``: DGL gives a graph of one node type (a homogeneous graph's link task)
        its nodes as a bare tensor."""
        if isinstance(nodes, dict):
            return dict(nodes)
        (only,) = self.data.num_nodes
        return {only: nodes}

    def _exclude(self, seed_edges: dict) -> dict:
        return self.data.excluded(seed_edges[self.data.target_edge])

    def _draw_negatives(self, graph: Any, seed_edges: dict) -> dict:
        target = self.data.target_edge
        src, dst = graph.find_edges(seed_edges[target], etype=target)
        negatives = negative_destinations(dst, self._negatives, self.data.num_nodes[target[2]], self._generator)
        return {target: (src.repeat_interleave(self._negatives), negatives.flatten())}
