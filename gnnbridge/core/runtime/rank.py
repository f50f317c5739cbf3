"""One rank's life in a multi-rank job: join, place itself, run the worker, leave or fail loudly.

Whoever started the process (torch's elastic agent for ``--nproc``, torchrun, or an ``srun``
step), every rank runs :func:`rank_main`: it connects to the job's store, announces itself at a
rendezvous that names the ranks that never came (torch's own rendezvous only says it timed
out), creates one gloo/NCCL group for the world plus one per node, starts a
:class:`~gnnbridge.core.runtime.watchdog.Watchdog`, runs the worker and leaves through a final
barrier. A failure becomes one line that names the root cause (:func:`_failure`); the agent's
own report would say "exitcode 1" or blame a peer's "connection reset".

Keys live under ``gnnbridge/<run id>/<attempt>/`` in the store (:func:`attempt_store`): a restarted attempt starts
clean, and two jobs that meet on one port stay apart.
"""

from __future__ import annotations

import datetime
import os
import re
import socket
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from gnnbridge.core.errors import GnnBridgeError, RankFailedError, record_interrupts
from gnnbridge.core.records.mapped import opened
from gnnbridge.core.runtime.context import POLL_S, DistContext, attempt_store, resolve_device
from gnnbridge.core.runtime.jobs import JobEnv
from gnnbridge.core.runtime.watchdog import (
    DOING,
    STORE_ERRORS,
    Member,
    Watchdog,
    claim_report,
    leave,
    post_failure,
    posted_failure,
    record_for_launcher,
)


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
    announce: bool  # print the failure line itself; gnnbridge's own launcher prints it otherwise
    run_id: str = "local"  # the job's name, the same for every attempt
    attempt: int = 0
    launcher: str = "gnnbridge"

    @classmethod
    def from_job(cls, job: JobEnv, announce: bool = True) -> RankSpec:
        return cls(
            job.rank,
            job.world_size,
            job.local_rank,
            job.node,
            job.master_addr,
            job.master_port,
            hosts_store=job.rank == 0 and not job.agent_store,
            announce=announce,
            run_id=job.run_id,
            attempt=job.attempt,
            launcher=job.launcher,
        )

    @property
    def namespace(self) -> str:
        return f"gnnbridge/{self.run_id}"  # PrefixStore adds the "/"

    @property
    def store_owner(self) -> str:
        if not self.announce:
            return "the launching gnnbridge process (which hosts it)"
        if self.launcher == "torchrun" and not (self.rank == 0 and self.hosts_store):
            return f"torchrun on node 0 ({self.addr}), or rank 0 (which hosts it)"
        return f"rank 0 (on {self.addr}, which hosts it)"


def rank_main(spec: RankSpec, device_kind: str, worker: Callable[..., Any], args: tuple, timeout_s: float) -> Any:
    """Run ``worker(ctx, *args)`` as rank ``spec.rank``; raise :class:`RankFailedError` (the job's
    first failure) if this rank or any other fails."""
    record_interrupts()
    timeout = datetime.timedelta(seconds=timeout_s)
    raw = _connect(spec, timeout)
    job_store = dist.PrefixStore(spec.namespace, raw)
    store = attempt_store(job_store, spec.attempt)
    ctx: DistContext | None = None
    try:
        ctx = _join(spec, store, device_kind, timeout_s)
        ctx.job_store = job_store
        dist.init_process_group(
            "nccl" if ctx.device.type == "cuda" else "gloo",
            store=dist.PrefixStore("pg/", store),
            rank=spec.rank,
            world_size=spec.world_size,
            timeout=timeout,
        )
        ctx.local_group = _local_groups(ctx)
        result = worker(ctx, *opened(args))  # a mapped record opens here: its refusal is this rank's failure
        store.set(f"done/{spec.rank}", "1")
        ctx.watchdog.stop()  # before the barrier: a peer that finished and left is not dead
        dist.barrier()
        dist.destroy_process_group()
        _leave_together(store, spec.world_size)
        return result
    except BaseException as exc:  # noqa: BLE001 - every failure, Ctrl-C included, must reach the others
        if ctx is not None and ctx.watchdog is not None:
            ctx.watchdog.doing(None)  # no longer in its step: failing is not being stuck there
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
    _check_resolves(spec)
    try:
        return dist.TCPStore(
            spec.addr, spec.port, world_size=None, is_master=spec.hosts_store, wait_for_workers=False, timeout=timeout
        )
    except (RuntimeError, OSError) as exc:
        if spec.hosts_store:
            raise RankFailedError(
                f"Rank 0 cannot listen on {where} ({_last_line(str(exc))}); another job may use "
                "this port: set MASTER_PORT to a free one."
            ) from None
        raise RankFailedError(
            f"Rank {spec.rank} could not reach the job's store at {where} within {timeout.total_seconds():.0f} s: "
            f"rank 0 has not started, or MASTER_ADDR / MASTER_PORT point elsewhere ({spec.launcher} job)."
        ) from None


def _check_resolves(spec: RankSpec) -> None:
    """A host name that does not resolve is one line here; c10d would retry it for the whole
    timeout, logging a C++ stack per attempt."""
    try:
        socket.getaddrinfo(spec.addr, spec.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise RankFailedError(
            f"MASTER_ADDR={spec.addr!r} does not resolve to an address ({reason}); set it to the "
            f"host name or IP address of rank 0's machine ({spec.launcher} job)."
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
    watchdog = Watchdog(
        store.clone(),
        me,
        members,
        timeout_s,
        announce=spec.announce,
        hosts_store=spec.hosts_store,
        store_owner=spec.store_owner,
    ).start()
    return DistContext(
        spec.rank,
        spec.world_size,
        local_rank,
        device,
        local_world_size=len(local),
        node_rank=node_rank,
        num_nodes=len(nodes),
        members=members,
        store=store,
        run_id=run_id,
        watchdog=watchdog,
        attempt=spec.attempt,
    )


def _rendezvous(store, me: Member, world_size: int, timeout_s: float) -> tuple[list[Member], str]:
    """Announce this rank and wait for all; on timeout name the ranks that never came."""
    if me.rank == 0:
        store.set("run_id", uuid.uuid4().hex[:12])  # names this job's shared-memory files
    store.add(f"beat/{me.rank}", 0)
    store.set(f"{DOING}/{me.rank}", "0")  # before the member key: whoever sees every member reads these
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
        s in text for s in ("gloo", "NCCL", "Connection reset", "Connection closed", "Broken pipe")
    )


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
        return (
            f"rank {rank} waited longer than the timeout in a collective: {who} (raise --timeout if "
            f"a step can take that long): {line}"
        )
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


def failed_on(rank: int, line: str) -> PeerFailed:
    """What a rank raises when a check every rank ran together (the dry step) failed on ``rank``
    with ``line``: the very message that rank posts, so whichever posts first, the job reports
    that one line and no rank is left waiting in a collective for a peer that gave up."""
    return PeerFailed(f"rank {rank} failed: {line}")
