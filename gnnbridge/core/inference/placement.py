"""Placement switches (``placement:``): where a rank keeps the graph, whether sampling runs ahead,
and the precision of the forward pass.

* ``features=device``: x and y are copied to the rank's device once; each batch then gathers its
  rows there, and only the sampled ids cross the bus (the gathered [nodes, F] block otherwise
  crosses it every step, the largest transfer of a step).
* ``topology=device``: the CSC arrays are copied to the device; core's sampler samples where they
  live, so sampling runs on the GPU (its torch path, which draws the same samples as the CPU
  kernel). DGL's own sampler needs a CUDA build of DGL for this.
* ``prefetch=k``: a background thread samples up to k batches ahead of the step. Sampling
  releases the GIL (numba kernel, DGL's C++), so it overlaps the forward and backward pass.
  The batches and their order are those of ``prefetch=0``: one thread drives the sampler,
  reseeded in that thread (DGL's random engine is per thread), with the rank's thread count.
* ``feature_cache=SIZE``: each machine keeps in RAM the feature rows of the highest in-degree
  nodes (the most sampled) up to SIZE bytes; :func:`~gnnbridge.core.records.features.gather_rows`
  serves them from there. Once per machine: the machine's first rank builds it in shared memory
  (``/dev/shm``) and every rank of the machine maps it, so 4 ranks hold one copy, not 4.
* ``precision=bf16|fp16``: the forward pass and the loss run under ``torch.autocast``; fp16
  scales the loss (``torch.amp.GradScaler``) so small gradients do not flush to zero.

Why a thread and not DataLoader workers: workers are processes, and each would hold its own
sampler state and pickle every batch back; the sampler already runs outside the GIL.
"""

from __future__ import annotations

import copy
import itertools
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext

import torch

from gnnbridge.core.config import PlacementConfig, parse_size
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.records.features import FeatureCache, attach_cache, cache_rows, detach_cache, warm
from gnnbridge.core.records.hetero import HeteroGraphData
from gnnbridge.core.runtime.context import DistContext
from gnnbridge.core.runtime.sharing import node_tensors

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Names each machine-wide cache build: the ranks of a machine build their caches in one order (in
# their Trainers, which they construct alike), so the n-th build has one name on all of them.
_CACHE_BUILDS = itertools.count()


def place(data, cfg: PlacementConfig, device: torch.device):
    """``data`` with features and topology where ``cfg`` puts them (a shallow copy; the shared
    record itself is left as it is). Off the CPU only: on a CPU rank host *is* the device."""
    moves = {"x": cfg.features, "y": cfg.features, "indptr": cfg.topology, "indices": cfg.topology}
    if all(where == "host" for where in moves.values()) or device.type == "cpu":
        return data
    if not isinstance(data, GraphData):
        raise ConfigError(
            "placement.features=device and placement.topology=device apply to node classification on "
            "a homogeneous graph; use host for graph classification and heterogeneous graphs."
        )
    placed = copy.copy(data)
    for name, where in moves.items():
        if where == "device":
            setattr(placed, name, getattr(data, name).to(device))
    return placed


def feature_caches(data, cfg: PlacementConfig, ctx: DistContext | None = None) -> list[FeatureCache]:
    """The caches ``placement.feature_cache`` asks for, on this rank's CPU feature tables (any
    cache an earlier run left on them dropped): a homogeneous graph's rows by in-degree; a
    heterogeneous graph's per node type (in-degree summed over the relations into it), the size
    shared in proportion to each type's table. Built once per machine where ``ctx`` has local
    peers (SIZE is RAM per machine; every rank of the machine calls this); hits are counted per
    rank. The gather kernels the tables need are loaded too."""
    tables = _feature_tables(data)
    for table in tables.values():
        detach_cache(table)
    budget = parse_size(cfg.feature_cache) or 0
    caches = []
    if budget > 0 and tables:
        found = _once_per_machine(ctx, lambda: _cache_tensors(data, tables, budget))
        for i, table in enumerate(tables.values()):
            if f"{i}/ids" in found:
                caches.append(FeatureCache(found[f"{i}/ids"], found[f"{i}/rows"]))
                attach_cache(table, caches[-1])
    for table in tables.values():
        warm(table)
    return caches


def _once_per_machine(
    ctx: DistContext | None, make: Callable[[], dict], what: str = "the feature cache", key: str = "feature_cache"
) -> dict:
    """``make()``'s tensors: built here alone for a rank without local peers (one process,
    ``evaluate``, ``predict``), else built by the machine's first rank and mapped by all of its
    ranks from shared memory (a full ``/dev/shm`` is one line, naming ``placement.KEY``)."""
    if ctx is None or ctx.local_world_size == 1:
        return make()
    return node_tensors(ctx, f"cache{next(_CACHE_BUILDS)}", make, what, lower=f"placement.{key}")


def attach_remote_cache(sampler, cfg: PlacementConfig, ctx: DistContext) -> None:
    """``placement.remote_cache`` on a partitioned graph's sampler: the rows of other machines'
    nodes its part's edges name most often, fetched once per machine (by its first rank, whose
    exchange group is every machine's first rank) and shared by the machine's ranks."""
    budget = parse_size(cfg.remote_cache) or 0
    if budget > 0:
        found = _once_per_machine(ctx, lambda: sampler.cache_rows(budget), "the remote cache", "remote_cache")
        sampler.use_remote_cache(found["ids"], found["rows"])


def _cache_tensors(data, tables: dict, budget: int) -> dict[str, torch.Tensor]:
    """``{"<i>/ids", "<i>/rows"}`` of the i-th table's cache (absent where no row fits). The
    in-degrees ([N] int64) are counted only here, where a cache is built."""
    total, degrees, found = sum(t.nbytes for t in tables.values()), _in_degrees(data), {}
    for i, (key, table) in enumerate(tables.items()):
        rows = cache_rows(table, degrees[key], budget * table.nbytes // total)
        if rows is not None:
            found[f"{i}/ids"], found[f"{i}/rows"] = rows
    return found


def _feature_tables(data) -> dict:
    """{node type (None: homogeneous): its feature table}; graph collections have none to cache
    (whole graphs, no in-degree to rank rows by)."""
    if isinstance(data, GraphData):
        return {None: data.x}
    if isinstance(data, HeteroGraphData):
        return dict(data.x)
    return {}


def _in_degrees(data) -> dict:
    if isinstance(data, GraphData):
        return {None: data.indptr.cpu().diff()}
    degrees = {t: torch.zeros(data.num_nodes[t], dtype=torch.int64) for t in data.x}
    for et, indptr in data.indptr.items():
        if et[2] in degrees:
            degrees[et[2]] += indptr.cpu().diff()
    return degrees


def autocast(precision: str, device: torch.device):
    """The forward pass's precision context (a no-op for fp32)."""
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=AUTOCAST_DTYPES[precision])


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """A loss scaler for fp16 (bf16 keeps fp32's exponent range and needs none)."""
    return torch.amp.GradScaler(device.type) if precision == "fp16" else None


def prefetched(make_batches: Callable[[], Iterable], depth: int) -> Iterator:
    """The items of ``make_batches()``, produced up to ``depth`` ahead in a background thread.

    ``make_batches`` runs entirely in that thread (reseeding included). An exception there is
    raised here, at the item it stopped at; a consumer that stops early stops the producer.
    """
    if depth <= 0:
        yield from make_batches()
        return
    items: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def offer(entry) -> bool:
        """Put ``entry`` unless the consumer has gone; whether it was put."""
        while not stop.is_set():
            try:
                items.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    threads = torch.get_num_threads()
    gpu = torch.cuda.current_device() if torch.cuda.is_available() and torch.cuda.is_initialized() else None

    def produce() -> None:
        # OpenMP's thread count is per calling thread: without this the sampler thread would run
        # DGL's sampler on every core, whose per-thread random engines then depend on scheduling.
        torch.set_num_threads(threads)
        if gpu is not None:  # CUDA's current device is per thread too: a new one starts on GPU 0
            torch.cuda.set_device(gpu)
        try:
            for item in make_batches():
                if not offer((item, None)):
                    return
            offer((done, None))
        except BaseException as exc:  # handed to the consumer, which raises it in the training loop
            offer((done, exc))

    worker = threading.Thread(target=produce, name="gnnbridge-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            item, error = items.get()
            if item is done:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()
        worker.join(timeout=5)
