"""Failing fast: every rank learns within seconds that another rank failed, and stops.

A DDP job is only as alive as its least alive rank. A rank that raises, is killed (SIGKILL,
out-of-memory killer) or whose machine disappears leaves its peers blocked in a collective: gloo
notices a closed socket at once, NCCL only after its timeout, and a rank waiting on the store
(data loading, the rendezvous) never notices at all. So every rank runs a :class:`Watchdog`
thread that talks to the job's store on its own connection:

* it **beats** (``beat/<rank>`` += 1) every second;
* it **polls** ``abort``: the first failure message, posted once with ``compare_set`` so the
  first failure wins and a peer's consequential "connection reset" never hides the cause;
* it checks the **pids** of the ranks on its own host (a killed rank is seen within a second);
* each node's first rank checks the **beats** of all ranks (a lost machine is seen after
  ``timeout_s``);
* it publishes this rank's **progress** (steps taken), so a rank that times out in a collective
  can name the peer that is stuck behind;
* it **times the step**: the main thread says what it is doing (:meth:`Watchdog.doing`, e.g. "its
  forward pass of epoch 1, step 3"); a rank stuck there for ``timeout_s`` ends the job, naming
  itself and that. A rank stuck in Python or C compute never reaches a collective, so no
  collective timeout would ever fire: with every rank stuck in ``forward`` the job would wait
  forever. Each change of activity is counted, and every rank passes through the same ones
  (equal shards, the same phases per step), so a lower count means *behind*: a rank stuck
  waiting in a collective sees a peer behind it and leaves the report to that peer (or, if a
  peer stopped beating, to the checks above that name a dead one).

On an abort it runs the cleanups registered with :meth:`Watchdog.on_abort` (remove a half-made
run folder, unlink shared-memory files), prints the message if it is this node's turn, and ends
the process with ``os._exit(1)``: the main thread may be blocked inside a C++ collective where
no Python exception can reach it. SIGTERM (sent by torchrun, srun or torch's elastic agent to the
survivors) takes the same path through a wakeup socket, so it works even while the main thread
is blocked.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

ABORT = "abort"
DOING = "doing"  # doing/<rank>: how many activities the rank has begun (see Watchdog.doing)
INTERVAL_S = 1.0
LEAVE_GRACE_S = 5.0
SIGTERM_GRACE_S = 3.0  # a launcher's SIGTERM follows a failure: give its message time to arrive
SIGTERM_STOP = "was stopped by SIGTERM (from its launcher, or a user)"
STORE_ERRORS = (RuntimeError, OSError)  # what a store call raises once its server is gone (DistError included)


@dataclass(frozen=True)
class Member:
    """One rank as it announced itself at the rendezvous."""

    rank: int
    node: str
    host: str
    boot: str  # kernel boot id and pid namespace: containers may share a host name but not pids
    pid: int

    @classmethod
    def here(cls, rank: int, node: str) -> Member:
        return cls(rank, node, socket.gethostname(), _boot_id(), os.getpid())

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, text: bytes | str) -> Member:
        return cls(**json.loads(text))

    def same_host(self, other: Member) -> bool:
        return (self.host, self.boot) == (other.host, other.boot)


def post_failure(store, message: str) -> str:
    """Post ``message`` as the job's failure unless one is already there; return the one that won."""
    return store.compare_set(ABORT, "", message).decode()


def posted_failure(store) -> str | None:
    return store.get(ABORT).decode() if store.check([ABORT]) else None


def claim_report(store, node: str, rank: int, fallback: bool) -> bool:
    """True for exactly one rank per node: the one that prints the failure line there.
    ``fallback`` answers when the store is gone (True for one rank per node)."""
    try:
        return store.compare_set(f"reported/{node}", "", str(rank)).decode() == str(rank)
    except STORE_ERRORS:
        return fallback


def leave(store, hosts_store: bool, joined: int) -> None:
    """Say this rank has read the failure. The rank hosting the store then waits (briefly) for
    the ``joined`` others to do so: its exit takes the store, and the message, with it."""
    with contextlib.suppress(*STORE_ERRORS):
        store.add("left", 1)
        deadline = time.monotonic() + LEAVE_GRACE_S
        while hosts_store and int(store.add("left", 0)) < joined and time.monotonic() < deadline:
            time.sleep(0.1)


def record_for_launcher(message: str) -> None:
    """Hand the failure line to torchrun, whose end-of-job summary then shows it as the root
    cause instead of "error_file: <N/A>" (the format of torchelastic's ``@record``)."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    payload = {
        "message": {"message": message, "extraInfo": {"py_callstack": message, "timestamp": str(int(time.time()))}}
    }
    with contextlib.suppress(OSError), open(path, "w") as f:
        json.dump(payload, f)


class Watchdog:
    """Per-rank guardian thread; see the module docstring."""

    def __init__(
        self,
        store,
        me: Member,
        members: list[Member],
        timeout_s: float,
        *,
        announce: bool,
        hosts_store: bool,
        store_owner: str,
    ):
        self.store = store  # a connection of its own (clone), never shared with the main thread
        self.me = me
        self.timeout_s = timeout_s
        self.announce = announce  # print the failure line (jobs); the --nproc launcher prints it otherwise
        self.hosts_store = hosts_store
        self.store_owner = store_owner  # who hosts the store, for the message when it is gone
        self.joined = len(members)
        self.neighbours = [m for m in members if m.rank != me.rank and m.same_host(me)]
        self.node_leader = me.rank == min(m.rank for m in members if m.node == me.node)
        self.peers = [m for m in members if m.rank != me.rank]
        self.progress = 0  # steps taken by this rank (DistContext.advance); published with the beat
        self._published = -1
        self._activity: tuple[str | None, int, float] = (None, 0, 0.0)  # what, how many so far, since when
        self._published_moves = 0
        self._peer_beats: tuple[list[bytes], float] | None = None  # peers' beats, when seen, in a long step
        self._last_beat: dict[int, tuple[int, float]] = {}
        self._cleanups: list[Callable[[], None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gnnbridge-watchdog", daemon=True)
        self._wakeup: socket.socket | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Watchdog:
        self._catch_sigterm()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (before the final barrier: a peer that finished and exited is not dead)."""
        self._stop.set()
        self._thread.join(timeout=5 * INTERVAL_S)
        self._release_sigterm()

    def doing(self, what: str | None) -> None:
        """Say what the main thread does from now on (``"its forward pass of epoch 1, step 3"``);
        ``None``: nothing to time (waits whose length is not a step's, bounded elsewhere)."""
        self._activity = (what, self._activity[1] + 1, time.monotonic())  # one assignment: no lock

    def on_abort(self, cleanup: Callable[[], None]) -> None:
        self._cleanups.append(cleanup)

    def run_cleanups(self) -> None:
        while self._cleanups:
            try:
                self._cleanups.pop()()
            except Exception:  # noqa: BLE001, S110 - a failing cleanup must not keep the others from running
                pass

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL_S):
            try:
                self._beat()
                message = (
                    posted_failure(self.store) or self._dead_neighbour() or self._silent_peer() or self._stuck_here()
                )
                if not message and self._signalled():
                    message = self._cause_of_sigterm()
            except STORE_ERRORS:
                if self._stop.is_set():
                    return
                self._abort(f"lost the job's store: {self.store_owner} is gone", post=False)
                return
            if message:
                self._abort(message, post=True)

    def _beat(self) -> None:
        self.store.add(f"beat/{self.me.rank}", 1)
        if self.progress != self._published:
            self._published = self.progress
            self.store.set(f"progress/{self.me.rank}", str(self._published))
        moves = self._activity[1]
        if moves != self._published_moves:
            self._published_moves = moves
            self.store.set(f"{DOING}/{self.me.rank}", str(moves))

    def _cause_of_sigterm(self) -> str:
        """Launchers SIGTERM the survivors right after a rank fails: look for that failure first."""
        deadline = time.monotonic() + SIGTERM_GRACE_S
        while time.monotonic() < deadline:
            found = posted_failure(self.store) or self._dead_neighbour()
            if found:
                return found
            time.sleep(0.1)
        return f"rank {self.me.rank} {SIGTERM_STOP}"

    def _dead_neighbour(self) -> str | None:
        for m in self.neighbours:
            if not _pid_alive(m.pid) and not self._finished(m.rank):
                return (
                    f"rank {m.rank} (pid {m.pid} on {m.host}) died without a Python error "
                    "(killed by a signal or the out-of-memory killer?)"
                )
        return None

    def _silent_peer(self) -> str | None:
        if not self.node_leader or not self.peers:
            return None
        now = time.monotonic()
        counts = self.store.multi_get([f"beat/{m.rank}" for m in self.peers])  # created at the rendezvous
        for m, raw in zip(self.peers, counts):
            last, since = self._last_beat.get(m.rank, (-1, now))
            if int(raw) != last:
                self._last_beat[m.rank] = (int(raw), now)
            elif now - since > self.timeout_s and not self._finished(m.rank):
                return (
                    f"rank {m.rank} on {m.host} sent no heartbeat for {self.timeout_s:.0f} s "
                    "(its process or its machine is gone)"
                )
        return None

    def _stuck_here(self) -> str | None:
        """This rank's line if it has done one thing for longer than the timeout and no peer is
        behind it (a peer behind is what this rank waits for: that peer reports itself)."""
        what, moves, since = self._activity
        stuck_s = time.monotonic() - since
        if what is None or stuck_s <= self.timeout_s:
            self._peer_beats = None
            return None
        if self.peers:
            now, beats = time.monotonic(), self.store.multi_get([f"beat/{m.rank}" for m in self.peers])
            if self._peer_beats is None or now - self._peer_beats[1] < 2 * INTERVAL_S:
                self._peer_beats = self._peer_beats or (beats, now)
                return None  # look again once every live peer has beaten
            silent = any(a == b for a, b in zip(beats, self._peer_beats[0]))
            self._peer_beats = (beats, now)
            if silent:  # a peer that is gone is what this rank waits for: the checks of the dead name it
                return None
            if min(int(v) for v in self.store.multi_get([f"{DOING}/{m.rank}" for m in self.peers])) < moves:
                return None
        return (
            f"rank {self.me.rank} has been in {what} for {stuck_s:.0f} s (--timeout {self.timeout_s:g}): it is "
            "stuck there, or a step takes that long (then raise --timeout)"
        )

    def _finished(self, rank: int) -> bool:
        return self.store.check([f"done/{rank}"])

    def _abort(self, message: str, *, post: bool) -> None:
        if post:
            with contextlib.suppress(*STORE_ERRORS):
                message = post_failure(self.store, message)
        self.run_cleanups()
        record_for_launcher(message)
        if self.announce and claim_report(self.store, self.me.node, self.me.rank, fallback=self.node_leader):
            print(f"Error: {message}", file=sys.stderr, flush=True)
        leave(self.store, self.hosts_store, self.joined)
        # A job stopped by SIGTERM (and nothing before it) exits as the shell expects: 128 + 15.
        os._exit(128 + signal.SIGTERM if message.endswith(SIGTERM_STOP) else 1)

    # ------------------------------------------------------------------ SIGTERM

    def _catch_sigterm(self) -> None:
        """Route SIGTERM to this thread: the C-level handler writes to a socket even while the main
        thread is blocked in C++. The Python-level handler does nothing (it only replaces the
        default, which would kill the process before the cleanups): all work happens here."""
        if threading.current_thread() is not threading.main_thread():
            return
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        self._wakeup, self._writer = reader, writer
        self._old_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._old_handler = signal.signal(signal.SIGTERM, _ignore)

    def _signalled(self) -> bool:
        if self._wakeup is None:
            return False
        try:
            return signal.SIGTERM in self._wakeup.recv(64)
        except (BlockingIOError, OSError):
            return False

    def _release_sigterm(self) -> None:
        if self._wakeup is None or threading.current_thread() is not threading.main_thread():
            return
        signal.set_wakeup_fd(self._old_fd)
        signal.signal(signal.SIGTERM, self._old_handler)
        self._wakeup.close()
        self._writer.close()
        self._wakeup = None


def _ignore(signum, frame) -> None:
    pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a dead child not yet reaped by its parent is a zombie: dead for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _boot_id() -> str:
    parts = []
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as f:
        parts.append(f.read().strip())
    with contextlib.suppress(OSError):
        parts.append(str(os.stat("/proc/self/ns/pid").st_ino))
    return "/".join(parts)
