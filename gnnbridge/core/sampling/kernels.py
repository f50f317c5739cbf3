"""Compiled CPU kernels for the neighbour sampler (numba), and the random numbers both paths share.

Why compiled: the vectorised torch sampler makes about ten passes over each hop's arrays
(degrees, clamps, repeat_interleave, cumsum, scatter, unique, argsort...), each allocating, so it
ran at half the speed of DGL's C++ sampler on one thread and a third on two. A loop that visits
every frontier node once does the same work in one pass. numba installs as a wheel (no compiler
in the install), and keeps the kernel next to the torch code it mirrors.

Why a hash instead of a generator: the picks of frontier node ``i`` at draw ``c`` come from
``uniform(seed, i * fanout + c)``, a SplitMix64 counter, the same function in numba (CPU) and in
torch (CUDA, or CPU without numba). So the two paths return identical samples, and a sample does
not depend on how many threads drew it. Integers wrap as 64-bit two's complement in both; the
logical right shift SplitMix64 needs is an arithmetic shift and a mask.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import torch

from gnnbridge.core.compiled import numba, parallel_launch, signals_deferred, threads
from gnnbridge.core.storage.folder import TopologyError

GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15 as int64
MIX1 = -4658895280553007687  # 0xBF58476D1CE4E5B9
MIX2 = -7723592293110705685  # 0x94D049BB133111EB
MASK53 = (1 << 53) - 1
INV53 = 1.0 / (1 << 53)
PARALLEL_MIN_PICKS = 16384  # picks from which a hop runs in parallel (a launch of numba's threads costs ~0.1 ms)
SERIAL = 2**62  # a min_parallel no hop reaches: every hop serial
PICK_CHUNK = 256  # frontier nodes picked, then read, at a time: their edge ids stay in cache between the two loops
# What a kernel found wrong with the arrays it read (``fault[0]``; see ``_take``): the topology
# comes from files, and a corrupt file must be one line, never a read out of bounds.
NODE_OUTSIDE, OFFSETS_OUTSIDE, SOURCE_OUTSIDE = 1, 2, 3


def available() -> bool:
    """Whether the compiled CPU path can run (``GNNBRIDGE_SAMPLER_KERNEL=torch`` turns it off)."""
    return numba is not None and os.environ.get("GNNBRIDGE_SAMPLER_KERNEL", "numba") != "torch"


def _shr(z: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 values."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def uniform(seed: int, counter: torch.Tensor) -> torch.Tensor:
    """Float64 uniforms in [0, 1), one per counter: SplitMix64 of ``seed + counter * GOLDEN``."""
    z = seed + counter * GOLDEN
    z = (z ^ _shr(z, 30)) * MIX1
    z = (z ^ _shr(z, 27)) * MIX2
    z = z ^ _shr(z, 31)
    return (_shr(z, 11) & MASK53).double() * INV53


def draw_seed(generator: torch.Generator | None) -> int:
    """One 62-bit key per hop from the caller's generator (reproducible given the generator)."""
    return int(torch.randint(0, 2**62, (1,), generator=generator).item())


if numba is not None:
    from numba import njit, prange

    @njit(cache=True, inline="always")
    def _lsr(z, bits):
        return (z >> bits) & ((np.int64(1) << (64 - bits)) - 1)

    @njit(cache=True, inline="always")
    def _uniform(seed, counter):
        z = np.int64(seed) + np.int64(counter) * np.int64(GOLDEN)
        z = (z ^ _lsr(z, 30)) * np.int64(MIX1)
        z = (z ^ _lsr(z, 27)) * np.int64(MIX2)
        z = z ^ _lsr(z, 31)
        return np.float64(_lsr(z, 11) & np.int64(MASK53)) * INV53

    @njit(cache=True, nogil=True)
    def _take(indptr, frontier, fanout, fault):
        """(offsets, starts, degrees): where each frontier node's picks go (node i takes
        min(degree, fanout), or all), and where its neighbours are. A tight loop reads
        ``indptr`` at random here with many reads in flight; the picks then read these arrays
        in order, where each node waited for its own read (Reddit scale: 10-25% more edges/s).

        A node outside the graph, or offsets that leave ``[0, E]`` or run backwards (a corrupt
        file), take nothing and are recorded in ``fault`` (see :func:`_fault`): never a read
        out of bounds."""
        n, num_nodes, num_edges = frontier.shape[0], indptr.shape[0] - 1, np.int64(fault[3])
        offsets, starts, degs = np.empty(n + 1, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
        offsets[0] = 0
        for i in range(n):
            v = frontier[i]
            if v < 0 or v >= num_nodes:
                _fault(fault, NODE_OUTSIDE, i, v)
                starts[i], degs[i] = 0, 0
            else:
                starts[i] = indptr[v]
                degs[i] = indptr[v + 1] - starts[i]
                if starts[i] < 0 or degs[i] < 0 or starts[i] + degs[i] > num_edges:
                    _fault(fault, OFFSETS_OUTSIDE, v, starts[i] if starts[i] < 0 or degs[i] < 0 else indptr[v + 1])
                    starts[i], degs[i] = 0, 0
            offsets[i + 1] = offsets[i] + (degs[i] if fanout < 0 or degs[i] <= fanout else fanout)
        return offsets, starts, degs

    @njit(cache=True, inline="always")
    def _fault(fault, kind, where, value):
        """The first fault of a call: ``fault[0:3] = (kind, where, value)``; ``fault[3]`` holds
        the edge count and ``fault[4]`` the source-node count the checks compare with."""
        if fault[0] == 0:
            fault[0], fault[1], fault[2] = kind, where, value

    @njit(cache=True, nogil=True)
    def _pick_nodes(indices, starts, degs, seed, offsets, edge, src, col, at, col_base, lo, hi, fault):
        """Edge ids picked for frontier nodes lo..hi-1 into ``edge[at + offsets[i]:]``, ``col`` =
        col_base + i, then their global source ids into ``src``.

        Floyd's algorithm: for j = deg-k .. deg-1 draw t in [0, j]; keep t unless taken, else j.

        The sources are read here, where the loop runs in parallel, not in the serial relabel:
        each is a random read of ``indices`` (a cache miss, the slow part). And they are read in
        a loop of their own after the picks: a tight loop keeps many misses in flight, where
        reads interleaved with the picks' hashing and branches waited one by one (at Reddit scale
        one thread's hop 2 took 12.5 ms interleaved, 9.8 ms as two loops).

        A source id outside ``[0, fault[4])`` (a corrupt ``indices`` file) becomes 0 and is
        recorded in ``fault``: the relabel and the feature gather index by these ids.
        """
        for i in range(lo, hi):
            start, deg = starts[i], degs[i]
            o = at + offsets[i]
            k = offsets[i + 1] - offsets[i]
            for c in range(k):
                col[o + c] = col_base + i
                if k == deg:
                    edge[o + c] = start + c
                    continue
                j = deg - k + c
                t = min(np.int64(_uniform(seed, i * k + c) * (j + 1)), j)
                pick = start + t
                for q in range(o, o + c):
                    if edge[q] == pick:
                        pick = start + j
                        break
                edge[o + c] = pick
        num_src = fault[4]
        for e in range(at + offsets[lo], at + offsets[hi]):
            u = indices[edge[e]]
            if u < 0 or u >= num_src:
                _fault(fault, SOURCE_OUTSIDE, edge[e], u)
                u = 0
            src[e] = u

    # Two functions, not one compiled twice: numba's on-disk cache keys a kernel by its function
    # and argument types, not by ``parallel=``, so one function jitted both ways made whichever
    # variant compiled first stand in for both in every later process (measured: the "serial"
    # loop paid the parallel launch, ~0.1 ms, and on 2 threads the "parallel" one could run on one).
    @njit(cache=True, nogil=True)
    def _picks_serial(indices, starts, degs, seed, offsets, edge, src, col, at, col_base, fault):
        for lo in range(0, degs.shape[0], PICK_CHUNK):
            hi = min(lo + PICK_CHUNK, degs.shape[0])
            _pick_nodes(indices, starts, degs, seed, offsets, edge, src, col, at, col_base, lo, hi, fault)

    @njit(cache=True, nogil=True, parallel=True)
    def _picks_parallel(indices, starts, degs, seed, offsets, edge, src, col, at, col_base, fault):
        """The same on numba's threads, a chunk of nodes each; a launch costs ~0.1 ms, so only
        large hops take it."""
        for b in prange((degs.shape[0] + PICK_CHUNK - 1) // PICK_CHUNK):
            lo = np.int64(b) * PICK_CHUNK  # prange may hand out unsigned indices; stay in int64
            hi = min(lo + PICK_CHUNK, degs.shape[0])
            _pick_nodes(indices, starts, degs, seed, offsets, edge, src, col, at, col_base, lo, hi, fault)

    @njit(cache=True, nogil=True)
    def _pick_hop(indptr, indices, frontier, fanout, seed, edge, src, col, at, col_base, min_parallel, fault):
        """One hop's picks appended at ``at`` (buffers grown to fit); returns (edge, src, col, end)."""
        offsets, starts, degs = _take(indptr, frontier, fanout, fault)
        end = at + offsets[-1]
        edge, src, col = _grow(edge, end), _grow(src, end), _grow(col, end)
        if offsets[-1] >= min_parallel and degs.shape[0] > PICK_CHUNK:  # one chunk has nothing to share
            _picks_parallel(indices, starts, degs, seed, offsets, edge, src, col, at, col_base, fault)
        else:
            _picks_serial(indices, starts, degs, seed, offsets, edge, src, col, at, col_base, fault)
        return edge, src, col, end

    @njit(cache=True, nogil=True)
    def _grow(buf, size):
        """``buf`` if it holds ``size`` items, else a copy with room for twice that."""
        if buf.shape[0] >= size:
            return buf
        out = np.empty(max(2 * size, 16), buf.dtype)
        out[: buf.shape[0]] = buf
        return out

    @njit(cache=True, nogil=True)
    def _relabel_into(local, row, lo, hi, nodes, count, skip):
        """Global source ids in ``row[lo:hi]`` turned into local ids, in place; unseen nodes
        numbered from ``count`` in order of first appearance and written to ``nodes[count -
        skip]`` on (``skip``: ids below it are not kept in ``nodes``). Returns (nodes, count).

        Without branches: whether a node is new is a coin flip the CPU cannot predict (hop 2 at
        100k nodes: 0.89 -> 0.67 ms; at Reddit scale 2.4 -> 2.1 ms, where the misses on ``local``
        dominate). Every step stores ``local[v]`` and ``nodes[count - skip]``; for a known node those
        write what was there and a slot the next new node overwrites (``nodes`` has room for one
        per edge).
        """
        nodes = _grow(nodes, count - skip + hi - lo)
        for e in range(lo, hi):
            v = row[e]
            lid = local[v]
            new = lid < 0
            lid = count if new else lid
            local[v] = lid
            nodes[count - skip] = v
            count += new
            row[e] = lid
        return nodes, count

    @njit(cache=True, nogil=True)
    def _sample_layers(indptr, indices, seeds, fanouts, keys, local, min_parallel, fault, nodes, row, col, edge):
        """Every hop and relabel of one batch in compiled code, written into the given buffers
        (grown by doubling where too small): (nodes, row, col, edge, node_counts, edge_counts),
        the buffers whole; ``node_counts`` and ``edge_counts`` say how much of each is the batch.

        ``local`` is the dense global -> local map (int32 or int64), all -1 on entry and again on
        return. A fault (see :func:`_take`) ends the batch early with nothing in it.
        """
        n = seeds.shape[0]
        nodes = _grow(nodes, 2 * n)
        nodes[:n] = seeds
        node_counts = np.zeros(fanouts.shape[0] + 1, np.int64)
        edge_counts = np.zeros(fanouts.shape[0], np.int64)
        for s in range(n):
            if seeds[s] < 0 or seeds[s] >= local.shape[0]:
                _fault(fault, NODE_OUTSIDE, s, seeds[s])
                for r in range(s):
                    local[seeds[r]] = -1
                return nodes, row, col, edge, node_counts, edge_counts
            local[seeds[s]] = s
        node_counts[0] = n
        at, start, total = 0, 0, n
        for h in range(fanouts.shape[0]):
            edge, row, col, end = _pick_hop(
                indptr, indices, nodes[start:total], fanouts[h], keys[h], edge, row, col, at, start, min_parallel, fault
            )
            nodes, count = _relabel_into(local, row, at, end, nodes, total, 0)
            edge_counts[h], node_counts[h + 1] = end - at, count - total
            at, start, total = end, total, count
        for v in range(total):
            local[nodes[v]] = -1
        return nodes, row, col, edge, node_counts, edge_counts

    @njit(cache=True, nogil=True)
    def _sample_hop(indptr, indices, frontier, fanout, seed, min_parallel, fault):
        empty = np.empty(0, np.int64)
        edge, src, owner, end = _pick_hop(
            indptr, indices, frontier, fanout, seed, empty, empty, empty, 0, 0, min_parallel, fault
        )
        return src[:end], edge[:end], owner[:end]

    @njit(cache=True, nogil=True)
    def _relabel(local, nbr, first_id, fault):
        """Local ids of ``nbr``, numbering unseen nodes from ``first_id``: (new nodes, local ids);
        an id outside ``local`` is a fault, and nothing is relabelled."""
        for e in range(nbr.shape[0]):
            if nbr[e] < 0 or nbr[e] >= local.shape[0]:
                _fault(fault, NODE_OUTSIDE, e, nbr[e])
                return np.empty(0, np.int64), np.empty(0, np.int64)
        out = nbr.copy()
        nodes, count = _relabel_into(local, out, 0, out.shape[0], np.empty(out.shape[0], np.int64), first_id, first_id)
        return nodes[: count - first_id].copy(), out


@signals_deferred()
def warm() -> None:
    """Load (or compile, the first time) every kernel now: about half a second per process that
    would otherwise land in the first batch, and so in the first epoch's time."""
    if not available():
        return
    indptr, indices = torch.tensor([0, 1, 2]), torch.tensor([1, 0])
    sample_layers(indptr, indices, torch.tensor([0]), [1, -1], [1, 2], torch.full((2,), -1, dtype=torch.int32))
    sample_hop(indptr, indices, torch.tensor([0]), 1, 1, 2)
    relabel(torch.full((2,), -1), torch.tensor([1]), 0)


@signals_deferred()
def start_numba() -> None:
    """numba's own start (its typing and target registries: about 0.5 s of CPU, paid once per
    process at the first kernel) and the one kernel that starts no threads, for a process that
    others are forked from (the ranks' fork server; see
    :data:`~gnnbridge.core.training.trainer.RANK_MODULES`). The other kernels are left to
    :func:`warm` in each rank: loading one with a parallel loop starts numba's thread pool, and a
    fork keeps no thread of its parent."""
    if available():
        relabel(torch.full((2,), -1), torch.tensor([1]), 0)


class OutputBuffers:
    """The arrays ``sample_layers`` writes a batch into, reused once nothing holds the last batch.

    Why: a 2-hop batch at 100k nodes writes about 12 MB of fresh arrays. glibc hands blocks that
    large back to the OS on free, so every batch paid a first-touch page fault per 4 KiB page
    again: 8 of a hop's 12 ms (measured), and the reason a second thread gained nothing. Keeping
    the arrays and writing the next batch into them skips that.

    Reuse is safe by construction: a set of arrays is handed out again only when no tensor made
    from it is alive (the returned tensors hold their array through ``torch.from_numpy``, so the
    array's reference count says so). A caller that keeps batches (a prefetch queue, a list)
    simply gets fresh arrays; at most ``depth`` sets are kept.
    """

    def __init__(self, depth: int = 4):
        self.depth = depth
        self._sets: list[list[np.ndarray]] = []

    def take(self) -> list[np.ndarray]:
        """A free set (removed from the pool until ``give`` puts it back), or a new empty one."""
        for i, arrays in enumerate(self._sets):
            if _unreferenced(arrays):
                return self._sets.pop(i)
        return [np.empty(0, np.int64) for _ in range(4)]

    def give(self, arrays: list[np.ndarray]) -> None:
        """Keep ``arrays`` (maybe grown by the kernel) for a later batch, the newest first."""
        self._sets.insert(0, arrays)
        del self._sets[self.depth :]


def _counts(arrays: list[np.ndarray]) -> list[int]:
    return [sys.getrefcount(a) for a in arrays]


# What ``_counts`` reports for an array only a list holds, measured the same way rather than
# assumed: how many references the interpreter itself adds while counting differs between
# Python versions (3.14 borrows references on the stack), and a count one too high would let a
# batch still in use be overwritten.
_FREE = _counts([np.empty(0)])[0]


def _unreferenced(arrays: list[np.ndarray]) -> bool:
    """Whether only the pool's list holds these arrays."""
    return all(count <= _FREE for count in _counts(arrays))


@signals_deferred()
def sample_layers(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    seeds: torch.Tensor,
    fanouts: list[int],
    keys: list[int],
    local: torch.Tensor,
    buffers: OutputBuffers | None = None,
):
    """All hops of one batch on CPU tensors (see ``_sample_layers``), as torch tensors that view
    ``buffers``' arrays (fresh arrays without ``buffers``)."""
    pool = buffers or OutputBuffers(depth=0)
    min_parallel = _min_parallel()
    fault = _no_fault(indices, local.shape[0])
    with parallel_launch(min_parallel < SERIAL):
        out = _sample_layers(
            indptr.numpy(),
            indices.numpy(),
            seeds.numpy(),
            np.asarray(fanouts, dtype=np.int64),
            np.asarray(keys, dtype=np.int64),
            local.numpy(),
            min_parallel,
            fault,
            *pool.take(),
        )
    _raise_fault(fault, indptr, indices)
    arrays, node_counts, edge_counts = list(out[:4]), out[4].tolist(), out[5].tolist()
    nodes, edges = sum(node_counts), sum(edge_counts)
    tensors = [torch.from_numpy(a)[:size] for a, size in zip(arrays, (nodes, edges, edges, edges))]
    pool.give(arrays)
    return (*tensors, node_counts, edge_counts)


def _min_parallel() -> int:
    """The number of picks from which a hop runs in parallel (numba's thread count set first)."""
    return PARALLEL_MIN_PICKS if threads() > 1 else SERIAL


@signals_deferred()
def sample_hop(
    indptr: torch.Tensor, indices: torch.Tensor, frontier: torch.Tensor, fanout: int, seed: int, num_src: int
):
    """The compiled hop on CPU tensors: same result as the torch path for the same ``seed``.
    ``num_src``: how many source nodes ``indices`` may name (ids are checked against it)."""
    min_parallel = _min_parallel()
    fault = _no_fault(indices, num_src)
    with parallel_launch(min_parallel < SERIAL):
        nbr, eid, owner = _sample_hop(
            indptr.numpy(), indices.numpy(), frontier.numpy(), fanout, seed, min_parallel, fault
        )
    _raise_fault(fault, indptr, indices)
    return torch.from_numpy(nbr), torch.from_numpy(eid), torch.from_numpy(owner)


@signals_deferred()
def relabel(local: torch.Tensor, nbr: torch.Tensor, first_id: int):
    """The compiled relabel on CPU tensors: (new nodes, local ids of ``nbr``); updates ``local``."""
    fault = _no_fault(nbr, local.shape[0])
    new, out = _relabel(local.numpy(), nbr.numpy(), first_id, fault)
    if fault[0]:
        raise TopologyError(f"a sampled node id {int(fault[2])} lies outside [0, {local.shape[0]})", None)
    return torch.from_numpy(new), torch.from_numpy(out)


def _no_fault(indices, num_src: int) -> np.ndarray:
    """A kernel's fault record: nothing yet, then the bounds it checks (edges, source nodes)."""
    return np.array([0, 0, 0, indices.shape[0], num_src], dtype=np.int64)


def _raise_fault(fault: np.ndarray, indptr: torch.Tensor, indices: torch.Tensor) -> None:
    kind, where, value = (int(v) for v in fault[:3])
    if kind == NODE_OUTSIDE:
        raise TopologyError(f"node id {value} lies outside the graph's {indptr.shape[0] - 1} nodes", None)
    if kind == OFFSETS_OUTSIDE:
        raise TopologyError(
            f"the offsets of node {where} reach {value}, outside [0, {int(fault[3])}] (the edge count) "
            "or running backwards",
            indptr,
        )
    if kind == SOURCE_OUTSIDE:
        raise TopologyError(
            f"edge {where} names source node {value}, outside [0, {int(fault[4])})",
            indices,
        )
