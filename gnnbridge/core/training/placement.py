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
* ``feature_cache=SIZE``: each rank keeps in RAM the feature rows of the highest in-degree
  nodes (the most sampled) up to SIZE bytes; :func:`~gnnbridge.core.records.features.gather_rows`
  serves them from there. Per rank, not shared between the ranks of a machine.
* ``precision=bf16|fp16``: the forward pass and the loss run under ``torch.autocast``; fp16
  scales the loss (``torch.amp.GradScaler``) so small gradients do not flush to zero.

Why a thread and not DataLoader workers: workers are processes, and each would hold its own
sampler state and pickle every batch back; the sampler already runs outside the GIL.
"""
from __future__ import annotations

import copy
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext

import torch

from gnnbridge.core.contracts.config import PlacementConfig, parse_size
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.records.features import FeatureCache, build_cache, detach_cache, warm
from gnnbridge.core.records.hetero import HeteroGraphData

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def place(data, cfg: PlacementConfig, device: torch.device):
    """``data`` with features and topology where ``cfg`` puts them (a shallow copy; the shared
    record itself is left as it is). Off the CPU only: on a CPU rank host *is* the device."""
    moves = {"x": cfg.features, "y": cfg.features, "indptr": cfg.topology, "indices": cfg.topology}
    if all(where == "host" for where in moves.values()) or device.type == "cpu":
        return data
    if not isinstance(data, GraphData):
        raise ConfigError("placement.features=device and placement.topology=device apply to node classification on "
                          "a homogeneous graph; use host for graph classification and heterogeneous graphs.")
    placed = copy.copy(data)
    for name, where in moves.items():
        if where == "device":
            setattr(placed, name, getattr(data, name).to(device))
    return placed


def feature_caches(data, cfg: PlacementConfig) -> list[FeatureCache]:
    """The caches ``placement.feature_cache`` asks for, built on this rank's CPU feature tables
    (any cache an earlier run left on them dropped): a homogeneous graph's rows by in-degree; a
    heterogeneous graph's per node type (in-degree summed over the relations into it), the size
    shared in proportion to each type's table. The gather kernels the tables need are loaded too.
    In-degrees ([N] int64) are counted only when a cache is asked for."""
    tables = _feature_tables(data)
    for table in tables.values():
        detach_cache(table)
    budget = parse_size(cfg.feature_cache) or 0
    caches = []
    if budget > 0 and tables:
        total, degrees = sum(t.nbytes for t in tables.values()), _in_degrees(data)
        caches = [build_cache(t, degrees[key], budget * t.nbytes // total) for key, t in tables.items()]
    for table in tables.values():
        warm(table)
    return [c for c in caches if c is not None]


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

    def produce() -> None:
        # OpenMP's thread count is per calling thread: without this the sampler thread would run
        # DGL's sampler on every core, whose per-thread random engines then depend on scheduling.
        torch.set_num_threads(threads)
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
