"""Heterogeneous graphs with DGL.

* A core sample becomes one block per layer, trimmed per hop as DGL's own sampler's blocks are
  (each node type's ids in ``dgl.NID``, every declared type present even when the sample has
  none of its nodes).
* DGL's own samplers: ``NeighborSampler`` with a fanout per canonical edge type, and for link
  batches what ``as_edge_prediction_sampler`` does around it, but with the positive pairs taken
  from the record (DGL's wrapper builds a COO of the relation in each rank to find them; see
  ``DglHeteroSampler._link_batch``). Negatives come from core's sampler (the
  same draw from the same stream: both samplers train on the same negatives, never the
  positive) and the excluded edges are each seed edge and its reverse, found through the
  record's ``reverse_eid`` (DGL's own
  ``reverse_etypes`` assumes a reverse edge has the same id, which ours need not). Held-out
  edges are not graph edges, so evaluation batches come from core's sampler on every backend.
* Heterogeneous GraphSAGE as ``HeteroGraphConv`` over a ``SAGEConv`` per canonical edge type
  (:class:`~gnnbridge.core.models.hetero.HeteroSAGE` holds the rest), on blocks, one per layer,
  from core's sampler or DGL's.
* R-GCN and HGT are core's (:mod:`~gnnbridge.core.models.relational`); :class:`DglRelations`
  gives them a relation's edges, a per-relation mean (``update_all`` with ``fn.mean``) and the
  softmax over a destination's incoming edges (``edge_softmax`` and ``copy_e_sum``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from gnnbridge.backends.dgl.blocks import EDGE_FEATURES
from gnnbridge.backends.dgl.compat import import_dgl
from gnnbridge.backends.dgl.sampler import neighbor_sampler, one_thread
from gnnbridge.core.contracts.interfaces import Sampler
from gnnbridge.core.models.graphops import hetero_layer_bounds
from gnnbridge.core.models.hetero import HeteroSAGE
from gnnbridge.core.models.hgt import HeteroHGT
from gnnbridge.core.models.relational import RelationalModel
from gnnbridge.core.models.rgcn import HeteroRGCN
from gnnbridge.core.records.batches import MiniBatch
from gnnbridge.core.sampling.hetero import CoreHeteroSampler, LinkMiniBatch
from gnnbridge.core.sampling.seeds import derived_seed
from gnnbridge.core.storage.folder import check_mapped_csc


def to_blocks(sub) -> list:
    """A core sample as one block per layer (input layer first), each trimmed to the nodes its
    layer computes (:func:`~gnnbridge.core.models.graphops.hetero_layer_bounds`), with every
    declared type present even where the sample holds none, and each type's global ids in
    ``dgl.NID`` as DGL's own blocks carry them."""
    dgl = import_dgl()
    empty = torch.zeros(0, dtype=torch.int64)
    blocks = []
    for n_src, n_dst, n_edges in hetero_layer_bounds(sub.num_sampled_nodes, sub.num_sampled_edges, sub.layers):
        block = dgl.create_block(
            {
                et: (sub.row.get(et, empty)[: n_edges[et]], sub.col.get(et, empty)[: n_edges[et]])
                for et in sub.edge_types
            },
            num_src_nodes=n_src,
            num_dst_nodes=n_dst,
        )
        for t, ids in sub.node.items():
            block.srcnodes[t].data[dgl.NID] = ids[: n_src[t]]
            block.dstnodes[t].data[dgl.NID] = ids[: n_dst[t]]
        for et, rows in (sub.edge_attr or {}).items():  # the block's edges of a type: its first n_edges
            block.edges[et].data[EDGE_FEATURES] = rows[: n_edges[et]]
        blocks.append(block)
    return blocks


class DglHeteroSAGE(HeteroSAGE):
    SAGE_NAMES = {"neigh.weight": "fc_neigh.weight", "root.weight": "fc_self.weight", "bias": "fc_self.bias"}

    def relation_conv(self, index: int, edge_type: tuple) -> nn.Module:
        return self.convs[index].mod_dict[edge_type]

    def make_conv(self, edge_types: list, hidden: int) -> nn.Module:
        import_dgl()
        from dgl.nn import HeteroGraphConv, SAGEConv

        return HeteroGraphConv({et: SAGEConv(hidden, hidden, self.spec.aggr) for et in edge_types}, aggregate="sum")

    def conv(self, index: int, graph: Any, h: dict[str, torch.Tensor], block: int) -> dict[str, torch.Tensor]:
        graph = graph[block]
        n_src = {t: graph.num_src_nodes(t) for t in graph.srctypes}
        sources, targets = self.layer_inputs(h, n_src, {t: graph.num_dst_nodes(t) for t in graph.dsttypes})
        out: dict[str, torch.Tensor] = {}
        for et in self.edge_types:
            s, _, d = et
            y = self.relation_conv(index, et)(graph[et], (sources[s], targets[d]))
            out[d] = out[d] + y if d in out else y
        return out

    def carry(self, block: int, graph: Any, node_type: str, h: torch.Tensor) -> torch.Tensor:
        """A block's dst nodes are a prefix of its src nodes: an unreached type keeps those rows."""
        return h[: graph[block].num_dst_nodes(node_type)]


class DglRelations(RelationalModel):
    """Core's relational layers on DGL blocks (one per layer, from core's sampler or DGL's)."""

    def sizes(self, graph: Any, block: int) -> tuple[dict[str, int], dict[str, int]]:
        g = graph[block]
        return {t: g.num_src_nodes(t) for t in g.srctypes}, {t: g.num_dst_nodes(t) for t in g.dsttypes}

    def edges(self, graph: Any, block: int, edge_type: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        return graph[block].edges(etype=edge_type, order="eid")

    def mean(self, graph: Any, block: int, edge_type: tuple, x: torch.Tensor, n_dst: int) -> torch.Tensor:
        fn = import_dgl().function
        g = graph[block][edge_type]
        with g.local_scope():
            g.srcdata["h"] = x
            g.update_all(fn.copy_u("h", "m"), fn.mean("m", "h"))
            return g.dstdata["h"]

    def attend(self, graph: Any, block: int, scores: dict, values: dict, n_dst: dict[str, int]) -> dict:
        """Per destination type, its relations' edges as one bipartite graph (edge k: from "node"
        k to its destination), so DGL's one-relation ``edge_softmax`` and ``copy_e_sum`` do the
        work. Not ``edge_softmax`` over the heterogeneous block at once: in DGL 2.1 it fails on
        blocks here (a DGLError from its SpMM kernel, or a segmentation fault in
        ``_gsddmm_hetero``)."""
        dgl = import_dgl()
        out = {}
        for d, n in n_dst.items():
            into = [et for et in scores if et[2] == d]
            dst = torch.cat([self.edges(graph, block, et)[1] for et in into])
            g = dgl.create_block((torch.arange(dst.numel(), device=dst.device), dst), dst.numel(), n)
            weights = dgl.ops.edge_softmax(g, torch.cat([scores[et] for et in into]))
            out[d] = dgl.ops.copy_e_sum(g, weights.unsqueeze(-1) * torch.cat([values[et] for et in into]))
        return out


class DglHeteroRGCN(DglRelations, HeteroRGCN):
    pass


class DglHeteroHGT(DglRelations, HeteroHGT):
    pass


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
        for (src, rel, dst), ei in data.edge_index.items():  # DGL trusts them (a bad offset aborts)
            check_mapped_csc(data.indptr[(src, rel, dst)], ei[0], data.num_nodes[src])
        self.graph = dgl.heterograph(
            {et: ("csc", (data.indptr[et], ei[0], no_eids)) for et, ei in data.edge_index.items()},
            num_nodes_dict=dict(data.num_nodes),
        )
        layers = len(core.fanouts)
        # Not DGL's fused sampler (``sample_neighbors_fused``, taken whenever DGL has more than one
        # thread, as a lone rank does): its blocks leave a node type no edge type points into out of
        # the dst-first order of the block's src nodes, so a node a later block reaches can be
        # missing from the batch's inputs and a layer's carried rows belong to other nodes (a
        # DGLError or IndexError in the model, depending on the seed). Nor ``to_block`` as it is:
        # with several threads it orders the src nodes differently on every run, and so the next
        # hop's draws (:func:`~gnnbridge.backends.dgl.sampler.neighbor_sampler`).
        self._sampler = neighbor_sampler(
            [{et: f[hop] for et, f in core.typed_fanouts.items()} for hop in reversed(range(layers))]
        )
        if data.scores_pairs:  # link prediction, or an edge task (no negatives)
            self._negatives = core.negatives
            self._endpoints = data.edge_index[data.target_edge]  # column e: edge id e (CSC order)

    def reseed(self, seed: int, epoch: int, rank: int) -> None:
        self.core.reseed(seed, epoch, rank)
        with one_thread(self._dgl):  # the engine the one-thread draws use is seeded for certain
            self._dgl.seed(derived_seed(seed, epoch, rank, stream=3))

    def loader(self, batches: list[torch.Tensor]) -> Iterable[MiniBatch]:
        for seeds in batches:
            yield self._link_batch(seeds) if self.data.scores_pairs else self._node_batch(seeds)

    def edges_loader(self, batches: list[torch.Tensor]) -> Iterable[LinkMiniBatch]:
        return self.core.edges_loader(batches)

    def held_out_loader(self, split: str, batches: list[torch.Tensor]) -> Iterable[LinkMiniBatch]:
        return self.core.held_out_loader(split, batches)

    def pairs_loader(self, src: torch.Tensor, dst: torch.Tensor, batch: int) -> Iterable[LinkMiniBatch]:
        return self.core.pairs_loader(src, dst, batch)

    def _node_batch(self, seeds: torch.Tensor) -> MiniBatch:
        input_nodes, _, blocks = self._sampler.sample(self.graph, {self.data.target_node: seeds})
        return MiniBatch(seeds, self._typed(input_nodes), self._with_features(blocks))

    def _with_features(self, blocks: list) -> list:
        """Each block's edges' features (``edata["feat"]`` per type that has them), by the edge ids
        DGL's blocks carry (the CSC positions, as in core)."""
        for block in blocks:
            for et, table in self.data.edge_attr.items():
                block.edges[et].data[EDGE_FEATURES] = table[block.edges[et].data[self._dgl.EID]]
        return blocks

    def _link_batch(self, eids: torch.Tensor) -> LinkMiniBatch:
        """DGL's edge-prediction sampling, as ``as_edge_prediction_sampler`` does it: the positive
        and negative pair graphs compacted together, their nodes the seeds of DGL's block sampler,
        each seed edge and its reverse excluded. The same batches to the bit (a test compares),
        but the positive pairs come from the record's edge list: DGL's wrapper finds them with
        ``edge_subgraph``, through a COO of the relation it builds in every rank on the first
        batch and keeps (16 bytes an edge: 1.33 GB a rank on a Taobao-shaped graph)."""
        dgl, target = self._dgl, self.data.target_edge
        src, dst = self._endpoints[:, eids]
        negatives = self.core.train_negatives(dst).flatten()
        pos, neg = dgl.compact_graphs(
            [self._pair_graph(src, dst), self._pair_graph(src.repeat_interleave(self._negatives), negatives)]
        )
        input_nodes, _, blocks = self._sampler.sample(self.graph, pos.ndata[dgl.NID], self._exclude({target: eids}))
        pairs = torch.cat(
            [torch.stack(pos.edges(etype=target, order="eid")), torch.stack(neg.edges(etype=target, order="eid"))],
            dim=1,
        )
        labels = torch.cat([torch.ones(eids.numel()), torch.zeros(eids.numel() * self._negatives)])
        return LinkMiniBatch(
            eids,
            self._typed(input_nodes),
            self._with_features(blocks),
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
        """A copy: DGL sorts the ids it excludes in place, which would reorder the batch's seeds."""
        return self.data.excluded(seed_edges[self.data.target_edge].clone())

    def _pair_graph(self, src: torch.Tensor, dst: torch.Tensor) -> Any:
        """Pairs as edges of the target relation in a graph of every type and all the nodes."""
        empty = src.new_empty(0)
        edges = {
            et: (src, dst) if et == self.data.target_edge else (empty, empty) for et in self.graph.canonical_etypes
        }
        return self._dgl.heterograph(edges, {nt: self.graph.num_nodes(nt) for nt in self.graph.ntypes})
