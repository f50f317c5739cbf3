"""Launching ranks and talking between them.

*Where* a rank computes (cpu / cuda:local_rank) is separate from *how many* ranks there are.
The launcher spawns N local processes with ``torch.multiprocessing`` (spawn context, so CUDA is
safe) and rendezvouses them through a ``TCPStore`` that the parent itself hosts: the parent
binds the port (``MASTER_PORT`` if set, else a free one chosen by the OS) and keeps it for the
run, so there is no window in which another job can take a port we "found" free. Nothing is
hard-coded.

With ``nproc=1`` the worker runs in the calling process with a single-rank gloo group, which
keeps tracebacks, debuggers and profilers simple.

:class:`DistContext` is what the training loop sees: rank, world size, device, and the few
collectives it needs (sum all-reduce, row all-gather), all no-ops for one rank.
"""
from __future__ import annotations

import datetime
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gnnbridge.core.errors import GnnBridgeError, RankFailedError

DEFAULT_TIMEOUT_S = 300


@dataclass
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over ranks in place (on the collective's device) and return it."""
        if not self.distributed:
            return tensor
        comm = tensor.to(self._comm_device())
        dist.all_reduce(comm, op=dist.ReduceOp.SUM)
        if comm is not tensor:
            tensor.copy_(comm)
        return tensor

    def all_gather_rows(self, rows: torch.Tensor, sizes: list[int]) -> torch.Tensor:
        """Concatenate every rank's ``rows`` in rank order; ``sizes[r]`` is rank r's row count."""
        if not self.distributed:
            return rows
        width = max(sizes)
        padded = rows.new_zeros((width, *rows.shape[1:]), device=self._comm_device())
        padded[: rows.shape[0]] = rows.to(padded.device)
        parts = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(parts, padded)
        return torch.cat([p[:n] for p, n in zip(parts, sizes)]).to(rows.device)

    def broadcast_buffers(self, module: torch.nn.Module) -> None:
        """Give every rank rank 0's buffers (BatchNorm running statistics), as DDP does before
        each forward; used before evaluation so all ranks score with one model."""
        if not self.distributed:
            return
        comm_device = self._comm_device()
        for buffer in module.buffers():
            if buffer.device == comm_device:
                dist.broadcast(buffer.data, src=0)
            else:
                comm = buffer.data.to(comm_device)
                dist.broadcast(comm, src=0)
                buffer.data.copy_(comm)

    def _comm_device(self) -> torch.device:
        return self.device if dist.get_backend() == "nccl" else torch.device("cpu")


def resolve_device(kind: str, local_rank: int) -> torch.device:
    if kind == "cuda":
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def launch(worker: Callable[..., Any], nproc: int, device_kind: str, args: tuple, timeout_s: int = DEFAULT_TIMEOUT_S) -> Any:
    """Run ``worker(ctx, *args)`` on ``nproc`` ranks; return rank 0's result for one rank.

    With several ranks the workers communicate results through files (see the trainer); this
    returns ``None`` and raises :class:`RankFailedError` naming the first rank that failed.
    """
    if nproc == 1:
        return _run_single(worker, device_kind, args, timeout_s)
    host = "127.0.0.1"
    port = int(os.environ.get("MASTER_PORT", 0))
    store = dist.TCPStore(host, port, world_size=None, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=timeout_s))
    try:
        mp.start_processes(
            _entry, args=(nproc, host, store.port, device_kind, worker, args, timeout_s),
            nprocs=nproc, join=True, start_method="spawn",
        )
    except mp.ProcessRaisedException as exc:
        line = _last_line(str(exc)).removeprefix("RuntimeError: ")
        raise RankFailedError(f"Rank {exc.error_index} failed: {line}") from None
    except mp.ProcessExitedException as exc:
        raise RankFailedError(f"Rank {exc.error_index} exited with code {exc.exit_code} ({_signal_name(exc)}).") from None
    finally:
        del store
    return None


def _run_single(worker: Callable[..., Any], device_kind: str, args: tuple, timeout_s: int) -> Any:
    owns_group = not dist.is_initialized()
    if owns_group:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=timeout_s))
    try:
        return worker(DistContext(0, 1, 0, resolve_device(device_kind, 0)), *args)
    finally:
        if owns_group:
            dist.destroy_process_group()


def _entry(rank: int, world_size: int, host: str, port: int, device_kind: str,
           worker: Callable[..., Any], args: tuple, timeout_s: int) -> None:
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(host, port, world_size=None, is_master=False, timeout=timeout)
    backend = "nccl" if device_kind == "cuda" else "gloo"
    device = resolve_device(device_kind, rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
    try:
        worker(DistContext(rank, world_size, rank, device), *args)
        # Leave together: a rank that tears down gloo while a peer is still mid-teardown can
        # abort that peer ("terminate called without an active exception", SIGABRT).
        dist.barrier()
    except GnnBridgeError as exc:  # user error found inside a rank: keep its one line
        raise RuntimeError(f"{type(exc).__name__}: {exc}") from None
    except Exception:
        traceback.print_exc()
        raise
    finally:
        dist.destroy_process_group()


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "unknown error"


def _signal_name(exc: mp.ProcessExitedException) -> str:
    return f"signal {exc.signal_name}" if getattr(exc, "signal_name", None) else "no Python exception"
