"""Peak memory of a whole process tree, sampled while it runs, and how busy the rest of the
machine was meanwhile.

Why a tree and why PSS: every runner is a launcher plus the ranks it spawns (and their helpers),
and the ranks share the dataset through shared memory. Summing RSS would count each shared page
once per process that maps it, so two ranks sharing a 2 GB graph would look like 4 GB. PSS
(proportional set size) charges a shared page 1/k to each of the k processes mapping it, so
the sum over the tree is the memory the run really occupies. Where the platform has no PSS
(psutil's ``memory_full_info`` lacks it), RSS is summed instead and the result says so.

Why the rest of the machine: on a shared machine another job's CPU use slows a run down (badly
so for OpenMP thread pools, which spin while they wait), and a timing taken then says little.
The CPU time the whole machine spent outside the measured tree, as a share of all its cores
over the run, is kept with every run so such timings can be recognised.
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:  # typing.Self is Python 3.11+; annotations are not evaluated at runtime here
    from typing import Self

INTERVAL_S = 0.2


def process_memory(proc: psutil.Process) -> tuple[int, str]:
    """``(bytes, "pss" | "rss")`` of one process; (0, ...) once it has gone."""
    try:
        info = proc.memory_full_info()
        if hasattr(info, "pss"):
            return info.pss, "pss"
        return info.rss, "rss"
    except psutil.AccessDenied:  # PSS needs to read smaps; RSS does not
        try:
            return proc.memory_info().rss, "rss"
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return 0, "rss"
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return 0, "pss"


def tree(root: psutil.Process) -> list[psutil.Process]:
    """``root`` and all its descendants (empty once it has gone)."""
    try:
        return [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return []


def cpu_seconds(proc: psutil.Process) -> float | None:
    """User plus system CPU seconds of one process so far (None once it has gone)."""
    try:
        t = proc.cpu_times()
        return t.user + t.system
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent on anything but idling since boot."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def tree_memory(procs: list[psutil.Process]) -> tuple[int, str]:
    """Summed memory of the processes, and the kind (any RSS makes it "rss")."""
    total, kind = 0, "pss"
    for proc in procs:
        used, what = process_memory(proc)
        total += used
        kind = "rss" if what == "rss" and used else kind
    return total, kind


class PeakSampler:
    """Samples :func:`tree_memory` of one pid's tree every ``interval`` seconds in a daemon thread
    and keeps the largest sum, and the latest CPU time of each process in the tree. Reading PSS
    costs about a millisecond per GB mapped, so the sampler takes well under 1% of a core from
    the run it measures."""

    def __init__(self, pid: int, interval: float = INTERVAL_S):
        self.root = psutil.Process(pid)
        self.interval = interval
        self.peak_bytes, self.kind, self.samples = 0, "pss", 0
        self.cpu_by_pid: dict[tuple[int, float], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        procs = tree(self.root)
        for proc in procs:  # keyed by creation time too: a pid can be reused
            seconds = cpu_seconds(proc)
            if seconds is not None:
                self.cpu_by_pid[proc.pid, proc.create_time()] = seconds
        used, kind = tree_memory(procs)
        if used > self.peak_bytes:
            self.peak_bytes, self.kind = used, kind
        self.samples += 1

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Monitored:
    """What :func:`run_monitored` saw: exit code, captured stdout (or ""), wall time, peak memory,
    and the share of the machine's CPU time spent outside the run (0 on an otherwise idle machine;
    a slight overestimate, as each process's last fraction of a second of CPU is not seen)."""

    returncode: int
    stdout: str
    wall_s: float
    peak_bytes: int
    memory_kind: str
    samples: int
    other_cpu_share: float


def run_monitored(cmd: list[str], capture: bool = False, **popen) -> Monitored:
    """Run ``cmd`` to completion while sampling its tree's memory. ``capture`` keeps stdout
    (the hand-written scripts print their JSON there); stderr always goes to ours, so a long
    run shows it is alive."""
    start, busy = time.perf_counter(), machine_busy_seconds()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE if capture else None, text=True, **popen)
    with PeakSampler(proc.pid) as sampler:
        out, _ = proc.communicate()
    wall, busy = time.perf_counter() - start, machine_busy_seconds() - busy
    other = max(0.0, busy - sum(sampler.cpu_by_pid.values())) / (wall * (psutil.cpu_count() or 1))
    return Monitored(proc.returncode, out or "", wall, sampler.peak_bytes, sampler.kind, sampler.samples, other)


# --------------------------------------------------------------------------- anonymous memory

STATUS_FIELDS = ("RssAnon", "RssFile", "RssShmem")


def status_kib(pid: int) -> dict[str, int]:
    """RssAnon, RssFile and RssShmem (KiB) of one process from ``/proc/PID/status``, and its
    ``read_bytes``/``write_bytes`` from ``/proc/PID/io`` (bytes it made the disk move); {} once gone."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in STATUS_FIELDS:
                    out[key] = int(value.split()[0])
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("read_bytes", "write_bytes"):
                    out[key] = int(value)
    except (OSError, ValueError):
        pass
    return out


class StatusSampler(PeakSampler):
    """The peak over time of each of RssAnon, RssFile and RssShmem summed over the tree, and
    the disk bytes each process read and wrote (its last value seen).

    Why RssAnon, not PSS: for a dataset memory-mapped from files, the file pages a process has
    touched count in its RSS and PSS but the kernel drops them when memory is short, so they
    say nothing about whether a graph larger than RAM fits. The memory a run really claims is
    its anonymous memory (heap, tensors, caches). RssShmem is kept apart: /dev/shm copies would
    hide there (summed per process, so a segment shared by k processes counts k times)."""

    def __init__(self, pid: int, interval: float = INTERVAL_S):
        super().__init__(pid, interval)
        self.peak_kib = dict.fromkeys(STATUS_FIELDS, 0)
        self.io_by_pid: dict[tuple[int, float], dict] = {}

    def sample(self) -> None:
        sums = dict.fromkeys(STATUS_FIELDS, 0)
        for proc in tree(self.root):
            got = status_kib(proc.pid)
            for key in STATUS_FIELDS:
                sums[key] += got.get(key, 0)
            try:
                if "read_bytes" in got:
                    self.io_by_pid[proc.pid, proc.create_time()] = got
            except psutil.NoSuchProcess:
                pass
        for key, value in sums.items():
            self.peak_kib[key] = max(self.peak_kib[key], value)
        self.samples += 1

    def disk_bytes(self, key: str) -> int:
        return sum(io[key] for io in self.io_by_pid.values())


def run_status(cmd: list[str], **popen) -> dict:
    """Run ``cmd`` to completion under :class:`StatusSampler`: exit code, wall seconds, peak
    RssAnon / RssFile / RssShmem of the tree (bytes) and the disk bytes it read and wrote."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, **popen)
    with StatusSampler(proc.pid) as sampler:
        proc.wait()
    return {
        "returncode": proc.returncode,
        "wall_s": time.perf_counter() - start,
        **{f"peak_{k.lower()}_bytes": v * 1024 for k, v in sampler.peak_kib.items()},
        "disk_read_bytes": sampler.disk_bytes("read_bytes"),
        "disk_write_bytes": sampler.disk_bytes("write_bytes"),
        "samples": sampler.samples,
    }
