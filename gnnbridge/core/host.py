"""What this machine can still give: free memory and free disk, read before a value decides how
much to allocate.

A value in a file or a config (a label of 10**9, ``model.hidden=10**7``, an array header that
claims 10**12 elements) must never size an allocation unchecked: the kernel's out-of-memory
killer ends the process without a word, and a disk filled by a checkpoint takes the user's other
files down with it. Callers compare their estimate with these numbers and refuse in one line.

Memory is the smaller of the kernel's ``MemAvailable`` and what the process's cgroup (a
container, a SLURM allocation) still allows; psutil would add a dependency for one number.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

UNKNOWN = 1 << 62  # when the platform does not say: assume plenty rather than refuse real work


def available_memory() -> int:
    """Bytes this process can still allocate without swapping or being killed."""
    return min(_meminfo_available(), _cgroup_headroom())


def free_disk(path: str | os.PathLike) -> int:
    """Free bytes on the file system that holds ``path`` (or its nearest existing parent)."""
    try:
        folder = Path(os.path.abspath(path))
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        usage = shutil.disk_usage(folder)
    except (OSError, ValueError):
        return UNKNOWN  # the write itself will say what is wrong with the path
    return usage.free if usage.total else UNKNOWN  # total 0: /proc, /sys ... (not storage; writes fail anyway)


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1024 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PB"  # pragma: no cover - the loop always returns


def _meminfo_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return UNKNOWN


def _cgroup_headroom() -> int:
    """The cgroup's limit minus its usage (v2, else v1); UNKNOWN without a limit."""
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            limit = Path(limit_file).read_text().strip()
            usage = int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or not limit.isdigit() or int(limit) >= UNKNOWN:
            return UNKNOWN
        return max(0, int(limit) - usage)
    return UNKNOWN
