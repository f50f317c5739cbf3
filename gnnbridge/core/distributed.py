"""Launching ranks, finding each other, and talking between them.

*Where* a rank computes (cpu / cuda:local_rank) is separate from *how many* ranks there are and
*who started them*:

* ``nproc == 1``: the worker runs in the calling process with a one-rank gloo group (tracebacks,
  debuggers and profilers stay simple).
* ``--nproc N``: the parent spawns N local processes (spawn context, so CUDA is safe), hosts a
  ``TCPStore`` on a port the OS picks (so two jobs on one host never meet) and supervises them:
  the first rank that fails ends the run, with its message, and no child outlives it.
* inside torchrun or an ``srun`` step (see ``core/launch``): this process *is* one rank; it joins
  the job's store, and nobody spawns again.

Every multi-rank path then runs the same :func:`_rank_main`: rendezvous on the store (which names
the ranks that never came), one gloo/NCCL group for the world plus one per node, a
:class:`~gnnbridge.core.watchdog.Watchdog` that ends every rank within seconds of any failure,
the worker, and a final barrier.

:class:`DistContext` is what the training loop sees: rank, world size, device, node layout, and
the few collectives it needs (sum all-reduce, row all-gather), all no-ops for one rank.
"""
from __future__ import annotations

import datetime
import multiprocessing.connection
import os
import re
import signal
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gnnbridge.core.config import DEFAULT_TIMEOUT_S
from gnnbridge.core.errors import ConfigError, GnnBridgeError, RankFailedError
from gnnbridge.core.launch import JobEnv
from gnnbridge.core.watchdog import (
    STORE_ERRORS,
    Member,
    Watchdog,
    claim_report,
    leave,
    post_failure,
    posted_failure,
    record_for_launcher,
)

POLL_S = 0.1
STOP_GRACE_S = 5.0  # how long survivors get to leave on their own before SIGTERM, then SIGKILL


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

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_local_main(self) -> bool:
        return self.local_rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def advance(self) -> None:
        """Count one step of this rank (a training batch): if a collective times out, the ranks
        that are behind are named as the stuck ones."""
        if self.watchdog is not None:
            self.watchdog.progress += 1

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
    raise ConfigError(f"Local rank {local_rank} has no GPU of its own: this process sees {count} CUDA device(s) for "
                      f"{local_world_size} rank(s) on its node; start at most {count} ranks per node.")


# --------------------------------------------------------------------------- entry points


def launch(worker: Callable[..., Any], nproc: int, device_kind: str, args: tuple,
           timeout_s: float = DEFAULT_TIMEOUT_S, job: JobEnv | None = None) -> Any:
    """Run ``worker(ctx, *args)`` on every rank.

    Inside a torchrun / SLURM job (``job``), this process is one rank: returns its worker's
    result. Otherwise ``nproc`` ranks run here: one in this process (its result is returned), or
    several spawned ones (``None``; they hand results over through files). A failure raises
    :class:`RankFailedError` with one line naming the rank that failed first and why.
    """
    if job is not None:
        if dist.is_initialized():
            raise ConfigError("A default process group already exists in this process; gnnbridge joins the "
                              f"{job.launcher} job itself: run it before (or instead of) init_process_group.")
        return _rank_main(RankSpec.from_job(job), device_kind, worker, args, timeout_s)
    if nproc == 1:
        return _run_single(worker, device_kind, args, timeout_s)
    return _spawn(worker, nproc, device_kind, args, timeout_s)


@dataclass(frozen=True)
class RankSpec:
    """Everything a rank needs to find the others."""

    rank: int
    world_size: int
    local_rank: int | None  # None: the launcher did not say; taken from the node layout
    node: str
    addr: str
    port: int
    hosts_store: bool  # this rank binds the port (SLURM rank 0); else it connects
    announce: bool  # print the failure line itself (jobs); a spawning parent prints it otherwise
    namespace: str = "gnnbridge/"
    launcher: str = "gnnbridge"

    @classmethod
    def from_job(cls, job: JobEnv) -> RankSpec:
        # The job id (and torchrun's attempt) in every key: a restarted job starts clean, and a
        # job whose rank 0 found the port taken cannot join the job that holds it.
        return cls(job.rank, job.world_size, job.local_rank, job.node, job.master_addr, job.master_port,
                   hosts_store=job.rank == 0 and not job.agent_store, announce=True,
                   namespace=f"gnnbridge/{job.job_id}/", launcher=job.launcher)

    @property
    def store_owner(self) -> str:
        if self.launcher == "gnnbridge":
            return "the launching gnnbridge process (which hosts it)"
        if self.launcher == "torchrun" and not (self.rank == 0 and self.hosts_store):
            return f"torchrun on node 0 ({self.addr}), or rank 0 (which hosts it)"
        return f"rank 0 (on {self.addr}, which hosts it)"


def _run_single(worker: Callable[..., Any], device_kind: str, args: tuple, timeout_s: float) -> Any:
    owns_group = not dist.is_initialized()
    if owns_group:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=timeout_s))
    try:
        return worker(DistContext(0, 1, 0, resolve_device(device_kind, 0)), *args)
    finally:
        if owns_group:
            dist.destroy_process_group()


# --------------------------------------------------------------------------- one rank


def _rank_main(spec: RankSpec, device_kind: str, worker: Callable[..., Any], args: tuple, timeout_s: float) -> Any:
    timeout = datetime.timedelta(seconds=timeout_s)
    raw = _connect(spec, timeout)
    store = dist.PrefixStore(spec.namespace, raw)
    ctx: DistContext | None = None
    try:
        ctx = _join(spec, store, device_kind, timeout_s)
        dist.init_process_group("nccl" if ctx.device.type == "cuda" else "gloo",
                                store=dist.PrefixStore("pg/", store), rank=spec.rank,
                                world_size=spec.world_size, timeout=timeout)
        ctx.local_group = _local_groups(ctx)
        result = worker(ctx, *args)
        store.set(f"done/{spec.rank}", "1")
        ctx.watchdog.stop()  # before the barrier: a peer that finished and left is not dead
        dist.barrier()
        dist.destroy_process_group()
        _leave_together(store, spec.world_size)
        return result
    except BaseException as exc:  # noqa: BLE001 - every failure, Ctrl-C included, must reach the others
        if ctx is not None and ctx.watchdog is not None:
            ctx.watchdog.run_cleanups()
        raise _failure(spec, store, exc, timeout_s) from None
    finally:
        if ctx is not None and ctx.watchdog is not None:
            ctx.watchdog.stop()
        if dist.is_initialized():
            dist.destroy_process_group()


def _leave_together(store, world_size: int, deadline_s: float = 30.0) -> None:
    """Exit only once every rank has torn down its process group: a rank whose peer exits (and
    closes its sockets) while it is still inside gloo's teardown can abort with "terminate called
    without an active exception" (SIGABRT), failing a job that had finished. The wait goes
    through the store, not gloo, and gives up quietly: the work is done either way."""
    try:
        store.add("left", 1)
        end = time.monotonic() + deadline_s
        while int(store.add("left", 0)) < world_size and time.monotonic() < end:
            time.sleep(POLL_S)
    except (RuntimeError, OSError, dist.DistError):  # the store's host already left: so did everyone
        pass


def _connect(spec: RankSpec, timeout: datetime.timedelta):
    where = f"{spec.addr}:{spec.port}"
    try:
        return dist.TCPStore(spec.addr, spec.port, world_size=None, is_master=spec.hosts_store,
                             wait_for_workers=False, timeout=timeout)
    except (RuntimeError, OSError) as exc:
        if spec.hosts_store:
            raise RankFailedError(f"Rank 0 cannot listen on {where} ({_last_line(str(exc))}); another job may use "
                                  "this port: set MASTER_PORT to a free one.") from None
        raise RankFailedError(
            f"Rank {spec.rank} could not reach the job's store at {where} within {timeout.total_seconds():.0f} s: "
            f"rank 0 has not started, or MASTER_ADDR / MASTER_PORT point elsewhere ({spec.launcher} job)."
        ) from None


def _join(spec: RankSpec, store, device_kind: str, timeout_s: float) -> DistContext:
    """Rendezvous, then place this rank: node, local rank, device, threads, watchdog."""
    me = Member.here(spec.rank, spec.node)
    members, run_id = _rendezvous(store, me, spec.world_size, timeout_s)
    nodes = _node_layout(members)
    node_rank = next(i for i, ranks in enumerate(nodes) if spec.rank in ranks)
    local = nodes[node_rank]
    local_rank = spec.local_rank if spec.local_rank is not None else local.index(spec.rank)
    device = resolve_device(device_kind, local_rank, len(local))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    _set_threads(len(local))
    watchdog = Watchdog(store.clone(), me, members, timeout_s, announce=spec.announce,
                        hosts_store=spec.hosts_store, store_owner=spec.store_owner).start()
    return DistContext(spec.rank, spec.world_size, local_rank, device, local_world_size=len(local),
                       node_rank=node_rank, num_nodes=len(nodes), members=members, store=store,
                       run_id=run_id, watchdog=watchdog)


def _rendezvous(store, me: Member, world_size: int, timeout_s: float) -> tuple[list[Member], str]:
    """Announce this rank and wait for all; on timeout name the ranks that never came."""
    if me.rank == 0:
        store.set("run_id", uuid.uuid4().hex[:12])  # names this job's shared-memory files
    store.add(f"beat/{me.rank}", 0)
    store.set(f"member/{me.rank}", me.to_json())
    keys = [f"member/{r}" for r in range(world_size)]
    deadline = time.monotonic() + timeout_s
    while not store.check(keys):
        failure = posted_failure(store)
        if failure:
            raise PeerFailed(failure)
        if time.monotonic() > deadline:
            missing = [r for r, key in enumerate(keys) if not store.check([key])]
            raise PeerFailed(
                f"Rendezvous timed out after {timeout_s:.0f} s: rank(s) {_ranges(missing)} of {world_size} never "
                "joined (not started, crashed early, or started with another MASTER_ADDR / MASTER_PORT)."
            )
        time.sleep(POLL_S)
    members = [Member.from_json(v) for v in store.multi_get(keys)]
    return members, store.get("run_id").decode()


def _node_layout(members: list[Member]) -> list[list[int]]:
    """The ranks of each node, nodes ordered by their first rank (the node rank)."""
    nodes: dict[str, list[int]] = {}
    for m in sorted(members, key=lambda m: m.rank):
        nodes.setdefault(m.node, []).append(m.rank)
    return sorted(nodes.values(), key=lambda ranks: ranks[0])


def _local_groups(ctx: DistContext):
    """One process group per node, like the tutorials' ``create_local_process_group``: every rank
    creates every group (``new_group`` is collective), and keeps its own."""
    if ctx.num_nodes == 1:
        return dist.group.WORLD
    mine = None
    for ranks in _node_layout(ctx.members):
        group = dist.new_group(ranks)
        if ctx.rank in ranks:
            mine = group
    return mine


def _set_threads(local_world_size: int) -> None:
    """Split this machine's cores between its ranks, unless the user (or torchrun) chose, or the
    launcher already bound this rank to its own cores (SLURM's ``--cpus-per-task``)."""
    if "OMP_NUM_THREADS" in os.environ:
        return
    total = os.cpu_count() or 1
    mine = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else total
    torch.set_num_threads(max(1, mine if mine < total else total // local_world_size))


# --------------------------------------------------------------------------- failures


class PeerFailed(RankFailedError):
    """A failure whose message already speaks for the job (another rank's failure, a rendezvous
    that timed out): posted as is, not as "rank N failed: ..."."""


def _failure(spec: RankSpec, store, exc: BaseException, timeout_s: float) -> RankFailedError:
    """Post this rank's failure (unless another came first) and return the error to raise: the
    job's first failure, quiet on all ranks but one per node."""
    if isinstance(exc, PeerFailed):
        message = str(exc)
    else:
        line = _describe(exc)
        if _is_comm_error(exc):  # usually a peer's death seen from here: give its cause time to arrive
            message = _wait_for_cause(store, spec.rank, spec.world_size, line, min(10.0, timeout_s))
        else:
            message = f"rank {spec.rank} failed: {line}"
        if os.environ.get("GNNBRIDGE_TRACEBACK") and not isinstance(exc, GnnBridgeError):
            traceback.print_exception(exc)
    leader = spec.local_rank in (0, None)
    try:
        message = post_failure(store, message)
        quiet = not (spec.announce and claim_report(store, spec.node, spec.rank, fallback=leader))
    except STORE_ERRORS:  # the store is gone with whoever hosted it
        quiet = not (spec.announce and leader)
    leave(store, spec.hosts_store, _joined(store, spec.world_size))
    record_for_launcher(message)
    error = RankFailedError(message)
    error.quiet = quiet
    return error


def _joined(store, world_size: int) -> int:
    try:
        return sum(store.check([f"member/{r}"]) for r in range(world_size))
    except STORE_ERRORS:
        return 0


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    if isinstance(exc, GnnBridgeError):
        return str(exc)
    hint = "" if os.environ.get("GNNBRIDGE_TRACEBACK") else " (GNNBRIDGE_TRACEBACK=1 prints the traceback)"
    text = re.sub(r"^\[[^\]]*\.(?:cc|cpp|h|hpp):\d+\] ", "", _last_line(str(exc)))  # C++ source location
    return f"{type(exc).__name__}: {text}{hint}"


def _is_comm_error(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, dist.DistError) or any(
        s in text for s in ("gloo", "NCCL", "Connection reset", "Connection closed", "Broken pipe"))


def _wait_for_cause(store, rank: int, world_size: int, line: str, grace_s: float) -> str:
    """Wait up to ``grace_s`` for the failure that caused this one to be posted; failing that,
    blame the ranks whose heartbeats stopped meanwhile."""
    keys = [k for k in (f"beat/{r}" for r in range(world_size)) if k != f"beat/{rank}"]
    try:
        before = store.multi_get(keys)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            posted = posted_failure(store)
            if posted:
                return posted
            time.sleep(POLL_S)
        silent = [int(k.split("/")[1]) for k, a, b in zip(keys, before, store.multi_get(keys)) if a == b]
        behind = _behind(store, world_size)
    except STORE_ERRORS:
        return f"lost the job's store (whoever hosted it is gone); rank {rank} saw: {line}"
    if silent:
        return f"rank(s) {_ranges(silent)} stopped responding (rank {rank} saw: {line})"
    if "timed out" in line.lower():
        who = f"rank(s) {_ranges(behind)} stuck behind the others" if behind else "another rank is stuck"
        return (f"rank {rank} waited longer than the timeout in a collective: {who} (raise --timeout if "
                f"a step can take that long): {line}")
    return f"rank {rank} failed: {line}"


def _behind(store, world_size: int) -> list[int]:
    """The ranks whose published progress is below the others' (empty when all are level)."""
    steps = []
    for r in range(world_size):
        key = f"progress/{r}"
        steps.append(int(store.get(key)) if store.check([key]) else 0)
    top = max(steps, default=0)
    return [r for r, step in enumerate(steps) if step < top]


def _ranges(ranks: list[int]) -> str:
    """[1, 2, 3, 7] -> "1-3, 7"."""
    out, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            out.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ", ".join(out)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "unknown error"


# --------------------------------------------------------------------------- spawning


def _spawn(worker: Callable[..., Any], nproc: int, device_kind: str, args: tuple, timeout_s: float) -> None:
    """Start ``nproc`` local ranks and supervise them until all succeed or the first one fails."""
    server = dist.TCPStore("127.0.0.1", 0, world_size=None, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=timeout_s))
    store = dist.PrefixStore("gnnbridge/", server)
    context = mp.get_context("spawn")
    procs = [
        context.Process(target=_spawned_rank, name=f"gnnbridge-rank-{rank}", args=(
            RankSpec(rank, nproc, rank, "local", "127.0.0.1", server.port, hosts_store=False, announce=False),
            device_kind, worker, args, timeout_s))
        for rank in range(nproc)
    ]
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if _in_main_thread() else None
    try:
        for proc in procs:
            proc.start()
        message = _supervise(procs, store)
    finally:
        _stop(procs)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        del server
    if message:
        raise RankFailedError(message)


def _spawned_rank(spec: RankSpec, device_kind: str, worker: Callable[..., Any], args: tuple, timeout_s: float) -> None:
    try:
        _rank_main(spec, device_kind, worker, args, timeout_s)
    except BaseException:  # noqa: BLE001
        sys.exit(1)  # the parent reports the job's first failure; no traceback from here


def _supervise(procs: list, store) -> str | None:
    """Block until every rank exits 0 (``None``) or one fails (the job's failure message)."""
    pending = {proc.sentinel: rank for rank, proc in enumerate(procs)}
    while pending:
        for sentinel in multiprocessing.connection.wait(list(pending), timeout=1.0):
            rank = pending.pop(sentinel)
            proc = procs[rank]
            proc.join()
            if proc.exitcode < 0:  # killed by a signal: nobody knows it better than its parent
                post_failure(store, _exit_message(rank, proc))
                return _exit_message(rank, proc)
            if proc.exitcode > 0:
                return posted_failure(store) or post_failure(store, _exit_message(rank, proc))
    return None


def _exit_message(rank: int, proc) -> str:
    if proc.exitcode < 0:
        name = signal.Signals(-proc.exitcode).name
        return f"rank {rank} (pid {proc.pid}) was killed by {name}"
    return f"rank {rank} (pid {proc.pid}) exited with code {proc.exitcode}"


def _stop(procs: list) -> None:
    """Leave no rank behind: survivors see the posted failure and leave by themselves within a
    second or two; whoever is still there after the grace gets SIGTERM, then SIGKILL."""
    for sig_time, action in ((STOP_GRACE_S, None), (STOP_GRACE_S, "terminate"), (STOP_GRACE_S, "kill")):
        alive = [p for p in procs if p.is_alive()]
        if not alive:
            return
        for proc in alive:
            if action:
                getattr(proc, action)()
        deadline = time.monotonic() + sig_time
        for proc in alive:
            proc.join(max(0.0, deadline - time.monotonic()))


def _raise_terminated(signum, frame) -> None:
    raise RankFailedError("gnnbridge was stopped by SIGTERM; all ranks were stopped.")


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
