"""What the training loop sees of the job: :class:`DistContext`.

*Where* a rank computes (cpu / cuda:local_rank) is kept apart from *how many* ranks there are
and *who started them* (see :mod:`~gnnbridge.core.runtime.launcher`). The context carries the
rank, world size, device, node layout and the few collectives training needs (sum all-reduce,
row all-gather, buffer broadcast), all of them no-ops for a one-rank run, so the loop has one
code path for one process and for many.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from gnnbridge.core.errors import ConfigError
from gnnbridge.core.runtime.watchdog import Member, Watchdog, posted_failure

POLL_S = 0.1


def attempt_store(job_store, attempt: int):
    """The keys of one attempt of the job (``<namespace>/<attempt>/<key>``; PrefixStore adds the
    slashes, and nesting keeps both prefixes through ``clone()``)."""
    return dist.PrefixStore(str(attempt), job_store)


@dataclass
class DistContext:
    """One rank's view of the job. ``store`` is the job's key-value store (namespaced), ``None``
    for a one-rank run; ``local_group`` is the process group of this node's ranks."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    local_world_size: int = 1
    node_rank: int = 0
    num_nodes: int = 1
    members: list[Member] = field(default_factory=list)
    store: Any = None
    run_id: str = "local"
    local_group: Any = None
    watchdog: Watchdog | None = None
    attempt: int = 0  # how often the launcher restarted this job's ranks (torchelastic's restart count)
    job_store: Any = None  # the store under the job's own name, shared by every attempt of it

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_local_main(self) -> bool:
        return self.local_rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def previous_failure(self) -> str | None:
        """Why the previous attempt of this job failed (its ranks posted it), on a restart."""
        if self.attempt == 0 or self.job_store is None:
            return None
        return posted_failure(attempt_store(self.job_store, self.attempt - 1))

    def advance(self) -> None:
        """Count one step of this rank (a training batch): if a collective times out, the ranks
        that are behind are named as the stuck ones."""
        if self.watchdog is not None:
            self.watchdog.progress += 1

    def doing(self, what: str | None) -> None:
        """Say what this rank does now ("its forward pass of epoch 1, step 3"): stuck there for
        longer than the timeout, the job ends naming this rank and that. ``None``: nothing timed."""
        if self.watchdog is not None:
            self.watchdog.doing(what)

    def on_abort(self, cleanup: Callable[[], None]) -> None:
        """Run ``cleanup`` if this rank is stopped because the job failed (also from SIGTERM)."""
        if self.watchdog is not None:
            self.watchdog.on_abort(cleanup)

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def local_barrier(self) -> None:
        if self.local_world_size > 1:
            dist.barrier(group=self.local_group)

    def store_barrier(self, tag: str) -> None:
        """Wait for every rank to reach ``tag``, with no deadline: for waits of unknown length
        (a download on one node). A rank that dies meanwhile is the watchdog's business."""
        if not self.distributed:
            return
        key = f"barrier/{tag}"
        self.store.add(key, 1)
        while int(self.store.add(key, 0)) < self.world_size:
            time.sleep(POLL_S)

    def wait_key(self, key: str) -> bytes:
        """``store.get`` without its timeout (see :meth:`store_barrier`)."""
        while not self.store.check([key]):
            time.sleep(POLL_S)
        return self.store.get(key)

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (small, picklable) in rank order, on every rank."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over ranks in place (on the collective's device) and return it."""
        if not self.distributed:
            return tensor
        comm = tensor.to(self._comm_device())
        dist.all_reduce(comm, op=dist.ReduceOp.SUM)
        if comm is not tensor:
            tensor.copy_(comm)
        return tensor

    def row_shards(self, count: int) -> list[torch.Tensor]:
        """Ids ``0..count-1`` in one contiguous shard per rank, all ``ceil(count / world)`` long
        but the last ones: the layout :meth:`all_gather_rows` joins without a copy."""
        width = -(-count // self.world_size)
        return [torch.arange(min(r * width, count), min((r + 1) * width, count)) for r in range(self.world_size)]

    def all_gather_rows(self, rows: torch.Tensor, sizes: list[int]) -> torch.Tensor:
        """Concatenate every rank's ``rows`` in rank order; ``sizes[r]`` is rank r's row count.

        ``rows`` may carry padding rows past ``sizes[rank]`` (up to ``max(sizes)``, which saves
        a padded copy). Every rank's part lands in one buffer; when only the last ranks are
        short (:meth:`row_shards`), the result is a view of it, not a third copy: at Reddit
        scale a [N, 256] layer output is 0.24 GB per rank."""
        if not self.distributed:
            return rows[: sizes[0]]
        width, comm = max(sizes), self._comm_device()
        if rows.shape[0] == width and rows.device == comm and rows.is_contiguous():
            padded = rows
        else:
            padded = rows.new_zeros((width, *rows.shape[1:]), device=comm)
            padded[: sizes[self.rank]] = rows[: sizes[self.rank]].to(comm)
        out = padded.new_empty((self.world_size * width, *rows.shape[1:]))
        dist.all_gather(list(out.split(width)), padded)
        del padded
        if all(n == width for n in sizes[:-1]):
            return out[: sum(sizes)].to(rows.device)
        return torch.cat([p[:n] for p, n in zip(out.split(width), sizes)]).to(rows.device)

    def machine_rows(self, rows: torch.Tensor, count: int) -> torch.Tensor:
        """``count`` rows split among this machine's ranks (``tensor_split``, rank ``local_rank``
        holding ``rows``), joined in local-rank order on each of them (the machine's group)."""
        if self.local_world_size == 1:
            return rows
        shares = [len(s) for s in torch.tensor_split(torch.arange(count), self.local_world_size)]
        padded = rows.new_zeros((max(shares), *rows.shape[1:]), device=self._comm_device())
        padded[: rows.shape[0]] = rows
        out = [torch.empty_like(padded) for _ in shares]
        dist.all_gather(out, padded, group=self.local_group)
        return torch.cat([o[:n] for o, n in zip(out, shares)]).to(rows.device)

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


def resolve_device(kind: str, local_rank: int, local_world_size: int = 1) -> torch.device:
    """cuda:local_rank when this process sees a GPU for every rank of its node; cuda:0 when the
    launcher gave each rank GPUs of its own (SLURM's ``--gpus-per-task``, which narrows
    ``CUDA_VISIBLE_DEVICES`` per task); anything else would put two ranks on one GPU."""
    if kind != "cuda":
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if local_rank < count and (local_world_size <= count or not os.environ.get("CUDA_VISIBLE_DEVICES")):
        return torch.device("cuda", local_rank)
    if os.environ.get("CUDA_VISIBLE_DEVICES") and count >= 1:
        return torch.device("cuda", 0)
    raise ConfigError(
        f"Local rank {local_rank} has no GPU of its own: this process sees {count} CUDA device(s) for "
        f"{local_world_size} rank(s) on its node; start at most {count} ranks per node."
    )
