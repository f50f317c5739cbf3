"""Every gather of feature rows, ``table[ids]`` as float32: one function, ``gather_rows``.

Why a function of its own: a table memory-mapped from a folder (``np.load(mmap_mode="r")``)
is read by page faults, and torch's index on it faults one page at a time per thread, so on a
cold page cache a batch's rows would arrive at the disk's queue-depth-1 rate. Such a table is
gathered by a compiled loop (numba, releasing the GIL) run on ``placement.read_depth`` threads
of a pool of its own: a thread blocked in a page fault uses no CPU, so the number of faults in
flight, the disk's queue depth, is what sets the rate, and numba's own pool (fixed at import,
a rank's share of the cores) would keep it at one or two. A folder too large for the page cache
is also advised ``MADV_RANDOM`` by its opener (:func:`advise`), so that a fault reads its page
and not the kernel's read-around window (often megabytes) around a row of a few kilobytes.
Features stored as float16 or bfloat16 are upcast in the same pass (``table[ids].float()`` would
copy every row twice). A float32 table in RAM, or mapped and not advised random (it fits in the
page cache), is what a model may read in place (:func:`reads_in_place`); gathered, a small one
is plain indexing and a large one the compiled loop on numba's threads.

``placement.feature_cache`` keeps the rows of the highest in-degree nodes (the most sampled) in
RAM (:class:`FeatureCache`); ``gather_rows`` serves those from it and counts its hits. What a
gather consults (the caches, which tables are mapped or advised random, the reader pool) is held
by one :class:`FeatureStore` per process, :data:`STORE`, which the module's functions use. A run
holds it once per machine: its rows are built by the machine's first rank and mapped by all
(:func:`~gnnbridge.core.inference.placement.feature_caches`); the hits are counted per rank.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from gnnbridge.core.compiled import numba, parallel_launch, signals_deferred, threads

LARGE_TABLE_BYTES = 1 << 30  # a CPU table this large gathers compiled even in RAM (its rows miss every cache)
PARALLEL_MIN_BYTES = 1 << 20  # bytes gathered from which numba's threads are used (a launch costs ~0.1 ms)
ROW_CHUNK = 64  # rows per parallel task
FILL_BYTES = 64 << 20  # float32 bytes a 16-bit cache is filled through at a time
READ_DEPTH = 32  # placement.read_depth's default: faults in flight per rank on a mapped table

# float16 and bfloat16 bit patterns -> float32, exactly: bfloat16 is float32's high half (a
# shift), float16's table is numpy's own conversion. 256 KiB each: they stay in the L2 cache.
_UPCAST = {
    torch.bfloat16: (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32),
    torch.float16: np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32),
}


def _empty_rows(n: int, width: int, pinned: bool) -> torch.Tensor | None:
    """A page-locked float32 ``[n, width]`` when asked for and a GPU is there; else None (the
    gather allocates as it always does)."""
    if not pinned or not torch.cuda.is_available():
        return None
    return torch.empty((n, width), dtype=torch.float32, pin_memory=True)


def _key(table: torch.Tensor) -> tuple[int, int]:
    return table.untyped_storage().data_ptr(), table.untyped_storage().nbytes()


def _numpy_rows(table: torch.Tensor) -> np.ndarray:
    """The table as a numpy array the kernel reads: 16-bit tables as their bit patterns."""
    if table.dtype in _UPCAST:
        return table.view(torch.int16).numpy().view(np.uint16)
    return table.numpy()


def _in_file_mapping(address: int) -> bool:
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split(maxsplit=5)
                lo, hi = (int(v, 16) for v in parts[0].split("-"))
                if lo <= address < hi:
                    path = parts[5].strip() if len(parts) > 5 else ""
                    return path.startswith("/") and not path.startswith("/dev/shm/") and "(deleted)" not in path
    except (OSError, ValueError):
        pass
    return False


def _torch_gather(
    table: torch.Tensor, ids: torch.Tensor, cache: FeatureCache | None, into: torch.Tensor | None = None
) -> torch.Tensor:
    """The same without numba: cached rows from the cache, the rest indexed."""
    if cache is None:
        return table[ids].float() if into is None else into.copy_(table[ids])
    pos, hit = cache.lookup(ids)
    out = torch.empty((ids.numel(), table.shape[1]), dtype=torch.float32) if into is None else into
    out[hit] = cache.rows[pos[hit]].float()
    out[~hit] = table[ids[~hit]].float()
    cache.count(int(hit.sum()), ids.numel())
    return out


if numba is not None:
    from numba import njit, prange

    @njit(cache=True, nogil=True, inline="always")
    def _find(cached_ids, v):
        """Where ``v`` is in the sorted ``cached_ids``, or -1."""
        k = cached_ids.shape[0]
        if k == 0:
            return -1
        at = np.searchsorted(cached_ids, v)
        return at if at < k and cached_ids[at] == v else -1

    @njit(cache=True, nogil=True)
    def _copy_into(src, ids, cached_ids, cached, lut, out, lo, hi):
        """Rows lo..hi-1 of ``out``: each id's row from ``cached`` (when its id is there) or
        ``src``. Returns how many came from ``cached``."""
        hits = 0
        for i in range(lo, hi):
            at = _find(cached_ids, ids[i])
            row = cached[at] if at >= 0 else src[ids[i]]
            hits += at >= 0
            for j in range(row.shape[0]):
                out[i, j] = row[j]
        return hits

    @njit(cache=True, nogil=True)
    def _decode_into(src, ids, cached_ids, cached, lut, out, lo, hi):
        """The same for 16-bit rows, each value upcast through ``lut`` (its bit pattern's float32)."""
        hits = 0
        for i in range(lo, hi):
            at = _find(cached_ids, ids[i])
            row = cached[at] if at >= 0 else src[ids[i]]
            hits += at >= 0
            for j in range(row.shape[0]):
                out[i, j] = lut[row[j]]
        return hits

    # Serial and parallel as separate functions, not one jitted both ways (see kernels.py:
    # numba's on-disk cache ignores parallel=); copy and decode too (their element types differ).
    @njit(cache=True, nogil=True)
    def _copy_serial(src, ids, cached_ids, cached, lut, out):
        return _copy_into(src, ids, cached_ids, cached, lut, out, 0, ids.shape[0])

    @njit(cache=True, nogil=True)
    def _decode_serial(src, ids, cached_ids, cached, lut, out):
        return _decode_into(src, ids, cached_ids, cached, lut, out, 0, ids.shape[0])

    @njit(cache=True, nogil=True, parallel=True)
    def _copy_parallel(src, ids, cached_ids, cached, lut, out):
        """Chunks of ROW_CHUNK rows on numba's threads: their page faults are in flight together."""
        chunks = (ids.shape[0] + ROW_CHUNK - 1) // ROW_CHUNK
        hits = np.zeros(chunks, np.int64)
        for b in prange(chunks):
            lo = np.int64(b) * ROW_CHUNK  # prange may hand out unsigned indices; stay in int64
            hits[b] = _copy_into(src, ids, cached_ids, cached, lut, out, lo, min(lo + ROW_CHUNK, ids.shape[0]))
        return hits.sum()

    @njit(cache=True, nogil=True, parallel=True)
    def _decode_parallel(src, ids, cached_ids, cached, lut, out):
        chunks = (ids.shape[0] + ROW_CHUNK - 1) // ROW_CHUNK
        hits = np.zeros(chunks, np.int64)
        for b in prange(chunks):
            lo = np.int64(b) * ROW_CHUNK
            hits[b] = _decode_into(src, ids, cached_ids, cached, lut, out, lo, min(lo + ROW_CHUNK, ids.shape[0]))
        return hits.sum()

    _KERNELS = {
        (False, False): _copy_serial,
        (False, True): _copy_parallel,
        (True, False): _decode_serial,
        (True, True): _decode_parallel,
    }
    _RANGES = {False: _copy_into, True: _decode_into}  # one chunk of rows, for the reader pool


# --------------------------------------------------------------------------- the cache


class FeatureCache:
    """The rows of ``ids`` (sorted) of one table, in the table's dtype, and how often they served.

    ``ids`` and ``rows`` may be shared memory that every rank of the machine maps (one copy per
    machine); ``hits``/``total`` count this rank's rows served from here / rows gathered since
    the last ``reset``."""

    def __init__(self, ids: torch.Tensor, rows: torch.Tensor):
        self.ids, self.rows = ids, rows
        self.hits = 0
        self.total = 0
        self.nbytes = self.rows.nbytes + self.ids.nbytes

    def lookup(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(position in the cache, whether cached) of each id."""
        pos = torch.searchsorted(self.ids, ids).clamp_(max=max(0, self.ids.numel() - 1))
        hit = self.ids[pos] == ids if self.ids.numel() else torch.zeros_like(ids, dtype=torch.bool)
        return pos, hit

    def count(self, hits: int, rows: int) -> None:
        self.hits += hits
        self.total += rows

    def reset(self) -> None:
        self.hits = self.total = 0


class FeatureStore:
    """What gathering knows of the feature tables this process reads, and how it reads them:
    each table's cache (:class:`FeatureCache`, by the table's identity, dropped when the table
    goes), whether its memory is a mapped file and whether it was advised ``MADV_RANDOM`` (by its
    pages: a record derived from another maps the same pages), and the pool of reader threads
    with its depth (``placement.read_depth``), made again in a forked child.

    Why one store per process (:data:`STORE`, behind :func:`gather_rows` and its companions) and
    not one per record or per run: what it knows is a property of the process's mappings, which
    every record mapping the same file shares (a task record derived from a folder's, the ranks'
    re-derived copies, a layer table), and the reader threads are the process's; the many callers
    that gather a bare table (the samplers, the evaluators, the partitioned exchange) then need
    nothing passed down. A test or a tool that wants its own makes another."""

    def __init__(self, read_depth: int = READ_DEPTH):
        self.caches: dict[int, FeatureCache] = {}  # id(table) -> its cache (removed when the table goes)
        self.mapped: dict[tuple[int, int], bool] = {}  # (data pointer, bytes) -> file-backed (only speed depends on it)
        self.random: set[tuple[int, int]] = set()  # (data pointer, bytes) of tables advised MADV_RANDOM
        self.depth = max(1, int(read_depth))
        self._pool: ThreadPoolExecutor | None = None
        self._pid: int | None = None

    # ------------------------------------------------------------------ gathering

    def gather(self, table: torch.Tensor, ids: torch.Tensor, pinned: bool = False) -> torch.Tensor:
        """``table[ids]`` as a new float32 tensor ``[len(ids), F]`` on the table's device.

        ``pinned``: the rows are bound for a GPU, so a CPU table's rows are written into page-locked
        memory. Copied from there, a batch crosses at the link's speed and without blocking the
        host; from ordinary memory CUDA stages it through a bounce buffer first (measured on an
        H200 at Reddit scale: 60 ms of a 350 MB batch's copy). torch's pinned allocator caches the
        buffers and hands one out again only once the copy that read it has finished.
        """
        ids = ids.to(table.device)
        cache = self.cache_of(table)
        out = _empty_rows(ids.numel(), table.shape[1], pinned and table.device.type == "cpu")
        if cache is None and not self.compiled(table):
            if out is None:
                return table[ids].float()
            return torch.index_select(table, 0, ids, out=out) if table.dtype == torch.float32 else out.copy_(table[ids])
        if numba is None or not table.is_contiguous():
            return _torch_gather(table, ids, cache, out)
        return self._compiled_gather(table, ids, cache, out)

    def _compiled_gather(
        self, table: torch.Tensor, ids: torch.Tensor, cache: FeatureCache | None, into: torch.Tensor | None = None
    ) -> torch.Tensor:
        if ids.numel() and not 0 <= int(ids.min()) <= int(ids.max()) < table.shape[0]:  # the kernel does not check
            raise IndexError(f"row ids {int(ids.min())}..{int(ids.max())} outside a table of {table.shape[0]} rows")
        out = np.empty((ids.numel(), table.shape[1]), dtype=np.float32) if into is None else into.numpy()
        src = _numpy_rows(table)
        lut = _UPCAST.get(table.dtype)  # None: float32 rows are copied as they are
        cached_ids = cache.ids.numpy() if cache is not None else np.empty(0, np.int64)
        cached = _numpy_rows(cache.rows) if cache is not None else src[:0]
        args = (src, ids.numpy().astype(np.int64, copy=False), cached_ids, cached, lut, out)
        with signals_deferred():
            if ids.numel() > ROW_CHUNK and self.depth > 1 and self.file_backed(table):
                hits = self._pooled(_RANGES[table.dtype in _UPCAST], args)
            else:
                parallel = bool(out.nbytes >= PARALLEL_MIN_BYTES and ids.numel() > ROW_CHUNK and threads() > 1)
                with parallel_launch(parallel):
                    hits = _KERNELS[table.dtype in _UPCAST, parallel](*args)
        if cache is not None:
            cache.count(int(hits), ids.numel())
        return torch.from_numpy(out) if into is None else into

    def copy_rows(self, table: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """``table[ids]`` in the table's dtype. A table :meth:`gather` reads compiled (a mapped
        one: its page faults in flight together, not one at a time) is read by the kernel too;
        16-bit rows are upcast and cast back (exact both ways), FILL_BYTES of float32 at a time."""
        if numba is None or not table.is_contiguous() or not self.compiled(table):
            return table[ids].contiguous()
        if table.dtype == torch.float32:
            return self._compiled_gather(table, ids, None)
        out = torch.empty((ids.numel(), table.shape[1]), dtype=table.dtype)
        step = max(1, FILL_BYTES // (4 * table.shape[1]))
        for start in range(0, ids.numel(), step):
            out[start : start + step] = self._compiled_gather(table, ids[start : start + step], None)
        return out

    @signals_deferred()
    def warm(self, table: torch.Tensor) -> None:
        """Load (or compile, the first time: seconds) the kernels that will gather ``table``, so
        that the cost lands before the first epoch, not in its time."""
        if numba is None or not table.is_contiguous() or (self.cache_of(table) is None and not self.compiled(table)):
            return
        ids = np.zeros(1, np.int64)
        src, lut = _numpy_rows(table)[:1], _UPCAST.get(table.dtype)  # the types gather passes (None: float32)
        out = np.empty((1, table.shape[1]), np.float32)
        for parallel in (False, True):
            with parallel_launch(parallel):
                _KERNELS[table.dtype in _UPCAST, parallel](src, ids, ids[:0], src[:0], lut, out)
        _RANGES[table.dtype in _UPCAST](src, ids, ids[:0], src[:0], lut, out, 0, 1)

    # ------------------------------------------------------------------ what is known of a table

    def reads_in_place(self, table: torch.Tensor) -> bool:
        """Whether a model may read ``table``'s rows where they are (``IndexedRows``): a float32
        table (a large one too: it saves the copy) without a cache whose hits must be counted, in
        RAM or mapped from a folder the page cache can hold. Not one mapped ``MADV_RANDOM`` (larger
        than the page cache): a model's kernel would fault its rows in one at a time, where the
        gather keeps ``read_depth`` faults in flight."""
        return table.dtype == torch.float32 and self.cache_of(table) is None and not self.read_at_random(table)

    def read_at_random(self, table: torch.Tensor) -> bool:
        """Whether ``table`` was advised ``MADV_RANDOM`` (:meth:`advise`): too large to cache."""
        return _key(table) in self.random

    def compiled(self, table: torch.Tensor) -> bool:
        """Whether a CPU table is gathered by the compiled loop: mapped from a file, 16-bit, or large."""
        if table.device.type != "cpu":
            return False
        return (
            table.dtype in (torch.float16, torch.bfloat16)
            or table.nbytes >= LARGE_TABLE_BYTES
            or self.file_backed(table)
        )

    def file_backed(self, table: torch.Tensor) -> bool:
        """Whether ``table``'s memory is a mapped file (not anonymous or shared memory), from
        ``/proc/self/maps``, read once per table; False where that file does not exist."""
        key = _key(table)
        if key not in self.mapped:
            if len(self.mapped) >= 1024:  # tables come and go (layer outputs): forget the old ones
                self.mapped.clear()
            self.mapped[key] = _in_file_mapping(key[0])
        return self.mapped[key]

    def advise(self, table: torch.Tensor, how: str = "random") -> bool:
        """``madvise`` over a mapped table's pages. ``random``: a page fault reads its own page and
        not the read-around window around it (``read_ahead_kb`` of the device, often megabytes),
        which a random gather of small rows from a file larger than RAM would mostly throw away;
        ``normal``: the kernel's default. False where the platform lacks it (only speed depends on it)."""
        flag = getattr(mmap, f"MADV_{how.upper()}", None)
        if flag is None or table.nbytes == 0:
            return False
        start = table.data_ptr() // mmap.PAGESIZE * mmap.PAGESIZE
        length = table.data_ptr() + table.nbytes - start
        try:
            madvise = ctypes.CDLL(None, use_errno=True).madvise
        except (OSError, AttributeError):
            return False
        madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        if madvise(start, length, flag) != 0:
            return False
        (self.random.add if how == "random" else self.random.discard)(_key(table))
        return True

    # ------------------------------------------------------------------ caches

    def cache_of(self, table: torch.Tensor) -> FeatureCache | None:
        return self.caches.get(id(table))

    def attach_cache(self, table: torch.Tensor, cache: FeatureCache) -> None:
        """Make :meth:`gather` of ``table`` consult ``cache`` (until the table is freed)."""
        key = id(table)
        self.caches[key] = cache
        weakref.finalize(table, self.caches.pop, key, None)

    def detach_cache(self, table: torch.Tensor) -> None:
        self.caches.pop(id(table), None)

    # ------------------------------------------------------------------ the reader threads

    def set_read_depth(self, depth: int) -> None:
        """How many threads gather the rows of a mapped table (``placement.read_depth``)."""
        if depth != self.depth and self._pool is not None:
            if self._pid == os.getpid():  # a forked child's copy has no threads to end
                self._pool.shutdown(wait=True)  # idle threads: they end at once
            self._pool = None
        self.depth = max(1, int(depth))

    def _pooled(self, kernel, args: tuple) -> int:
        """``kernel`` (a compiled row-range copy that releases the GIL) over ``args``'s ids in
        about 4 chunks per reader thread, the chunks in flight together; the hits it counted."""
        n = args[1].shape[0]
        step = max(ROW_CHUNK, -(-n // (4 * self.depth)))
        chunks = [self._readers().submit(kernel, *args, lo, min(lo + step, n)) for lo in range(0, n, step)]
        return sum(int(chunk.result()) for chunk in chunks)

    def _readers(self) -> ThreadPoolExecutor:
        """The reader pool, its ``depth`` threads all started (an executor starts a thread only when
        none is idle, so chunks that finish fast would otherwise leave a cold first batch with few
        reads in flight); made again in a forked child, which inherits no threads."""
        if self._pool is None or self._pid != os.getpid():
            pool = ThreadPoolExecutor(self.depth, thread_name_prefix="gnnbridge-read")
            started = threading.Barrier(self.depth)
            for waiting in [pool.submit(started.wait) for _ in range(self.depth)]:
                waiting.result()
            self._pool, self._pid = pool, os.getpid()
        return self._pool


STORE = FeatureStore()  # this process's (see FeatureStore)


def gather_rows(table: torch.Tensor, ids: torch.Tensor, pinned: bool = False) -> torch.Tensor:
    """``table[ids]`` as float32, through this process's store (:meth:`FeatureStore.gather`)."""
    return STORE.gather(table, ids, pinned)


def warm(table: torch.Tensor) -> None:
    STORE.warm(table)


def reads_in_place(table: torch.Tensor) -> bool:
    return STORE.reads_in_place(table)


def read_at_random(table: torch.Tensor) -> bool:
    return STORE.read_at_random(table)


def file_backed(table: torch.Tensor) -> bool:
    return STORE.file_backed(table)


def advise(table: torch.Tensor, how: str = "random") -> bool:
    return STORE.advise(table, how)


def set_read_depth(depth: int) -> None:
    STORE.set_read_depth(depth)


def cache_of(table: torch.Tensor) -> FeatureCache | None:
    return STORE.cache_of(table)


def attach_cache(table: torch.Tensor, cache: FeatureCache) -> None:
    STORE.attach_cache(table, cache)


def detach_cache(table: torch.Tensor) -> None:
    STORE.detach_cache(table)


def most_sampled(in_degree: torch.Tensor, count: int) -> torch.Tensor:
    """The ``count`` nodes of highest in-degree, ties to the lower id (deterministic), sorted."""
    n = in_degree.numel()
    if count >= n:
        return torch.arange(n)
    if count <= 0:
        return torch.empty(0, dtype=torch.int64)
    threshold = in_degree.kthvalue(n - count + 1).values  # the count-th largest degree
    above = (in_degree > threshold).nonzero().flatten()
    at = (in_degree == threshold).nonzero().flatten()[: count - above.numel()]
    return torch.cat([above, at]).sort().values


def cache_rows(table: torch.Tensor, in_degree: torch.Tensor, budget: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(ids, table[ids])`` of the highest in-degree rows of a CPU ``table`` within ``budget``
    bytes (rows plus their ids), ids sorted, rows in the table's dtype; None when no row fits.
    Not attached: a run shares them between a machine's ranks first."""
    if table.device.type != "cpu" or table.dim() != 2:
        return None
    per_row = table.shape[1] * table.element_size() + 8
    count = min(budget // per_row, table.shape[0])
    if count <= 0:
        return None
    ids = most_sampled(in_degree, count).contiguous()
    return ids, STORE.copy_rows(table, ids)  # sorted ids: the file is read nearly in order


def build_cache(table: torch.Tensor, in_degree: torch.Tensor, budget: int) -> FeatureCache | None:
    """A cache of :func:`cache_rows` in this process alone, attached to the table; None when no
    row fits."""
    found = cache_rows(table, in_degree, budget)
    if found is None:
        return None
    cache = FeatureCache(*found)
    attach_cache(table, cache)
    return cache
