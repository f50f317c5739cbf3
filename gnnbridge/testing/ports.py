"""A TCP port for a test's job to listen on, without the "find a free port, then use it" race.

``bind(("127.0.0.1", 0))`` returns a port from the kernel's ephemeral range, which is free only
until the socket closes: any outgoing connection on the machine (a rank connecting to its store,
another test's job) may take it before the job listens, and two calls may even return the same
port. Ports here come from below the ephemeral range, which the kernel never hands out on its
own, split between pytest-xdist workers, and never twice in one process.
"""

from __future__ import annotations

import os
import random
import socket

_given: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(v) for v in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _candidates() -> list[int]:
    low, high = _ephemeral_range()
    pool = range(20000, low) if low - 20000 >= 2000 else range(high + 1, 65536)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    slot = int(worker[2:]) % 16 if worker[2:].isdigit() else 0
    return [p for p in pool if p % 16 == slot and p not in _given]


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port nothing listens on now, that no other call in this session returns."""
    candidates = _candidates()
    random.SystemRandom().shuffle(candidates)
    for port in candidates[:200]:
        if _is_free(port):
            _given.add(port)
            return port
    raise RuntimeError(f"no free port among 200 tried below the ephemeral range {_ephemeral_range()}")
