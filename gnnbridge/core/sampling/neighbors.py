"""The framework-neutral neighbour sampler, written here because neither library's fast path
installs everywhere (PyG's needs pyg-lib or torch-sparse; DGL's is tied to old torch builds).

:class:`NeighborSampler` decides *which neighbours* feed each seed. It is torch-only and
vectorised over the whole frontier (no Python loop over nodes), samples without replacement with
Floyd's algorithm (O(fanout^2) work per node, independent of degree), runs on CPU or CUDA
tensors, and is deterministic given its ``torch.Generator``. Its output is a
:class:`~gnnbridge.core.records.batches.SampledSubgraph`.

On CPU tensors each hop and relabel runs as a compiled kernel (:mod:`.kernels`, numba); on CUDA
tensors, or without numba, as the vectorised torch code below. Both draw from the same counter
hash keyed by one number per hop from the generator, so they return identical samples.
"""

from __future__ import annotations

import torch

from gnnbridge.core.errors import ConfigError
from gnnbridge.core.records.batches import SampledSubgraph
from gnnbridge.core.sampling import kernels

ALL_NEIGHBORS = -1


class NeighborSampler:
    """Uniform neighbour sampling without replacement over a CSC graph, vectorised in torch.

    ``fanouts[i]`` is the number of in-neighbours drawn per node at hop ``i + 1`` counted from
    the seeds (PyG's ``num_neighbors`` order); ``-1`` takes all of them. ``indptr`` and
    ``indices`` may live on CPU (shared memory) or on a CUDA device; sampling runs where they are.
    ``num_src``: how many nodes ``indices`` may name (a relation's source type; by default the
    destinations'); the compiled kernels check every id they read against the bounds, since the
    arrays may come from files (:class:`~gnnbridge.core.sampling.kernels.TopologyError`).
    """

    DENSE_MAP_MAX_NODES = 4_000_000

    def __init__(self, indptr: torch.Tensor, indices: torch.Tensor, fanouts: list[int], num_src: int | None = None):
        if any(f <= 0 and f != ALL_NEIGHBORS for f in fanouts):
            raise ConfigError(f"fanouts={fanouts}: each must be positive or -1 (all neighbours).")
        self.indptr = indptr
        self.indices = indices
        self.fanouts = list(fanouts)
        self.num_nodes = indptr.numel() - 1
        self.num_src = self.num_nodes if num_src is None else int(num_src)
        self._maps: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}
        self._buffers = kernels.OutputBuffers()
        if indptr.device.type == "cpu":
            kernels.warm()

    def sample(self, seeds: torch.Tensor, generator: torch.Generator | None = None) -> SampledSubgraph:
        device = self.indptr.device
        seeds = seeds.to(device=device, dtype=torch.int64)
        compiled = device.type == "cpu" and kernels.available()
        # int32 for the kernel: half the cache lines (the relabel waits on misses in this map;
        # Reddit scale: 8.9 -> 8.0 ms a batch); the torch path's ids are int64 tensors.
        local = self._local_map(device, torch.int32 if compiled else torch.int64)
        if compiled and local is not None:
            keys = [kernels.draw_seed(generator) for _ in self.fanouts]  # the torch path draws the same, hop by hop
            parts = kernels.sample_layers(
                self.indptr, self.indices, seeds.contiguous(), self.fanouts, keys, local, self._buffers
            )
            return SampledSubgraph(*parts, batch_size=int(seeds.numel()))
        return self._sample_torch(seeds, generator, local)

    def _sample_torch(
        self, seeds: torch.Tensor, generator: torch.Generator | None, local: torch.Tensor | None
    ) -> SampledSubgraph:
        """Hop by hop in vectorised torch: CUDA tensors, huge graphs, or no numba."""
        device = seeds.device
        rows, cols, edges = [], [], []
        num_nodes, num_edges = [seeds.numel()], []
        frontier_start, all_nodes = 0, seeds
        if local is not None:
            local[seeds] = torch.arange(seeds.numel(), device=device)
        for fanout in self.fanouts:
            nbr, eid, owner = self._sample_hop(all_nodes[frontier_start:], fanout, generator)
            new_nodes, src_local = self._relabel(all_nodes, nbr, local)
            rows.append(src_local)
            cols.append(owner + frontier_start)
            edges.append(eid)
            num_edges.append(int(eid.numel()))
            num_nodes.append(int(new_nodes.numel()))
            frontier_start = all_nodes.numel()
            all_nodes = torch.cat([all_nodes, new_nodes])
        if local is not None:
            local[all_nodes] = -1  # reset only what this batch touched
        return SampledSubgraph(
            all_nodes, torch.cat(rows), torch.cat(cols), torch.cat(edges), num_nodes, num_edges, int(seeds.numel())
        )

    def _local_map(self, device: torch.device, dtype: torch.dtype = torch.int64) -> torch.Tensor | None:
        """The global -> local id map (-1: unseen), allocated once per sampler, device and dtype.

        An N-sized map is the cheapest relabel up to a few million nodes; beyond that the
        sort-based relabel avoids holding one. Each batch resets the entries it touched.
        """
        if self.num_nodes > self.DENSE_MAP_MAX_NODES:
            return None
        key = (device, dtype)
        if key not in self._maps:
            self._maps[key] = torch.full((self.num_nodes,), -1, dtype=dtype, device=device)
        return self._maps[key]

    def _sample_hop(self, frontier: torch.Tensor, fanout: int, generator: torch.Generator | None):
        """Sample in-neighbours of every frontier node at once.

        Returns (neighbour global ids, global edge ids, index of the owning frontier node).
        """
        return self._hop(frontier, fanout, kernels.draw_seed(generator))

    def _hop(self, frontier: torch.Tensor, fanout: int, seed: int):
        """:meth:`_sample_hop` with the hop's key given (a partitioned graph's owner draws it)."""
        if frontier.device.type == "cpu" and self.indptr.device.type == "cpu" and kernels.available():
            return kernels.sample_hop(self.indptr, self.indices, frontier.contiguous(), fanout, seed, self.num_src)
        device = frontier.device
        start = self.indptr[frontier]
        deg = self.indptr[frontier + 1] - start
        take = deg if fanout == ALL_NEIGHBORS else torch.clamp(deg, max=fanout)
        total = int(take.sum())
        owner = torch.repeat_interleave(torch.arange(frontier.numel(), device=device), take, output_size=total)
        # Position of each output slot within its owner's list of sampled neighbours.
        offsets = torch.cumsum(take, 0) - take
        slot = torch.arange(total, device=device) - offsets[owner]
        pos = slot.clone()  # nodes with deg <= fanout take every neighbour in order
        if fanout != ALL_NEIGHBORS:
            big = (deg > fanout).nonzero().flatten()
            if big.numel():
                picks = _floyd_sample(deg[big], big, fanout, seed)  # [len(big), fanout]
                big_slots = (offsets[big].unsqueeze(1) + torch.arange(fanout, device=device)).flatten()
                pos[big_slots] = picks.flatten()
        eid = start[owner] + pos
        return self.indices[eid], eid, owner

    @staticmethod
    def _relabel(known: torch.Tensor, nbr: torch.Tensor, local: torch.Tensor | None):
        """Local ids for ``nbr`` given nodes already ``known``; returns (new nodes, local ids).

        New nodes keep the order of their first appearance, so the result does not depend on
        sort internals and matches across devices.
        """
        device = nbr.device
        if nbr.numel() == 0:
            return nbr.new_empty(0), nbr.new_empty(0)
        if local is not None and local.device.type == "cpu" and kernels.available():
            return kernels.relabel(local, nbr.contiguous(), known.numel())
        if local is not None:
            is_new = local[nbr] < 0
            cand = nbr[is_new]
            uniq, inv = torch.unique(cand, return_inverse=True)
            first = torch.full((uniq.numel(),), cand.numel(), dtype=torch.int64, device=device)
            first.scatter_reduce_(0, inv, torch.arange(cand.numel(), device=device), reduce="amin")
            new_nodes = uniq[torch.argsort(first)]
            local[new_nodes] = torch.arange(known.numel(), known.numel() + new_nodes.numel(), device=device)
            return new_nodes, local[nbr]
        # Sort-based variant for huge graphs: unique over known + nbr, first occurrence wins.
        both = torch.cat([known, nbr])
        uniq, inv = torch.unique(both, return_inverse=True)
        first = torch.full((uniq.numel(),), both.numel(), dtype=torch.int64, device=device)
        first.scatter_reduce_(0, inv, torch.arange(both.numel(), device=device), reduce="amin")
        order = torch.argsort(first)
        rank_of = torch.empty_like(order)
        rank_of[order] = torch.arange(order.numel(), device=device)
        new_nodes = uniq[order[known.numel() :]]
        return new_nodes, rank_of[inv[known.numel() :]]


def _floyd_sample(deg: torch.Tensor, rows: torch.Tensor, k: int, seed: int) -> torch.Tensor:
    """``k`` distinct positions in ``[0, deg_i)`` for every row i (requires deg_i > k).

    Floyd's algorithm: for c = 0 .. k-1, with j = deg-k+c, draw t in [0, j]; keep t unless
    already chosen, else keep j. Each k-subset is equally likely. Draw c of row i uses the
    counter ``rows[i] * k + c`` (``rows``: positions in the frontier), as the kernel does.

    Why not the loop as written: on CUDA it was a dozen kernel launches per draw (25 draws a row
    at fanout 25), and launches, not arithmetic, set the sampler's speed there (measured on an
    H200: 6.2 ms a Reddit-scale batch, one CPU thread's speed). Here every draw is resolved at
    once, with the same result. Draw c is a duplicate iff t_c equals an earlier t (whether that
    one was kept or was itself a duplicate, its value is chosen by now), or t_c is an earlier
    j_m = deg-k+m that was kept because draw m was a duplicate. The second case links c to
    m = t_c-(deg-k) < c, so "duplicate" is an OR along a chain of decreasing draws; pointer
    jumping resolves every chain in log2(k) steps.
    """
    device = deg.device
    draws = torch.arange(k, device=device)
    rand = kernels.uniform(seed, rows.unsqueeze(1) * k + draws)
    j = (deg - k).unsqueeze(1) + draws  # [n, k]
    t = torch.minimum((rand * (j + 1).to(rand.dtype)).long(), j)
    earlier = torch.ones(k, k, dtype=torch.bool, device=device).tril(-1)  # [c, m]: m < c
    dup = ((t.unsqueeze(2) == t.unsqueeze(1)) & earlier).any(dim=2)
    m = t - (deg - k).unsqueeze(1)
    linked = (m >= 0) & (m < draws)
    nxt = torch.where(linked, m, draws.expand_as(m))  # a draw without a link points at itself
    for _ in range(max(k - 1, 1).bit_length()):
        dup = dup | dup.gather(1, nxt)
        nxt = nxt.gather(1, nxt)
    return torch.where(dup, j, t)
