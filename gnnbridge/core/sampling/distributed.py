"""Sampling a graph partitioned across machines: each hop's other-machine nodes sampled by their
owners, and a batch's rows fetched from theirs, over ``all_to_all`` collectives.

Why collectives and not a feature server: every rank of a DDP job already steps in lockstep
(equal batch counts, one all-reduce per step), so one exchange per hop and one per batch fit
that rhythm with nothing else running: no RPC framework (PyTorch RPC's TensorPipe is not
maintained), no server threads, the same gloo or nccl groups the job has, and a dead machine
ends the job as any collective does (the watchdog names it). The price is that every rank of a
machine group must sample the same number of batches, empty ones included, which the seed
schedule (:func:`machine_batches`) guarantees.

Layout: machine ``m`` owns global ids ``[bounds[m], bounds[m + 1])``
(:class:`~gnnbridge.core.storage.parts.Partition`). The ranks with the same local rank on
every machine form one exchange group of ``K`` ranks; a rank asks its peer on the owning
machine, which answers from the part its machine maps (the machine's ranks share those pages).
A round sends each peer the ids it owns (its own included: a copy, not a transfer), then the
answers come back in the order asked.

A hop: the owner samples the asked nodes with the core kernel and its own hop key (drawn from
its generator, so a run is a function of (seed, epoch, rank) as on one machine), and returns
how many neighbours it took for each node, then the neighbours with their global edge ids.
The requester puts the edges back in frontier order, which the backends' CSC conversion reads.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import torch
import torch.distributed as dist

from gnnbridge.core.contracts.interfaces import GraphStore, Sampler
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.records.batches import MiniBatch, SampledSubgraph
from gnnbridge.core.records.features import gather_rows
from gnnbridge.core.sampling import kernels
from gnnbridge.core.sampling.hetero import HeteroNeighborSampler, LinkBatcher, LinkMiniBatch, leave_out
from gnnbridge.core.sampling.neighbors import NeighborSampler
from gnnbridge.core.sampling.seeds import NEGATIVES_STREAM, epoch_generator

_GROUPS: dict[tuple, object] = {}
COUNT_STEP = 1 << 24  # edges counted at a time for the remote cache (128 MiB of int64 ids)
_NO_IDS = torch.zeros(0, dtype=torch.int64)


class Exchange:
    """All-to-all rounds within one group of ``size`` ranks, one per machine (``me`` is this
    machine); counts what crossed machines for ``results.json``."""

    def __init__(self, group, size: int, me: int):
        self.group, self.size, self.me = group, size, me
        self.rows = 0  # feature rows this rank fetched, its own machine's included
        self.cache_hits = 0  # of the other machines' rows, those the remote cache served
        self.remote_rows = 0  # feature rows this rank took from other machines
        self.remote_nodes = 0  # frontier nodes this rank had sampled by other machines
        self.bytes = 0  # bytes this rank received from other machines
        self.hop_s = self.fetch_s = 0.0  # seconds in the hops' exchanges and in fetching rows

    def reset(self) -> dict:
        """The counts so far (then zero): what an epoch exchanged, and the seconds it took."""
        seen = {"fetched_rows": self.rows, "remote_rows": self.remote_rows, "remote_nodes": self.remote_nodes}
        seen.update(remote_cache_hits=self.cache_hits, exchanged_bytes=self.bytes)
        seen.update(hop_exchange_s=self.hop_s, fetch_s=self.fetch_s)
        self.rows = self.remote_rows = self.remote_nodes = self.bytes = self.cache_hits = 0
        self.hop_s = self.fetch_s = 0.0
        return seen

    def counts(self, send: list[int]) -> list[int]:
        """How many items each peer sends this rank, given how many it sends each."""
        got = torch.empty(self.size, dtype=torch.int64)
        dist.all_to_all_single(got, torch.tensor(send, dtype=torch.int64), group=self.group)
        return got.tolist()

    def swap(self, items: torch.Tensor, send: list[int], receive: list[int]) -> torch.Tensor:
        """``items`` (grouped by peer, ``send[p]`` rows for peer ``p``) out, theirs in (on
        ``items``' device; the exchange itself runs on the CPU, in gloo)."""
        host = items.cpu().contiguous()
        out = host.new_empty((sum(receive), *items.shape[1:]))
        dist.all_to_all_single(out, host, receive, send, group=self.group)
        row = out[0].numel() * out.element_size() if out.numel() else 0
        self.bytes += row * (sum(receive) - receive[self.me])  # received: summed over ranks, each byte once
        return out.to(items.device)

    def ask(self, ids: torch.Tensor, owners: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list, list]:
        """Send each id to its owner: (the ids this machine was asked for, grouped by asker; the
        order that grouped ``ids`` by owner; sent and received counts per peer)."""
        order = torch.argsort(owners, stable=True)
        send = torch.bincount(owners, minlength=self.size).tolist()
        receive = self.counts(send)
        return self.swap(ids[order], send, receive), order, send, receive


def exchange_for(ctx) -> Exchange:
    """This rank's exchange group: the ranks of its local rank on every machine. Every rank of the
    job creates every group, in the same order (``new_group``'s rule), on first use."""
    layout = tuple(ctx.gather_objects((ctx.node_rank, ctx.local_rank)))
    per_machine = sorted({sum(1 for node, _ in layout if node == m) for m in range(ctx.num_nodes)})
    if len(per_machine) > 1:
        raise ConfigError(
            f"A partitioned graph needs as many ranks on every machine; this job has {per_machine[0]} to "
            f"{per_machine[-1]} (start the same number of tasks per node)."
        )
    key = (ctx.run_id, ctx.attempt, layout)
    if key not in _GROUPS:
        groups = {}
        for local in sorted({lr for _, lr in layout}):
            ranks = sorted((node, r) for r, (node, lr) in enumerate(layout) if lr == local)
            # gloo whatever the job's backend: the exchanges move ids and rows that sampling left
            # on the host (nccl takes device tensors only)
            groups[local] = dist.new_group([r for _, r in ranks], backend="gloo")
        _GROUPS[key] = groups
    return Exchange(_GROUPS[key][ctx.local_rank], ctx.num_nodes, ctx.node_rank)


class Rows:
    """A table with a row per node of this machine (of one node type), read by global ids: each
    row from the machine that owns it, over ``exchange`` (this machine's through the same
    round, a copy). ``remote``: an optional cache of other machines' rows of ``x``
    (``placement.remote_cache``)."""

    def __init__(self, part, exchange: Exchange, x: torch.Tensor | None):
        self.part, self.exchange, self.x = part, exchange, x
        self.start = part.bounds[part.part]
        self.remote: tuple[torch.Tensor, torch.Tensor] | None = None  # (sorted ids, their rows)

    def fetch(self, nodes: torch.Tensor, table: torch.Tensor | None = None) -> torch.Tensor:
        """``table[nodes]`` (global ids; ``table``: a row per node of this machine, by default its
        features) as float32: each row from the machine that owns it."""
        began = time.perf_counter()
        try:
            table = self.x if table is None else table
            if self.remote is not None and table is self.x:
                return self._fetch_cached(nodes)
            return self._ask(nodes, table)
        finally:
            self.exchange.fetch_s += time.perf_counter() - began

    def _ask(self, nodes: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """``table[nodes]``, every row from its owner (this machine's through the same exchange)."""
        ex = self.exchange
        ex.rows += nodes.numel()
        return self._answered(nodes, lambda local: gather_rows(table, local), count=True)

    def original_ids(self, nodes: torch.Tensor) -> torch.Tensor:
        """The dataset's own ids of ``nodes`` (global ids), from their owners: what a featureless
        type's embedding rows are keyed by, so a model reads the same rows whether its graph is
        partitioned (any way) or whole."""
        return self._answered(nodes, lambda local: self.part.node_ids[local], count=False)

    def _answered(self, nodes: torch.Tensor, read, count: bool) -> torch.Tensor:
        """``read(local ids)`` of ``nodes``, each answered by its owner, in ``nodes``' order."""
        ex = self.exchange
        asked, order, send, receive = ex.ask(nodes, self.part.owners(nodes))
        got = ex.swap(read(asked - self.start), receive, send)
        if count:
            ex.remote_rows += sum(send) - send[ex.me]
        out = torch.empty_like(got)
        out[order] = got
        return out

    def _fetch_cached(self, nodes: torch.Tensor) -> torch.Tensor:
        """:meth:`fetch` of ``x``, the other machines' rows the remote cache holds served from it."""
        ids, rows = self.remote
        at = torch.searchsorted(ids, nodes).clamp(max=max(ids.numel() - 1, 0))
        hit = ids[at].eq(nodes) if ids.numel() else torch.zeros_like(nodes, dtype=torch.bool)
        out = rows.new_empty((nodes.numel(), rows.shape[1]))
        out[hit] = rows[at[hit]]
        out[~hit] = self._ask(nodes[~hit], self.x)
        hits = int(hit.sum())  # other machines' rows read, though not asked for
        self.exchange.cache_hits += hits
        self.exchange.remote_rows += hits
        self.exchange.rows += hits
        return out


class PartitionSampler(NeighborSampler):
    """The core neighbour sampler over one relation of a part: the part's own CSC (global source
    ids) for its nodes, the owners for the others' (see the module). ``part``: the destination
    nodes' :class:`~gnnbridge.core.storage.parts.Partition` (its edge ranges the relation's);
    ``num_src``: the source nodes of every machine."""

    def __init__(
        self, indptr, indices, part, fanouts: list[int], exchange: Exchange, num_src: int, x=None, edge_attr=None
    ):
        super().__init__(indptr, indices, fanouts, num_src=num_src)
        self.num_nodes = part.num_nodes  # the relabel's map spans every machine's ids
        self.part, self.exchange = part, exchange
        self.rows = Rows(part, exchange, x)
        self.edge_attr = edge_attr
        self.start = part.bounds[part.part]
        self.edge_start = part.edge_bounds[part.part]
        self._edge_rows: list[torch.Tensor] = []

    @classmethod
    def of(cls, data, fanouts: list[int], exchange: Exchange) -> PartitionSampler:
        """The sampler of a homogeneous graph's part (:class:`~gnnbridge.core.storage.parts.PartGraph`)."""
        part = data.partition
        edge_attr = getattr(data, "edge_attr", None)
        return cls(data.indptr, data.indices, part, fanouts, exchange, part.num_nodes, data.x, edge_attr)

    @property
    def remote(self):
        return self.rows.remote

    @remote.setter
    def remote(self, cached) -> None:
        self.rows.remote = cached

    def sample(self, seeds: torch.Tensor, generator: torch.Generator | None = None) -> SampledSubgraph:
        """The hops of ``seeds`` (global ids) across machines; with edge features, each sampled
        edge's row, sent by the machine that sampled it (its destination's owner holds it)."""
        self._edge_rows = []
        sub = self._sample_torch(seeds.to(torch.int64), generator, self._local_map(seeds.device))
        if self.edge_attr is not None:
            sub.edge_attr = self.sampled_edge_rows()
        return sub

    def sampled_edge_rows(self) -> torch.Tensor:
        """The edge feature rows of every edge sampled since the batch began, in sampled order."""
        return torch.cat(self._edge_rows) if self._edge_rows else self.edge_attr[:0].float()

    def _sample_hop(self, frontier: torch.Tensor, fanout: int, generator: torch.Generator | None):
        began = time.perf_counter()
        try:
            return self._exchanged_hop(frontier, fanout, kernels.draw_seed(generator))
        finally:
            self.exchange.hop_s += time.perf_counter() - began

    def _exchanged_hop(self, frontier: torch.Tensor, fanout: int, key: int):
        ex = self.exchange
        owners = self.part.owners(frontier)
        asked, order, send, receive = ex.ask(frontier, owners)
        ex.remote_nodes += sum(send) - send[ex.me]
        nbr, eid, within = self._hop(asked - self.start, fanout, key)
        taken = torch.bincount(within, minlength=asked.numel())
        got_taken = ex.swap(taken, receive, send)  # per node asked, in the order asked
        edges_out = [int(t.sum()) for t in taken.split(receive)]
        edges_in = [int(t.sum()) for t in got_taken.split(send)]
        got = ex.swap(torch.stack([nbr, eid + self.edge_start], dim=1), edges_out, edges_in)
        owner = order.repeat_interleave(got_taken)
        back = torch.argsort(owner, stable=True)  # frontier order, as the backends' CSC reads it
        if self.edge_attr is not None:
            self._edge_rows.append(ex.swap(gather_rows(self.edge_attr, eid), edges_out, edges_in)[back])
        return got[back, 0], got[back, 1], owner[back]

    def fetch(self, nodes: torch.Tensor, table: torch.Tensor | None = None) -> torch.Tensor:
        """``table[nodes]`` (global ids), each row from its owner (see :meth:`Rows.fetch`)."""
        return self.rows.fetch(nodes, table)

    def cache_rows(self, budget: int) -> dict[str, torch.Tensor]:
        """``{"ids", "rows"}``: the rows of the other machines' nodes this part's edges name most
        often, as many as ``budget`` bytes of float32 rows hold, fetched from their owners (one
        exchange: every machine's rank of this group builds its cache at once)."""
        ids, counts = self.remote_counts()
        keep = max(0, budget // (4 * self.rows.x.shape[1]))
        ids = ids[torch.argsort(counts, descending=True, stable=True)[:keep]].sort().values
        rows = self.fetch(ids)
        return {"ids": ids, "rows": rows}

    def remote_counts(self, step: int = COUNT_STEP) -> tuple[torch.Tensor, torch.Tensor]:
        """The other machines' nodes this part's edges name (sorted) and how often each, counted
        ``step`` edges at a time: the memory is the distinct remote nodes and one step of the
        (mapped) edge list, never the part's edges at once."""
        ids, counts = torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)
        for start in range(0, self.indices.numel(), step):
            chunk = torch.as_tensor(self.indices[start : start + step])
            found, found_counts = torch.unique(chunk[self.part.owners(chunk) != self.part.part], return_counts=True)
            ids, where = torch.unique(torch.cat([ids, found]), return_inverse=True)
            counts = torch.zeros(ids.numel(), dtype=torch.int64).index_add_(0, where, torch.cat([counts, found_counts]))
        return ids, counts


class PartitionHeteroSampler(HeteroNeighborSampler):
    """The typed sampler over a machine's part of a heterogeneous graph: every relation hops
    across machines (a :class:`PartitionSampler` each, owned by its destination type), and every
    relation's exchange runs at every hop on every rank, empty or not, so the job's ranks stay
    paired whatever types their own batches reach."""

    lockstep = True
    batched = True

    def __init__(self, data, fanouts: dict, exchange: Exchange):
        self.exchange = exchange
        super().__init__(data, fanouts)
        part = data.partition
        self.rows = {t: Rows(part.types[t], exchange, data.x.get(t)) for t in sorted(data.num_nodes)}
        self.banned: list | None = None  # per relation, the batch's left-out edges this machine owns

    def _hopper(self, et) -> PartitionSampler:
        data = self.data
        return PartitionSampler(
            data.indptr[et], data.edge_index[et][0], data.partition.relations[et], self.fanouts[et], self.exchange,
            data.num_nodes[et[0]], edge_attr=data.edge_attr.get(et),
        )  # fmt: skip

    def sample(self, seeds, generator=None, exclude=None):
        """``exclude``: {edge type: global edge ids} a link batch leaves out, sent to the machines
        owning them (one round), which redraw their nodes' hops without them (every rank of the
        job sends, empty or not: a training batch always excludes)."""
        if exclude is not None and not self.batched:
            raise ConfigError("the per-relation exchange (batched=False) leaves no edges out; use the batched one")
        for hopper in self._hops.values():
            hopper._edge_rows = []
        self.banned = None if exclude is None else self._send_banned(exclude)
        try:
            return super().sample(seeds, generator, exclude)
        finally:
            self.banned = None

    def _send_banned(self, exclude: dict) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each relation's left-out edges this machine owns: (the asking machine, local edge id)."""
        ex, rels = self.exchange, list(self._hops.items())
        ids = [exclude.get(et, _NO_IDS).to(torch.int64) for et, _ in rels]
        owners = [
            torch.bucketize(i, torch.tensor(h.part.edge_bounds[1:-1]), right=True) for (_, h), i in zip(rels, ids)
        ]
        tagged = torch.stack([torch.cat(ids), torch.cat([torch.full_like(i, r) for r, i in enumerate(ids)])], 1)
        asked, _, _, receive = ex.ask(tagged, torch.cat(owners))
        asker = torch.repeat_interleave(torch.arange(ex.size), torch.tensor(receive, dtype=torch.int64))
        return [
            (asker[asked[:, 1] == r], asked[asked[:, 1] == r, 0] - hopper.edge_start)
            for r, (_, hopper) in enumerate(rels)
        ]

    def _draw(self, reached: dict, hop: int, generator, exclude) -> dict:
        """Every relation's hop in one exchange (see :class:`_TypedHop`); ``batched`` False: one
        exchange per relation, the reference the batched one is tested equal to."""
        if not self.batched:
            return super()._draw(reached, hop, generator, exclude)
        keys = [kernels.draw_seed(generator) for _ in self._hops]  # in relation order, as one by one
        began = time.perf_counter()
        try:
            return _TypedHop(self, reached, hop, keys).run()
        finally:
            self.exchange.hop_s += time.perf_counter() - began

    def _edge_features(self, edge_ids: dict) -> dict | None:
        return {et: h.sampled_edge_rows() for et, h in self._hops.items() if h.edge_attr is not None} or None

    def fetch(self, nodes: dict[str, torch.Tensor], tables: dict | None = None) -> dict[str, torch.Tensor]:
        """Each type's rows of ``nodes`` (global ids) from its owners, from ``tables`` (a row per
        node of this machine, per type) or the features; a featureless type's ids in the
        dataset's own numbering (the model embeds them, see :meth:`Rows.original_ids`). Every
        type in the same order on every rank, empty or not."""
        out = {}
        for t, rows in self.rows.items():
            ids = nodes.get(t, torch.zeros(0, dtype=torch.int64))
            table = tables[t] if tables is not None else rows.x
            got = rows.original_ids(ids) if table is None else rows.fetch(ids, table)
            if t in nodes:
                out[t] = got
        return out


class PartStore(GraphStore):
    """A machine's part as the sampler's store: no library graph is built of it (its sources
    name other machines' nodes, which a library graph of the part would refuse)."""

    @property
    def native(self):
        raise TypeError("a machine's part of a partitioned graph has no library graph; it is sampled by core")


class PartitionedSampler(Sampler):
    """Batches of a machine's own seeds (local ids) sampled across machines; each batch comes
    with its rows (``MiniBatch.features``) and its seeds as given, so ``y[seeds]`` reads the part."""

    def __init__(self, store: GraphStore, fanouts: list[int], to_native, exchange: Exchange):
        super().__init__(store, fanouts)
        self._sampler = PartitionSampler.of(store.data, list(fanouts), exchange)
        self._to_native = to_native
        self._generator = epoch_generator(0, 0, 0, stream=1)
        self.exchange = exchange

    def reseed(self, seed: int, epoch: int, rank: int) -> None:
        self._generator = epoch_generator(seed, epoch, rank, stream=1)

    def cache_rows(self, budget: int) -> dict[str, torch.Tensor]:
        return self._sampler.cache_rows(budget)

    def use_remote_cache(self, ids: torch.Tensor, rows: torch.Tensor) -> None:
        """Serve the rows of ``ids`` (sorted; other machines' nodes) from ``rows``."""
        self._sampler.remote = (ids, rows)

    def loader(self, batches: list[torch.Tensor]) -> Iterable[MiniBatch]:
        start = self._sampler.start
        for seeds in batches:
            sub = self._sampler.sample(seeds + start, self._generator)
            features = self._sampler.fetch(sub.node)
            yield MiniBatch(seeds, sub.node, self._to_native(sub), features=features)


class _TypedHop:
    """One hop of every relation of a heterogeneous part in four ``all_to_all`` rounds instead of
    four per relation: each machine is asked once for all the frontier nodes it owns, of every
    type (tagged by type); it samples every relation into each node's type, with each
    relation's own key, and answers how many neighbours each node took per relation, then the
    neighbours and edge ids, grouped by asker, then relation, then node. The asker cuts each
    relation's edges back out and puts them in frontier order, as the one-relation hop does: the
    sample is the same (tested), the rounds per hop do not grow with the relations. Edge
    features, whose widths differ per relation, follow in a round per relation that has them."""

    def __init__(self, sampler: PartitionHeteroSampler, reached: dict, hop: int, keys: list[int]):
        self.sampler, self.hop, self.keys = sampler, hop, keys
        self.types = list(sampler.rows)
        self.frontier = [reached.get(t, _NO_IDS) for t in self.types]
        self.offsets = [0, *torch.tensor([f.numel() for f in self.frontier]).cumsum(0).tolist()]
        self.rels = list(sampler._hops.items())

    def run(self) -> dict:
        ex = self.sampler.exchange
        kinds = torch.cat([torch.full((f.numel(),), i, dtype=torch.int64) for i, f in enumerate(self.frontier)])
        owners = torch.cat([self.sampler.rows[t].part.owners(f) for t, f in zip(self.types, self.frontier)])
        ids = torch.stack([torch.cat(self.frontier), kinds], dim=1)
        asked, order, send, receive = ex.ask(ids, owners)
        ex.remote_nodes += sum(send) - send[ex.me]
        asker = torch.repeat_interleave(torch.arange(ex.size), torch.tensor(receive, dtype=torch.int64))
        taken, answers = self._answer(asked, asker)
        got_taken = ex.swap(taken, receive, send)  # per node sent, per relation, in the order sent
        at = torch.cat([a[0] for a in answers])
        rel = torch.cat([torch.full((a[0].numel(),), r, dtype=torch.int64) for r, a in enumerate(answers)])
        grouped = torch.argsort(asker[at] * len(self.rels) + rel, stable=True)  # by asker, relation, node
        out_edges = torch.stack([torch.cat([a[1] for a in answers]), torch.cat([a[2] for a in answers])], 1)
        edges_out = torch.bincount(asker[at], minlength=ex.size).tolist()
        edges_in = [int(t.sum()) for t in got_taken.split(send)]
        got = ex.swap(out_edges[grouped], edges_out, edges_in)
        return self._unpack(got, got_taken, order, send, answers, asker)

    def _answer(self, asked: torch.Tensor, asker: torch.Tensor) -> tuple[torch.Tensor, list]:
        """What this machine answers: ``taken[node asked, relation]`` and, per relation, (each
        edge's row in ``asked``, its neighbour, its global edge id). A link batch's left-out
        edges are redrawn per asker (each asker's own, :func:`leave_out`)."""
        taken = torch.zeros((asked.shape[0], len(self.rels)), dtype=torch.int64)
        answers = []
        banned = self.sampler.banned
        for r, (et, hopper) in enumerate(self.rels):
            rows = (asked[:, 1] == self.types.index(et[2])).nonzero().flatten()
            fanout = self.sampler.fanouts[et][self.hop]
            local = asked[rows, 0] - hopper.start
            nbr, eid, within = hopper._hop(local, fanout, self.keys[r])
            if banned is not None and banned[r][1].numel() and rows.numel():
                again = torch.Generator().manual_seed(self.keys[r] ^ 0x5DEECE66D)  # the redraw's own stream
                nbr, eid, within = leave_out(
                    hopper.indptr, hopper.indices, local, (nbr, eid, within), banned[r][1], fanout, again,
                    groups=asker[rows], banned_groups=banned[r][0],
                )  # fmt: skip
                by_node = torch.argsort(within, stable=True)  # the answer lists a node's edges together
                nbr, eid, within = nbr[by_node], eid[by_node], within[by_node]
            taken[rows, r] = torch.bincount(within, minlength=rows.numel())
            answers.append((rows[within], nbr, eid + hopper.edge_start, eid))
        return taken, answers

    def _unpack(self, got, got_taken, order, send, answers, asker) -> dict:
        """Each relation's (neighbours, edge ids, index into its destinations' frontier), in
        frontier order, cut out of ``got`` (grouped by answering machine, then relation)."""
        ex, drawn = self.sampler.exchange, {}
        per_peer = [t.sum(0) for t in got_taken.split(send)]  # [relations] edges from each machine
        starts = torch.tensor([0, *[int(c.sum()) for c in per_peer]]).cumsum(0).tolist()
        for r, (et, hopper) in enumerate(self.rels):
            pieces = [
                torch.arange(starts[p] + int(per_peer[p][:r].sum()), starts[p] + int(per_peer[p][: r + 1].sum()))
                for p in range(ex.size)
            ]
            mine = torch.cat(pieces)
            sent_row = torch.repeat_interleave(torch.arange(got_taken.shape[0]), got_taken[:, r])
            position = order[sent_row] - self.offsets[self.types.index(et[2])]
            back = torch.argsort(position, stable=True)  # frontier order, as the backends' CSC reads it
            if hopper.edge_attr is not None:
                coming = [int(c[r]) for c in per_peer]
                hopper._edge_rows.append(self._edge_rows(hopper, answers[r], asker, coming)[back])
            drawn[et] = (got[mine, 0][back], got[mine, 1][back], position[back])
        return drawn

    def _edge_rows(self, hopper, answer, asker, coming: list[int]) -> torch.Tensor:
        """The relation's edge feature rows, sent by the machines that sampled them (``coming``
        from each), in the order the asker cut the relation's edges (by machine, then node)."""
        peers = asker[answer[0]]  # already grouped by asker: the answer's rows are in asked order
        out = torch.bincount(peers, minlength=self.sampler.exchange.size).tolist()
        return self.sampler.exchange.swap(gather_rows(hopper.edge_attr, answer[3]), out, coming)


class PartitionedHeteroSampler(Sampler):
    """Batches of a machine's own seeds of the labelled type (local ids), sampled across
    machines by :class:`PartitionHeteroSampler`, each with its rows (``MiniBatch.features``:
    ``{type: rows}``, a featureless type's ids)."""

    def __init__(self, store: GraphStore, fanouts: dict, to_native, exchange: Exchange):
        super().__init__(store, next(iter(fanouts.values())))
        self._sampler = PartitionHeteroSampler(store.data, fanouts, exchange)
        self._to_native = to_native
        self._generator = epoch_generator(0, 0, 0, stream=1)
        self.exchange = exchange
        self.target = store.data.target_node

    def reseed(self, seed: int, epoch: int, rank: int) -> None:
        self._generator = epoch_generator(seed, epoch, rank, stream=1)

    def loader(self, batches: list[torch.Tensor]) -> Iterable[MiniBatch]:
        start = self._sampler.rows[self.target].start
        for seeds in batches:
            sub = self._sampler.sample({self.target: seeds + start}, self._generator)
            features = self._sampler.fetch(sub.node)
            yield MiniBatch(seeds, sub.node, self._to_native(sub), features=features)


class PartitionedLinkSampler(PartitionedHeteroSampler):
    """Link batches of a machine's part of a link task
    (:class:`~gnnbridge.core.storage.linkparts.PartLinkGraph`): training batches of its own train
    edges (local ids), each with its negatives drawn over every machine's destinations and its
    own edges, twins and mirrors left out of the hops on whichever machine owns them; held-out
    batches of the val or test edges whose destination it owns, with their fixed negatives, and
    of the shared negative pairs it holds. Each batch comes with its rows
    (``MiniBatch.features``)."""

    def __init__(self, store: GraphStore, fanouts: dict, to_native, exchange: Exchange, negatives: int):
        super().__init__(store, fanouts, to_native, exchange)
        self._links = LinkBatcher(store.data, self._sampler, negatives)
        self.negatives_from = epoch_generator(0, 0, 0, stream=NEGATIVES_STREAM)

    def reseed(self, seed: int, epoch: int, rank: int) -> None:
        super().reseed(seed, epoch, rank)
        self.negatives_from = epoch_generator(seed, epoch, rank, stream=NEGATIVES_STREAM)

    def loader(self, batches: list[torch.Tensor]) -> Iterable[LinkMiniBatch]:
        for eids in batches:
            yield self._native(*self._links.train_batch(eids, self._generator, self.negatives_from))

    def held_out_loader(self, split: str, batches: list[torch.Tensor]) -> Iterable[LinkMiniBatch]:
        for ids in batches:
            yield self._native(*self._links.held_out_batch(split, ids, self._generator))

    def pairs_loader(self, src: torch.Tensor, dst: torch.Tensor, batch: int) -> Iterable[LinkMiniBatch]:
        """(src, dst) pairs of the target type (global ids; the shared protocol's negative pairs
        whose destination this machine owns), ``batch`` at a time and at least one batch: each is
        a collective, so a rank with no pairs joins with an empty one."""
        none = torch.zeros(0, dtype=torch.int64)
        for ids in torch.tensor_split(torch.arange(src.numel()), max(1, -(-src.numel() // batch))):
            yield self._native(
                *self._links.pairs_batch(ids, src[ids], dst[ids], none.view(ids.numel(), 0), self._generator)
            )

    def _native(self, sub, mb: LinkMiniBatch) -> LinkMiniBatch:
        mb.features = self._sampler.fetch(sub.node)
        mb.graph = self._to_native(sub)
        return mb
